"""A text classifier whose features are counted in pure Python, for judging verdicts (not a
fixture): 6 request threads in a closed loop; each request hashes a text's character trigrams
into 2,048 buckets in a Python loop, L2-normalises them, and runs a small numpy model
(2048x256 matmul, tanh, 256x16) on one BLAS thread.

    python benchmarks/services/text_features.py SECONDS     # prints READY pid, then total_rps
    VECTORIZED=1 python benchmarks/services/text_features.py SECONDS

``VECTORIZED=1`` counts the same trigrams with numpy array operations (the usual fix for a
GIL-bound Python loop). Requests/s every 2 s go to stderr.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the model on the request thread alone

import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
VECTORIZED = os.environ.get("VECTORIZED") == "1"
BUCKETS = 2048
rng = np.random.default_rng(7)
W1 = rng.standard_normal((BUCKETS, 256)).astype(np.float32) * 0.05
W2 = rng.standard_normal((256, 16)).astype(np.float32) * 0.05
WORDS = ["".join(chr(97 + int(c)) for c in rng.integers(0, 26, int(n)))
         for n in rng.integers(2, 9, 400)]
TEXTS = [" ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), 400)) for _ in range(16)]
done = [0]
stop = time.monotonic() + SECONDS


def trigram_counts(text):
    counts = [0.0] * BUCKETS
    for i in range(len(text) - 2):
        h = (ord(text[i]) * 961 + ord(text[i + 1]) * 31 + ord(text[i + 2])) % BUCKETS
        counts[h] += 1.0
    norm = sum(c * c for c in counts) ** 0.5 or 1.0
    return np.array([c / norm for c in counts], dtype=np.float32)


def trigram_counts_vectorized(text):
    b = np.frombuffer(text.encode("latin-1"), dtype=np.uint8).astype(np.int64)
    codes = (b[:-2] * 961 + b[1:-1] * 31 + b[2:]) % BUCKETS
    counts = np.bincount(codes, minlength=BUCKETS).astype(np.float32)
    return counts / (np.linalg.norm(counts) or 1.0)


def classify(features):
    return int(np.argmax(np.tanh(features @ W1) @ W2))


def handle(k):
    text = TEXTS[k % len(TEXTS)]
    features = trigram_counts_vectorized(text) if VECTORIZED else trigram_counts(text)
    return classify(features)


def worker():
    k = 0
    while time.monotonic() < stop:
        handle(k)
        k += 1
        done[0] += 1


threads = [threading.Thread(target=worker, name=f"req-{i}") for i in range(6)]
# timed from the threads' start: the main thread may wait long for the GIL they hold
started, last = time.monotonic(), 0
for t in threads:
    t.start()
print("READY", os.getpid(), flush=True)
while time.monotonic() < stop:
    time.sleep(2)
    served = done[0]
    print(f"rps {(served - last) / 2:.0f}", file=sys.stderr, flush=True)
    last = served
for t in threads:
    t.join()
print(f"total_rps {done[0] / (time.monotonic() - started):.0f}", flush=True)
