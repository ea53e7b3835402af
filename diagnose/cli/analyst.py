"""The analysis of a live attach, in a process of its own started before the window.

Importing the analysis stack (pandas, numpy, every check: ~0.5 CPU s) used to happen before the
window at diagnose's raised priority, on the path from the command to the first sample. The
analyst process does it instead, beside the probes and the window: at diagnose's own priority
while the attach probes the target and waits out the sampling plan's activity interval (as the
import did before), then, once the window is under way, at the niceness diagnose started with
(the service's, as a rule): where a core is idle the import costs neither the service nor the
wall clock, and on cores the service keeps busy it takes its share as the service's equal and
ends inside the window. Not SCHED_IDLE: on a saturated tree the import then got nothing in the
window and finished 0.3-1.2 s after it, on the path to the verdict, taking the same CPU from
the service there. When the window ends the attach gives it diagnose's own priority back, hands
it the capture, and the analyst analyses, writes the report and prints the verdict, as the
attach did in its own process. Nothing comes back but an exit code: the report objects hold the
analysis stack's types, and reading them back would import it here after all.

The protocol is one pickled `Request` on the analyst's stdin and one pickled answer on a pipe of
its own (its stdout and stderr are the user's): `Finished` (the exit code, the analyst's CPU),
`Refused` (a DiagnoseError: its class name, message and exit code) or `Crashed` (any other
exception: its traceback).

The analyst ignores the stop signals (a Ctrl-C reaches the whole foreground process group, and
the first one ends the window, not the analysis); the attach kills it when it aborts, and the
kernel kills it when the attach dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from diagnose import errors
from diagnose.cli.options import OutputOptions, TicketOptions

if TYPE_CHECKING:
    from diagnose.collect.capture import Capture

# One BLAS thread: the analysis does no linear algebra worth a pool, and an idle pool's threads
# would be more threads on the service's cores.
_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_PR_SET_PDEATHSIG = 1
# Not `-m diagnose.cli.analyst`: the package's __init__ imports the commands, attach among them,
# and this module with it, before runpy would run it again as __main__ (whose classes the
# answers would then name).
_ENTRY = "import sys; from diagnose.cli.analyst import main; main(sys.argv[1:])"


@dataclass(frozen=True)
class Request:
    """What the analysis of one window needs: the capture and the command's output options."""

    capture: Capture
    user_rules: dict | None
    keep_raw: bool
    outputs: OutputOptions
    ticket: TicketOptions
    # The signal that cut the window short, as the message and exit code the attach ends with.
    stopped: tuple[str, int] | None
    window: tuple[float, float]  # wall clock, for --push


@dataclass(frozen=True)
class Finished:
    exit_code: int
    import_cpu_s: float  # the analyst's CPU importing the analysis stack (mostly in the window)
    analysis_cpu_s: float  # its CPU from the request to the printed verdict
    imported_at: float  # wall clock when its import ended (before or after the window's end)


@dataclass(frozen=True)
class Refused:
    error: str  # the DiagnoseError's class name in diagnose.errors
    message: str
    exit_code: int


@dataclass(frozen=True)
class Crashed:
    trace: str


class AnalystGone(Exception):
    """The analyst exited without an answer (killed, out of memory)."""


def analyse_and_finish(request: Request) -> int:
    """The window's analysis, its report written and its verdict printed: the exit code. Run by
    the analyst, or by the attach itself where no analyst could start."""
    from diagnose.cli.common import finish
    from diagnose.run import pipeline

    cap = request.capture
    outputs = pipeline.from_capture(cap, request.outputs.output_dir, request.user_rules,
                                    request.keep_raw)
    stopped = errors.Interrupted(*request.stopped) if request.stopped is not None else None
    return finish(outputs, request.outputs, request.ticket, stopped, cap.recorder_failure,
                  request.window)


class Analyst:
    """`start()` before the window; `finish(request)` after it; `close()` on every way out."""

    def __init__(self, process: subprocess.Popen, answers: IO[bytes]):
        self.process = process
        self._answers = answers
        self._sharing = False

    @classmethod
    def start(cls) -> Analyst | None:
        """The analyst process, importing; None where it cannot be started."""
        read_fd, write_fd = os.pipe()
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, str(write_fd)],
                stdin=subprocess.PIPE, pass_fds=(write_fd,), env={**os.environ, **_ENV})
        except OSError:
            os.close(read_fd)
            return None
        finally:
            os.close(write_fd)
        return cls(process, os.fdopen(read_fd, "rb"))

    def share(self) -> None:
        """The window is under way: from now on at the niceness diagnose started with (said
        once; later calls do nothing). Best effort: without the privilege nothing changes."""
        if self._sharing:
            return
        self._sharing = True
        from diagnose.collect import priority

        priority.restore_process(self.process.pid)

    def finish(self, request: Request) -> Finished:
        """The analyst's answer; its DiagnoseError raised here as the same class and exit code;
        AnalystGone when it died without an answer."""
        _lift(self.process.pid)
        assert self.process.stdin is not None
        try:
            pickle.dump(request, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.close()
        except OSError as exc:
            raise AnalystGone(f"the analysis process could not be given the capture: {exc}") from None
        try:
            answer = pickle.load(self._answers)
        except (EOFError, pickle.UnpicklingError) as exc:
            code = self.process.wait()
            raise AnalystGone(f"the analysis process exited ({code}) without an answer "
                              f"({type(exc).__name__})") from None
        if isinstance(answer, Refused):
            raise error_of(answer)
        if isinstance(answer, Crashed):
            sys.stderr.write(answer.trace)
            raise RuntimeError("the analysis failed (its traceback is above)")
        return answer

    def close(self) -> None:
        """Kills the analyst if it is still there, and reaps it."""
        self._answers.close()
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _lift(pid: int) -> None:
    """Back to diagnose's own niceness: the analysis is on the path to the verdict now. Best
    effort."""
    from diagnose.collect import priority

    priority.lift_process(pid)


def error_of(refused: Refused) -> errors.DiagnoseError:
    """The analyst's DiagnoseError again, of its own class where that takes a message alone."""
    cls = getattr(errors, refused.error, None)
    error = (cls(refused.message) if isinstance(cls, type) and issubclass(cls, errors.DiagnoseError)
             and cls is not errors.Interrupted else errors.DiagnoseError(refused.message))
    error.exit_code = refused.exit_code
    return error


# The analyst's side.

def _detach_from_signals() -> None:
    """The stop signals ignored; killed with the attach."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Imports the analysis stack, then answers the one request on `requests` (none: the attach
    ended before its window did)."""
    import gc

    began = time.process_time()
    gc.disable()  # the import makes no garbage worth its ~0.05 s of collections
    import diagnose.collect.capture  # noqa: F401  (what unpickling the request imports, in the window)
    from diagnose.run import pipeline

    pipeline.prepare_page()
    gc.freeze()  # what the import made lives as long as the process: never scanned again
    gc.enable()
    imported, imported_at = time.process_time(), time.time()
    try:
        request = pickle.load(requests)
    except EOFError:
        return
    answer: Finished | Refused | Crashed
    try:
        code = analyse_and_finish(request)
        answer = Finished(code, round(imported - began, 3), round(time.process_time() - imported, 3),
                          imported_at)
    except errors.DiagnoseError as exc:
        answer = Refused(type(exc).__name__, exc.message, exc.exit_code)
    except Exception:
        answer = Crashed(traceback.format_exc())
    sys.stdout.flush()  # the verdict before the attach returns
    pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
    answers.flush()


def main(argv: list[str]) -> None:
    _detach_from_signals()
    if os.getppid() == 1:  # the attach died before the death signal was asked for
        return
    with os.fdopen(int(argv[0]), "wb") as answers:
        serve(sys.stdin.buffer, answers)  # flushes the verdict's stdout before it answers
    sys.stderr.flush()
    # Everything is written and answered: the interpreter's teardown of the analysis stack's
    # heap would only hold the attach (which reaps this process) from returning.
    os._exit(0)
