"""Threads a library starts to move data for its own machinery, never to handle a request.

multiprocessing's queue feeder pickles and writes what `Queue.put` buffered; a pool's task,
result and worker-handler threads shuttle tasks and results; the resource sharer hands file
descriptors to other processes; a process pool's manager thread does the same for
`ProcessPoolExecutor`. They run Python and wait for the GIL like any thread, but they serve
the process's own transport: a DataLoader worker whose feeder waits for the GIL while the
transform holds it is a saturated worker stage, not GIL contention between request handlers.
Recognised by the library loop they run (file and function), never by a thread name.
"""

from __future__ import annotations

import re

import numpy as np

from diagnose.samples.profile import Profile, frame_is

# (file suffix, function pattern): the loop a library's own thread runs for its whole life.
LIBRARY_THREAD_LOOPS = (
    ("multiprocessing/queues.py", re.compile(r"(^|\.)_feed$")),
    ("multiprocessing/pool.py", re.compile(r"(^|\.)_handle_(tasks|results|workers)$")),
    ("multiprocessing/resource_sharer.py", re.compile(r"(^|\.)_serve$")),
    ("concurrent/futures/process.py", re.compile(r"(_ExecutorManagerThread\.run|"
                                                  r"_queue_management_worker)$")),
)
LIBRARY_THREAD_SHARE = 0.5  # of a thread's samples inside such a loop: the thread is the library's


def library_stacks(profile: Profile) -> np.ndarray:
    """Per stack id: True when the stack runs inside a library's own thread loop."""
    matches = np.array([any(frame_is(frame, suffix, pattern) for suffix, pattern in LIBRARY_THREAD_LOOPS)
                        for frame in profile.frames], dtype=bool)
    if not matches.any():  # the common case: no such thread, no walk over the stacks
        return np.zeros(len(profile.stacks), dtype=bool)
    return np.array([bool(stack) and bool(matches[list(stack)].any()) for stack in profile.stacks],
                    dtype=bool)
