"""Frames that start the interpreter, a thread, a process or a server's loop: on nearly every
stack, they say nothing about where the time goes. Lists of "hottest" functions and a finding's
sites leave them out (runpy's `_run_module_as_main` at 95% of total time is not a lead).
Recognised by file and function, as the library names them."""

from __future__ import annotations

import re

from diagnose.samples.profile import Frame, frame_is

# (file suffix, or a directory ending in "/"; function pattern)
BOOTSTRAP_FRAMES = (
    ("", re.compile(r"^<module>$")),
    ("runpy.py", re.compile(r"^_run_(module_as_main|code|module_code)$")),
    ("threading.py", re.compile(r"(^|\.)(_bootstrap|_bootstrap_inner|run)$")),
    ("multiprocessing/", re.compile(r"(^|\.)(_bootstrap|run|_launch|__init__|_Popen|start|"
                                    r"_main|main|spawn_main)$")),
    ("concurrent/futures/thread.py", re.compile(r"(^|\.)(_worker|run)$")),
    ("socketserver.py", re.compile(r"(^|\.)(serve_forever|process_request_thread|"
                                   r"_handle_request_noblock|handle_request)$")),
    ("asyncio/", re.compile(r"(^|\.)(run|run_forever|run_until_complete|_run_once|_run)$")),
    ("gunicorn/", re.compile(r"(^|\.)(run|run_for_multiple|spawn_worker|spawn_workers|"
                             r"manage_workers|init_process|start|serve)$")),
    ("uvicorn/", re.compile(r"(^|\.)(run|serve|_serve|main|startup|main_loop)$")),
    ("click/", re.compile(r"(^|\.)(main|invoke|__call__)$")),
)


def is_bootstrap(frame: Frame) -> bool:
    if frame.native:
        return False
    for suffix, pattern in BOOTSTRAP_FRAMES:
        if not suffix:
            if pattern.search(frame.function):
                return True
        elif frame_is(frame, suffix, pattern):
            return True
    return False
