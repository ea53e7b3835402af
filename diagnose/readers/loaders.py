"""Reads profiles recorded by py-spy: speedscope JSON (per-sample order) and collapsed text."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from diagnose.errors import BadProfile
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.readers.visibility import assess_waits
from diagnose.readers import speedscope_stream
from diagnose.bounded_read import read_bounded, read_chunks
from diagnose.readers.collapsed import load_collapsed
from diagnose.readers.frames import PROCESS_PSEUDO, THREAD_PSEUDO, is_native_frame, parse_tid

# py-spy names a speedscope profile `Thread 1945 "req-0"` (tid may be hex on some platforms).
# With --subprocesses: `Process 4340 Thread 4340 "MainThread"`.
_PROFILE_NAME = re.compile(r'^(?:Process (\d+) )?Thread (\d+|0x[0-9a-fA-F]+)(?: "(.*)")?$', re.S)


# A py-spy recording of minutes of a busy service is tens of MB; beyond this a file is refused
# before it is read (it would take memory several times its size to parse).
MAX_PROFILE_BYTES = 512 << 20


def read_input(path: str | Path, what: str = "profile", limit: int | None = None) -> bytes:
    """The bytes of a file given to `analyze`, read with a size cap: a regular file or a pipe
    (`<(py-spy ...)`), never a device or socket. Every failure is a BadProfile naming the file."""
    limit = MAX_PROFILE_BYTES if limit is None else limit
    return read_bounded(path, what, limit, BadProfile, hint="record a shorter window")


def _parse_json(text: str, path) -> object:
    try:
        # strict=False: py-spy writes thread names with raw control characters unescaped.
        return json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise BadProfile(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); "
                         f"a truncated or damaged file?")


def decode_input(raw: bytes, path: str | Path, what: str = "profile") -> str:
    """Text of a profile: UTF-8 (undecodable bytes replaced: a thread or file name in another
    encoding is no reason to refuse the samples), or UTF-16 with its byte-order mark. A binary
    file (compressed, or NUL bytes) is refused."""
    if raw.startswith(b"\x1f\x8b"):
        raise BadProfile(f"{path}: gzip-compressed; decompress it first (gunzip)")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            raise BadProfile(f"{path}: not a {what}: broken UTF-16 text")
    if b"\x00" in raw[:65536]:
        raise BadProfile(f"{path}: a binary file, not a {what} (expected a py-spy speedscope "
                         f"JSON file or collapsed stacks)")
    return raw.decode("utf-8", "replace").removeprefix("\ufeff")


def load_profile(path: str | Path, rate_hz: float | None = None) -> Profile:
    """`rate_hz`: the sampling rate when known, for a format that does not state it
    (chrometrace, readers/chrometrace.py)."""
    path = Path(path)
    try:
        streamed = _load_streamed(path)
    except BadProfile:
        raise
    except RecursionError:
        raise BadProfile(f"{path}: not a profile: nested too deeply")
    except MemoryError:
        raise BadProfile(f"{path}: too large to parse in the memory available")
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise BadProfile(f"{path}: not a valid py-spy profile ({type(exc).__name__}: "
                         f"{str(exc)[:120]})")
    if streamed is not None:
        return streamed
    raw = read_input(path)
    if not raw or raw.isspace():  # (not raw.strip(): a copy of the whole file)
        raise BadProfile(f"{path}: the file is empty")
    text = decode_input(raw, path)
    del raw
    try:
        if text.lstrip().startswith("{"):
            text, arrays = _lift_sample_arrays(text)
            data = _parse_json(text, path)
            del text
            return load_speedscope(data, str(path), arrays)
        if text.lstrip().startswith("["):
            from diagnose.readers.chrometrace import load_chrometrace
            data = _parse_json(text, path)
            del text
            return load_chrometrace(data, str(path), rate_hz)
        return load_collapsed(text, str(path))
    except BadProfile:
        raise
    except RecursionError:
        raise BadProfile(f"{path}: not a profile: nested too deeply")
    except MemoryError:
        raise BadProfile(f"{path}: too large to parse in the memory available")
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        # a value of the wrong type or range where the format wants another (json's own
        # limits too: an integer of thousands of digits)
        raise BadProfile(f"{path}: not a valid py-spy profile ({type(exc).__name__}: "
                         f"{str(exc)[:120]})")


def _load_streamed(path: Path) -> Profile | None:
    """A speedscope file (a regular file, UTF-8) read in chunks, its sample arrays parsed as
    they stream by (readers/speedscope_stream.py): never the whole file in memory, nor a Python
    object per sample. None when the file is something else (or has arrays of another shape):
    the caller then reads it whole."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    chunks = read_chunks(path, "profile", MAX_PROFILE_BYTES, BadProfile, hint="record a shorter window")
    head = b""
    for chunk in chunks:
        head += chunk
        if head.strip() or len(head) > (1 << 20):
            break
    start = head.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
    if not start.startswith(b"{") or b"\x00" in head[:65536]:
        chunks.close()
        return None
    try:
        lifted = speedscope_stream.lift(chunks, head)
    except speedscope_stream.Unexpected:
        return None
    except speedscope_stream.Truncated as exc:
        raise BadProfile(f"{path}: not valid JSON ({exc}); a truncated or damaged file?")
    finally:
        chunks.close()
    data = _parse_json(lifted.skeleton.decode("utf-8", "replace").removeprefix("\ufeff"), path)
    del lifted.skeleton
    return load_speedscope(data, str(path), lifted.arrays, lifted.raw_stacks)


# A sampled profile's "samples" (a list of int lists) and "weights" (numbers) are nearly all of
# a large file. Parsed by json they become millions of small lists; lifted out as text first,
# the samples are interned by their text (one parse per distinct stack) and the weights parsed
# by numpy. The placeholders left behind are plain strings, so json parses the rest as usual.
_SAMPLES_ARRAY = re.compile(r'"samples"\s*:\s*\[\s*((?:\[[0-9,\s]*\]\s*,?\s*)*)\]')
_WEIGHTS_ARRAY = re.compile(r'"weights"\s*:\s*\[([0-9eE.,+\-\s]*)\]')
_LIFTED = "@@diagnose-lifted:"


def _lift_sample_arrays(text: str) -> tuple[str, list[str]]:
    arrays: list[str] = []

    def lift(kind: str):
        def replace(match: re.Match) -> str:
            arrays.append(match.group(1))
            return f'"{kind}": "{_LIFTED}{len(arrays) - 1}"'
        return replace

    text = _SAMPLES_ARRAY.sub(lift("samples"), text)
    text = _WEIGHTS_ARRAY.sub(lift("weights"), text)
    return text, arrays


def _lifted(value, arrays: list[str] | None):
    """The lifted text for a placeholder, or None when the value was parsed by json."""
    if arrays is not None and isinstance(value, str) and value.startswith(_LIFTED):
        return arrays[int(value[len(_LIFTED):])]
    return None


def _sample_texts(raw: str) -> list[str]:
    raw = raw.strip().rstrip(",").strip()
    if not raw:
        return []
    inner = raw.replace(" ", "").replace("\n", "")
    return inner[1:-1].split("],[")


def load_speedscope(data: object, label: str = "profile", arrays: list | None = None,
                    raw_stacks: list[tuple[int, ...]] | None = None) -> Profile:
    """`arrays`: the lifted arrays the placeholders name: text (`_lift_sample_arrays`), or
    parsed by readers/speedscope_stream.py (sample ids into `raw_stacks`, weights as floats)."""
    if not isinstance(data, dict) or "profiles" not in data or "shared" not in data:
        raise BadProfile(f"{label}: JSON but not a speedscope profile (no 'profiles'/'shared')")
    shared_frames = data["shared"].get("frames", [])
    profile = Profile(source="speedscope")
    # Map each speedscope frame to our interned frame id, or None for pseudo-frames.
    mapped: list[int | None] = []
    pseudo_tid: dict[int, int] = {}
    for i, f in enumerate(shared_frames):
        name, file, line = str(f.get("name", "?")), str(f.get("file") or ""), int(f.get("line") or 0)
        match = THREAD_PSEUDO.match(name)
        if match and not file:
            pseudo_tid[i] = parse_tid(match.group(1))
            mapped.append(None)
            continue
        if PROCESS_PSEUDO.match(name) and not file:
            mapped.append(None)
            continue
        native = is_native_frame(name, file, line)
        profile.native = profile.native or native
        mapped.append(profile.intern_frame(Frame(name, file, line, native)))
    intervals = []
    raw_map: np.ndarray | None = None
    for index, prof in enumerate(data["profiles"]):
        if prof.get("type") != "sampled":
            raise BadProfile(f"{label}: only sampled speedscope profiles are supported "
                             f"(profile {index} is {prof.get('type')!r})")
        name = str(prof.get("name", f"thread {index}"))
        match = _PROFILE_NAME.match(name)
        tid, thread_name = (parse_tid(match.group(2)), match.group(3) or "") if match else (index, name)
        pid = int(match.group(1)) if match and match.group(1) else None
        samples, weights = prof.get("samples", []), prof.get("weights", [])
        lifted = _lifted(samples, arrays)
        raw_ids = lifted.ids if isinstance(lifted, speedscope_stream.RawSamples) else None
        parse: Callable[[Any], tuple[int, ...]] = tuple
        if raw_ids is not None:
            samples = raw_ids
        elif lifted is not None:
            samples = _sample_texts(lifted)
            parse = _parse_sample_text
        lifted = _lifted(weights, arrays)
        try:
            if isinstance(lifted, np.ndarray):
                w = lifted
            elif lifted is not None:
                w = np.array(lifted.replace("\n", "").split(",") if lifted.strip() else [],
                             dtype=np.float64)
            else:
                w = np.asarray(weights, dtype=np.float64)
        except ValueError:
            raise BadProfile(f"{label}: profile {name!r} has weights that are not numbers")
        if len(samples) != len(w):
            raise BadProfile(f"{label}: profile {name!r} has {len(samples)} samples "
                             f"but {len(w)} weights")
        if raw_ids is not None and raw_stacks is not None:
            if raw_map is None:
                raw_map = np.full(len(raw_stacks), -1, dtype=np.int32)
            # Each distinct stack of this profile mapped once, new ones interned in order of
            # first appearance (as the per-sample loop below does); samples by numpy.
            try:
                for raw in pd.unique(raw_ids).tolist():  # in order of first appearance, by hashing
                    if raw_map[raw] < 0:
                        raw_map[raw] = profile.intern_stack(
                            tuple(m for m in (mapped[k] for k in raw_stacks[raw]) if m is not None))
            except (IndexError, TypeError, ValueError):
                raise BadProfile(f"{label}: profile {name!r} refers to frames that do not exist")
            if len(w):
                intervals.append(_median(w))
            profile.threads.append(ThreadTrack(tid, thread_name, raw_map[raw_ids], w,
                                               pid=pid))
            continue
        ids = np.empty(len(samples), dtype=np.int32)
        cache: dict = {}
        try:
            for j, sample in enumerate(samples):
                key = sample if parse is _parse_sample_text else tuple(sample)
                sid = cache.get(key)
                if sid is None:
                    stack = tuple(m for m in (mapped[k] for k in parse(sample)) if m is not None)
                    sid = cache[key] = profile.intern_stack(stack)
                ids[j] = sid
        except (IndexError, TypeError, ValueError):
            raise BadProfile(f"{label}: profile {name!r} refers to frames that do not exist")
        if len(w):
            intervals.append(_median(w))
        profile.threads.append(ThreadTrack(tid, thread_name, ids, w, pid=pid))
    if not profile.threads:
        raise BadProfile(f"{label}: the speedscope file holds no profiles")
    if intervals and prof.get("unit", "seconds") == "seconds":
        profile.interval_s = float(np.median(intervals))
    assess_waits(profile)
    return profile


def _median(weights: np.ndarray) -> float:
    """The median weight; of one number held once (readers/speedscope_stream.py), that number."""
    if weights.strides == (0,):
        return float(weights[0])
    return float(np.median(weights))


def _parse_sample_text(text: str) -> tuple[int, ...]:
    return tuple(int(k) for k in text.split(",")) if text else ()
