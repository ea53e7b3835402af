"""The one way this tool writes a file: claimed under a name no other run uses, written to a
temporary file beside its place and renamed into it, so that a full disk or a crash never leaves
a truncated report behind."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from diagnose.errors import OutputFailed


class WriteFailed(Exception):
    """A file could not be written; the caller says which files it kept."""

    def __init__(self, path: Path, exc: BaseException):
        super().__init__(f"{path}: {exc}")
        self.path, self.reason = path, reason_of(exc)


def reason_of(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def prepare_output_dir(out_dir: Path, probe: bool = False) -> None:
    """Creates the output directory; OutputFailed (exit 11) when it cannot be created or, with
    `probe`, written to (checked with a file created and removed at once: before sampling, so
    that a read-only directory is said before the window, not after)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputFailed(f"could not create the output directory {out_dir}: "
                           f"it exists and is not a directory")
    except OSError as exc:
        raise OutputFailed(f"could not create the output directory {out_dir}: {reason_of(exc)}")
    if probe:
        test = out_dir / f".diagnose-write-test-{os.getpid()}"
        try:
            os.close(os.open(test, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise OutputFailed(f"cannot write to the output directory {out_dir}: "
                               f"{reason_of(exc)}")
        remove_quietly(test)


def claim_name(out_dir: Path, base: str, suffixes: Iterable[str]) -> str:
    """`base`, or `base-2`, `base-3`, ...: the first name under which no file of any of
    `suffixes` exists, claimed by creating its file of the first suffix exclusively, so that two
    runs at once never pick the same name."""
    suffixes = tuple(suffixes)
    for n in range(1, 1000):
        name = base if n == 1 else f"{base}-{n}"
        if any(os.path.lexists(out_dir / f"{name}{ext}") for ext in suffixes[1:]):
            continue
        claim = out_dir / f"{name}{suffixes[0]}"
        try:
            os.close(os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return name
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputFailed(f"could not write {claim}: {reason_of(exc)}; no report file was "
                               f"written")
    raise OutputFailed(f"could not write a report named {base} in {out_dir}: 999 reports of "
                       f"that name exist")


def write_atomically(path: Path, produce: Callable[[Path], object]) -> None:
    """`produce(tmp)` writes the file's content to a temporary file beside `path`, which then
    replaces `path`. WriteFailed when it cannot; the temporary file is removed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        produce(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        remove_quietly(tmp)
        raise WriteFailed(path, exc) from None


def write_text(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    write_atomically(path, lambda tmp: tmp.write_bytes(data))


def move_file(source_path: Path, path: Path) -> None:
    """Renames `source_path` to `path` (no space needed on the same filesystem), else copies it
    and removes the source only once the copy is whole."""
    try:
        os.replace(source_path, path)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise WriteFailed(path, exc) from None
    write_atomically(path, lambda tmp: shutil.copyfile(source_path, tmp))
    remove_quietly(source_path)


def write_report(out_dir: Path, base: str, report: dict, html: str,
                 markdown: Callable[[str], str] | None = None) -> tuple[Path, Path]:
    """`base.json` and `base.html` under `out_dir`, each whole or not at all; a name already taken
    gets a suffix (the same rules as the diagnosis reports). `markdown`: also `base.md`, its text
    made from the HTML file's name (which the summary names); it is `json_path.with_suffix(".md")`."""
    prepare_output_dir(out_dir)
    suffixes = (".json", ".html", ".md") if markdown is not None else (".json", ".html")
    base = claim_name(out_dir, base, suffixes)
    json_path, html_path = out_dir / f"{base}.json", out_dir / f"{base}.html"
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    try:
        write_text(json_path, text)
        write_text(html_path, html)
        if markdown is not None:
            write_text(out_dir / f"{base}.md", markdown(html_path.name))
    except WriteFailed as exc:
        raise OutputFailed(f"could not write {exc.path}: {exc.reason}") from None
    return json_path, html_path
