"""The threads a server hands requests to, named by the server's own frames.

A thread-per-connection server (socketserver's ThreadingMixIn, http.server, wsgiref, gunicorn's
sync and gthread workers, waitress) runs each request on a thread whose stacks pass through its
request-handling frames, whatever the application's code. At light load such a thread spends the
request in a call (IO, a sleep) and is short-lived, so the thread summary may not call it a
request thread: these frames do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from diagnose.samples.profile import Frame, Profile, frame_is

# Frames of servers that run one request per thread: a thread whose stacks pass through one of
# them is handling requests (file suffix, function pattern; a suffix ending in "/" is a package).
REQUEST_HANDLING_FRAMES = (
    ("socketserver.py", re.compile(r"(process_request_thread|finish_request)$")),
    ("http/server.py", re.compile(r"handle_one_request$")),
    ("wsgiref/", re.compile(r"(handle|run)$")),
    ("gunicorn/workers/", re.compile(r"handle(_request)?$")),
    ("waitress/", re.compile(r"(handle_request|service)$")),
)


def _handles_requests(frames: Iterable[Frame]) -> bool:
    return any(frame_is(frame, suffix, pattern) for frame in frames
               for suffix, pattern in REQUEST_HANDLING_FRAMES)


def handler_threads(profile: Profile, samples: pd.DataFrame) -> set[int]:
    """Threads (summary index) whose samples ran inside a server's request-handling frames."""
    # Each frame tested once; a stack handles requests when any of its frames does.
    handling = profile.stacks_with_any(np.array([_handles_requests([frame]) for frame in profile.frames],
                                                dtype=bool))
    rows = samples[handling[samples["stack"].to_numpy()]]
    return set(int(t) for t in rows["thread"].unique())
