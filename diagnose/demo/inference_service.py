"""A small demo inference service with a global model lock (standard library only).

Run it with ``python -m diagnose.demo.inference_service [--seconds S] [--threads N]``.

Six closed-loop request threads each: decode an "image" (light byte work),
normalise it, call ``TinyModel.predict`` and serialise the answer with
``json.dumps``. ``TinyModel.predict`` holds one global ``threading.Lock``
around the "inference", which is a chain of SHA-256 passes over a
multi-megabyte weight buffer. ``hashlib`` releases the GIL while it hashes, so
the other request threads are not waiting for the GIL: they queue on the model
lock. ``diagnose demo`` attaches to this service and should name that lock.

Contract shared with the test workloads: after warm-up the service prints
``READY pid=<pid>``; it stops by itself after ``--seconds`` (default 30) or on
SIGTERM/SIGINT, prints ``SERVED <requests> <elapsed_seconds>`` and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time

WEIGHT_BYTES = 4 * 1024 * 1024
LAYERS = 2
IMAGE_SIDE = 32


class TinyModel:
    """A stand-in model whose 'forward pass' hashes its weights (GIL released)."""

    def __init__(self, weight_bytes: int = WEIGHT_BYTES, layers: int = LAYERS):
        block = hashlib.sha256(b"demo-weights").digest()
        self.weights = (block * (weight_bytes // len(block) + 1))[:weight_bytes]
        self.layers = layers
        self._lock = threading.Lock()

    def predict(self, features: list[float]) -> list[float]:
        with self._lock:  # diagnose-fixture: contended-acquire
            return self.forward(features)

    def forward(self, features: list[float]) -> list[float]:
        seed = repr(features[:8]).encode()
        digest = b""
        for _ in range(self.layers):
            h = hashlib.sha256(seed + digest)
            h.update(self.weights)  # long native call, GIL released
            digest = h.digest()
        return [b / 255.0 for b in digest[:10]]


def decode_image(raw: bytes) -> list[int]:
    """Light 'decode': un-delta the byte stream into pixel values."""
    pixels = []
    prev = 0
    for b in raw:
        prev = (prev + b) & 0xFF
        pixels.append(prev)
    return pixels


def normalize(pixels: list[int]) -> list[float]:
    return [p / 127.5 - 1.0 for p in pixels[::16]]


def postprocess(scores: list[float]) -> list[dict]:
    ranked = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)[:3]
    return [{"label": f"class_{i}", "score": round(scores[i], 4)} for i in ranked]


def serialize_response(result: list[dict]) -> str:
    return json.dumps({"predictions": result})


def handle_request(model: TinyModel, raw: bytes) -> str:
    features = normalize(decode_image(raw))
    return serialize_response(postprocess(model.predict(features)))


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m diagnose.demo.inference_service",
        description="Demo inference service with a contended global model lock.")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="run for this long, then exit (default %(default)s)")
    parser.add_argument("--threads", type=int, default=6,
                        help="request threads (default %(default)s)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.threads <= 0:
        parser.error("--seconds and --threads must be positive")
    return args


def _emit(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass


def main(argv=None) -> int:
    args = _parse_args(argv)
    t0 = time.monotonic()
    deadline = t0 + args.seconds
    stop = threading.Event()
    counts: dict[int, int] = {}

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _s, _f: stop.set())

    model = TinyModel()
    raw = bytes((i * 37 + 11) & 0xFF for i in range(IMAGE_SIDE * IMAGE_SIDE * 3))

    def request_loop():
        ident = threading.get_ident()
        while not stop.is_set() and time.monotonic() < deadline:
            handle_request(model, raw)
            counts[ident] = counts.get(ident, 0) + 1

    threads = [threading.Thread(target=request_loop, name=f"request-{i}", daemon=True)
               for i in range(args.threads)]
    for t in threads:
        t.start()

    # warm-up: a few requests per thread, bounded in time
    warm_until = time.monotonic() + 10.0
    while (sum(list(counts.values())) < 2 * args.threads and time.monotonic() < warm_until
           and not stop.is_set()):
        time.sleep(0.02)
    _emit(f"READY pid={os.getpid()}")

    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        stop.wait(min(left, 0.5))
    stop.set()
    elapsed = time.monotonic() - t0
    for t in threads:
        t.join(timeout=5.0)
    _emit(f"SERVED {sum(list(counts.values()))} {elapsed:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
