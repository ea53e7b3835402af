"""A frame-scoring HTTP service on the standard library's ThreadingHTTPServer (a thread per
request, as socketserver.ThreadingMixIn and many small internal services run).

    python benchmarks/services/frame_server.py PORT            # REUSE=1: buffers from a pool
    wrk -t2 -c8 -d10s http://127.0.0.1:PORT/

Each request builds a 1024x1024x3 float32 frame (12 MB) with numpy, scales it into a second new
array and returns the mean of a strided view. `REUSE=1`: the two arrays come from a pool shared
by the request threads (a queue of pairs, refilled with `fill` and `out=`) instead of new ones.
"""

import os
import queue
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

SHAPE = (1024, 1024, 3)
REUSE = os.environ.get("REUSE") == "1"
_pool: "queue.Queue[tuple[np.ndarray, np.ndarray]]" = queue.Queue()


def score() -> float:
    if not REUSE:
        frame = np.ones(SHAPE, dtype=np.float32)
        scaled = frame * 0.5
        return float(scaled[::8, ::8].mean())
    try:
        frame, scaled = _pool.get_nowait()
    except queue.Empty:
        frame, scaled = np.empty(SHAPE, dtype=np.float32), np.empty(SHAPE, dtype=np.float32)
    frame.fill(1.0)
    np.multiply(frame, 0.5, out=scaled)
    result = float(scaled[::8, ::8].mean())
    _pool.put((frame, scaled))
    return result


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("%.4f" % score()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("READY", os.getpid(), flush=True)
    server.serve_forever()
