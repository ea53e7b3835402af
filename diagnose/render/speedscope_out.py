"""Writes a profile in the speedscope file format (for inputs that were not speedscope)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from diagnose.samples.profile import Profile

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def _header(profile: Profile, track) -> tuple[dict, list | np.ndarray]:
    counts = track.counts
    weights = counts * profile.interval_s if counts is not None else track.weights
    name = (f"Process {track.pid} " if track.pid is not None else "") + f'Thread {track.tid} "{track.name}"'
    return ({"type": "sampled", "name": name, "unit": "seconds", "startValue": 0.0,
             "endValue": float(np.sum(weights)) if len(weights) else 0.0}, weights)


def profile_to_speedscope(profile: Profile, name: str) -> dict:
    frames = [{"name": f.function, "file": f.file, "line": f.line} for f in profile.frames]
    profiles = []
    for track in profile.threads:
        header, weights = _header(profile, track)
        profiles.append({**header, "samples": [list(profile.stacks[int(s)]) for s in track.stack_ids],
                         "weights": np.asarray(weights, dtype=np.float64).tolist()})
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": name, "activeProfileIndex": 0, "exporter": "diagnose"}


def write_speedscope(profile: Profile, path: Path, name: str) -> None:
    """The same document as `profile_to_speedscope`, written piece by piece: each distinct
    stack's text is made once and the samples are those texts taken by stack id (no list per
    sample), the weights written from their array."""
    # Every stack's frame list as JSON without its brackets: one orjson call over all stacks,
    # cut apart between them (`[[1,2],[3]]` -> `1,2` and `3`).
    stack_texts = np.array(orjson.dumps(profile.stacks)[2:-2].split(b"],[") if profile.stacks
                           else [b""], dtype=object)
    frames = [{"name": f.function, "file": f.file, "line": f.line} for f in profile.frames]
    with open(path, "wb") as fh:
        fh.write(b'{"$schema":' + orjson.dumps(SCHEMA) + b',"shared":'
                 + orjson.dumps({"frames": frames}) + b',"profiles":[')
        for index, track in enumerate(profile.threads):
            header, weights = _header(profile, track)
            fh.write((b"," if index else b"") + orjson.dumps(header)[:-1] + b',"samples":[')
            ids = np.asarray(track.stack_ids, dtype=np.int64)
            for start in range(0, len(ids), 1 << 20):
                fh.write((b",[" if start else b"[") + b"],[".join(stack_texts[ids[start:start + (1 << 20)]])
                         + b"]")
            fh.write(b'],"weights":' + orjson.dumps(np.ascontiguousarray(weights, dtype=np.float64),
                                                    option=orjson.OPT_SERIALIZE_NUMPY) + b"}")
        fh.write(b'],"name":' + orjson.dumps(name) + b',"activeProfileIndex":0,"exporter":"diagnose"}')

