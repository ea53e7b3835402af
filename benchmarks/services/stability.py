#!/usr/bin/env python3
"""The two services' verdicts, attach after attach: the same one every time?

    python benchmarks/services/stability.py [--python /path/to/python] [--attaches 5]
                                            [--duration 6] [--services image,locked]

Each service is started once on `--python` (it needs numpy; the image service also fastapi,
uvicorn and pillow) and attached `--attaches` times back to back with `diagnose attach PID
--duration D --json` (diagnose on this interpreter): the image service under wrk (32
connections to 127.0.0.1, for the whole run), the locked model under its own 8 threads. Prints
per service the verdict (primary, and co-primary if any), the first advice and the top gain of
each attach. Progress to stderr, the table to stdout; exit 1 when a verdict changed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORT = 8131


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _wait_port(port: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.2)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


@contextlib.contextmanager
def image_service(python: str, seconds: float) -> Iterator[int]:
    server = subprocess.Popen([python, "-m", "uvicorn", "image_service:app", "--app-dir", str(HERE),
                               "--port", str(PORT), "--log-level", "warning"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    load = None
    try:
        _wait_port(PORT, 60)
        load = subprocess.Popen(["wrk", "-t2", "-c32", f"-d{int(seconds)}s",
                                 f"http://127.0.0.1:{PORT}/predict"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)  # warm-up: the pool's threads started, the load steady
        yield server.pid
    finally:
        for proc in (load, server):
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM) if proc is server else proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


@contextlib.contextmanager
def locked_model(python: str, seconds: float) -> Iterator[int]:
    proc = subprocess.Popen([python, str(HERE / "locked_model.py"), str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise SystemExit(f"the locked model did not start: {line!r}")
        time.sleep(1.5)
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait()


SERVICES = {"image": image_service, "locked": locked_model}


def attach(pid: int, duration: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration", str(duration),
                               "--json", "--quiet", "--output-dir", out],
                              capture_output=True, text=True, timeout=duration + 90)
    if done.returncode != 0:
        raise SystemExit(f"diagnose failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--attaches", type=int, default=5)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--services", default="image,locked")
    args = parser.parse_args(argv)
    print("| service | attach | verdict | first advice | top finding, score, predicted gain |")
    print("| --- | ---: | --- | --- | --- |")
    changed = False
    for name in args.services.split(","):
        seconds = args.attaches * (args.duration + 8) + 10
        verdicts = set()
        with SERVICES[name](args.python, seconds) as pid:
            for k in range(1, args.attaches + 1):
                log(f"{name}: attach {k}/{args.attaches}")
                report = attach(pid, args.duration)
                verdict = report["verdict"]
                named = verdict["primary"] + (f"+{verdict['co_primary']}" if verdict.get("co_primary") else "")
                verdicts.add(named)
                advice = (verdict.get("first_advice") or [""])[0][:90].replace("|", "/")
                top = report["findings"][0]
                print(f"| {name} | {k} | {named} | {advice} | {top['id']} {top['score']}, "
                      f"{top.get('predicted_gain')}x |", flush=True)
        changed |= len(verdicts) > 1
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
