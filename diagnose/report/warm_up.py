"""The analysis made ready while the window is sampled: its imports and the page's template.

Importing the analysis stack (pandas, the checks) takes most of a second of CPU, and attach used
to pay it before the window opened. It now happens in a daemon thread at the lowest CPU
priority while py-spy samples: on a host with an idle core it is done before the window ends,
and beside a service that saturates the cores it takes no CPU from the service being measured.
When the window ends, `ready()` lifts the thread to diagnose's own priority and waits for it.
Without the privilege to lift it back (see collect.priority) the thread keeps diagnose's own
priority instead of being stranded behind the service.

Safe beside the capture because the capture imports nothing of the analysis stack (it runs on
modules imported before the thread starts); a second import of a module the thread is still
importing waits on that module's import lock, so the main thread never sees a half-made one.
"""

from __future__ import annotations

import importlib
import os
import threading

from diagnose.collect import priority

LOWEST_NICE = 19
MODULES = ("diagnose.report.pipeline",)


class AnalysisWarmUp:
    """One background preparation: start() before the window, ready() after it."""

    def __init__(self, modules: tuple[str, ...] = MODULES) -> None:
        self._modules = modules
        self._thread: threading.Thread | None = None
        self._native_id: int | None = None
        self._started = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="diagnose-warm-up", daemon=True)
        self._thread.start()
        self._started.wait(5.0)

    def ready(self) -> None:
        """Raises the thread back to diagnose's priority and waits for it; whatever it failed
        at is raised again by the import or render that follows, in its place."""
        if self._thread is None:
            return
        if self._native_id is not None and priority.can_lift_threads():
            priority.lift_thread(self._native_id)
        self._thread.join()

    def _run(self) -> None:
        self._native_id = threading.get_native_id()
        if priority.can_lift_threads():
            try:
                os.setpriority(os.PRIO_PROCESS, self._native_id, LOWEST_NICE)  # this thread only
            except OSError:
                pass
        self._started.set()
        try:
            for name in self._modules:
                importlib.import_module(name)
            from diagnose.render.html import template_environment

            template_environment().get_template("report.html.j2")
        except Exception:  # the main thread's own import or render reports it
            pass
