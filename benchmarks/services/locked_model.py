"""A locked model over OpenBLAS's pool, for judging verdicts (not a fixture): 8 request threads
in a closed loop, one ``threading.Lock`` around the forward pass (6 x (64x384 @ 384x384) + tanh),
OpenBLAS at its default size (one thread per core).

    python benchmarks/services/locked_model.py SECONDS     # prints READY pid, then total_rps
    OPENBLAS_NUM_THREADS=1 python benchmarks/services/locked_model.py SECONDS

``NOLOCK=1`` drops the lock. Requests/s every 2 s go to stderr.
"""

import os
import sys
import threading
import time

import numpy as np

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
rng = np.random.default_rng(1)
WEIGHTS = [rng.standard_normal((384, 384)).astype(np.float32) * 0.05 for _ in range(6)]
LOCK = threading.Lock() if os.environ.get("NOLOCK") != "1" else None
done = [0]
stop = time.monotonic() + SECONDS


def forward(x):
    for w in WEIGHTS:
        x = np.tanh(x @ w)
    return x


def handle():
    x = rng.standard_normal((64, 384)).astype(np.float32)
    if LOCK is not None:
        with LOCK:
            y = forward(x)
    else:
        y = forward(x)
    return float(y[0, 0])


def worker():
    while time.monotonic() < stop:
        handle()
        done[0] += 1


threads = [threading.Thread(target=worker, name=f"req-{i}") for i in range(8)]
for t in threads:
    t.start()
print("READY", os.getpid(), flush=True)
started, last = time.monotonic(), 0
while time.monotonic() < stop:
    time.sleep(2)
    served = done[0]
    print(f"rps {(served - last) / 2:.0f}", file=sys.stderr, flush=True)
    last = served
for t in threads:
    t.join()
print(f"total_rps {done[0] / (time.monotonic() - started):.0f}", flush=True)
