"""A search re-ranker whose similarities are computed in pure Python, for judging verdicts (not a
fixture, and not used to fit any constant of diagnose's): 6 request threads in a closed loop;
each request encodes a query (a small numpy MLP, 768 -> 512 -> 128 with tanh, on one BLAS
thread), then re-ranks the 100 candidates an index would return from a 4,096-item corpus of
128-d embeddings by cosine similarity in Python loops (each candidate's dot product with the
query and its norm), and returns the 10 best.

    python benchmarks/services/embedding_rerank.py SECONDS     # prints READY pid, then total_rps
    VECTORIZED=1 python benchmarks/services/embedding_rerank.py SECONDS

``VECTORIZED=1`` scores the same candidates with numpy array operations (a gather, a
matrix-vector product and the norms; the usual fix for a GIL-bound Python loop). Requests/s every
2 s go to stderr.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the encoder on the request thread alone

import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
VECTORIZED = os.environ.get("VECTORIZED") == "1"
DIM, CORPUS_SIZE, CANDIDATES, TOP_K = 128, 4096, 100, 10
rng = np.random.default_rng(11)
W1 = rng.standard_normal((768, 512)).astype(np.float32) * 0.04
W2 = rng.standard_normal((512, DIM)).astype(np.float32) * 0.05
CORPUS = rng.standard_normal((CORPUS_SIZE, DIM)).astype(np.float32)
CORPUS_LISTS = [row.tolist() for row in CORPUS]  # what the Python loop reads
QUERIES = [rng.standard_normal(768).astype(np.float32) for _ in range(32)]
CANDIDATE_IDS = [rng.choice(CORPUS_SIZE, CANDIDATES, replace=False) for _ in range(32)]
done = [0]
stop = time.monotonic() + SECONDS


def encode(features):
    return np.tanh(np.tanh(features @ W1) @ W2)


def rerank(query, ids):
    q = query.tolist()
    q_norm = sum(x * x for x in q) ** 0.5 or 1.0
    scored = []
    for i in ids.tolist():
        c = CORPUS_LISTS[i]
        dot = 0.0
        norm = 0.0
        for a, b in zip(q, c):
            dot += a * b
            norm += b * b
        scored.append((dot / (q_norm * (norm ** 0.5 or 1.0)), i))
    scored.sort(reverse=True)
    return [i for _, i in scored[:TOP_K]]


def rerank_vectorized(query, ids):
    candidates = CORPUS[ids]
    norms = np.linalg.norm(candidates, axis=1)
    norms[norms == 0] = 1.0
    sims = (candidates @ query) / ((np.linalg.norm(query) or 1.0) * norms)
    best = np.argsort(-sims, kind="stable")[:TOP_K]
    return ids[best].tolist()


def handle(k):
    query = encode(QUERIES[k % len(QUERIES)])
    ids = CANDIDATE_IDS[k % len(CANDIDATE_IDS)]
    return rerank_vectorized(query, ids) if VECTORIZED else rerank(query, ids)


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
