"""Time from the window's end to the printed verdict of one `diagnose attach`.

    python benchmarks/attach_timing.py PID --duration 10 [attach options]

Runs `diagnose attach` in this process with its capture and its `finish` (which prints the
verdict) wrapped, and prints `ATTACH-TIMING wall=… cpu=… after_window=…` to stderr: wall and
cpu from the end of the capture, after_window from the window's end (the window `finish` is
given, where the tree passes one). The same measurement works for any tree that has
`diagnose.collect.capture.capture` and `diagnose.cli.attach.finish` (the branch point's too), so
a before/after pair needs no timing code in the tree measured. The tree measured is the one
`import diagnose` finds (put it first on PYTHONPATH).
"""

from __future__ import annotations

import sys
import time

import diagnose.cli.attach  # noqa: F401  (the module, not the click command of that name)
import diagnose.collect.capture as collect_attach

cli_attach = sys.modules["diagnose.cli.attach"]
_ended: dict[str, tuple[float, float]] = {}
_capture, _finish = collect_attach.capture, cli_attach.finish


def _timed_capture(*args, **kwargs):
    try:
        return _capture(*args, **kwargs)
    finally:
        _ended["at"] = (time.monotonic(), time.process_time())


def _timed_finish(*args, **kwargs):
    try:
        return _finish(*args, **kwargs)
    finally:
        wall, cpu = _ended["at"]
        # finish's last argument, where the tree passes it: the window's (start, end), unix time
        window = args[-1] if args and isinstance(args[-1], tuple) and len(args[-1]) == 2 else None
        after_window = f" after_window={time.time() - window[1]:.2f}" if window else ""
        print(f"ATTACH-TIMING wall={time.monotonic() - wall:.2f} cpu={time.process_time() - cpu:.2f}"
              f"{after_window}", file=sys.stderr)


collect_attach.capture = _timed_capture
cli_attach.finish = _timed_finish

if __name__ == "__main__":
    from diagnose.cli import main

    sys.argv = ["diagnose", "attach", *sys.argv[1:]]
    main()
