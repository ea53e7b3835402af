"""Domain errors, each carrying the exit code the CLI returns for it.

One table of exit codes, so scripts can tell failures apart without parsing messages.
"""

from __future__ import annotations


class ExitCode:
    OK = 0
    INTERNAL = 1
    USAGE = 2  # click's own code for bad options
    NO_SUCH_PROCESS = 3
    NOT_PYTHON = 4
    PERMISSION = 5
    BAD_PROFILE = 6
    PROFILER_FAILED = 7
    TARGET_EXITED = 8  # the report was still written, marked partial
    NO_SAMPLES = 9
    FINDING_GATE = 10  # --fail-on: the primary finding reached that severity (outputs written)
    OUTPUT_FAILED = 11  # an output file could not be written; the ones already written are kept
    LOAD_FAILED = 12  # sweep / experiment: the URL did not answer, or the load generator failed
    PUSH_FAILED = 13  # --push / watch: the profiling server refused or never answered (local
    # outputs are written and kept)
    # Stopped by a signal: the partial report was written; 128 + the signal number, as shells do.
    SIGHUP = 129
    SIGINT = 130
    SIGTERM = 143


class DiagnoseError(Exception):
    """An error the user can act on; its message is printed without a traceback."""

    exit_code = ExitCode.INTERNAL

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class NoSuchProcess(DiagnoseError):
    exit_code = ExitCode.NO_SUCH_PROCESS


class NotPython(DiagnoseError):
    exit_code = ExitCode.NOT_PYTHON


class PermissionDenied(DiagnoseError):
    exit_code = ExitCode.PERMISSION


class BadProfile(DiagnoseError):
    exit_code = ExitCode.BAD_PROFILE


class ProfilerFailed(DiagnoseError):
    exit_code = ExitCode.PROFILER_FAILED


class NoSamples(DiagnoseError):
    exit_code = ExitCode.NO_SAMPLES


class OutputFailed(DiagnoseError):
    exit_code = ExitCode.OUTPUT_FAILED


class LoadFailed(DiagnoseError):
    exit_code = ExitCode.LOAD_FAILED


class Interrupted(DiagnoseError):
    """Sampling was stopped by a signal; `exit_code` is 128 + that signal's number."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class SignalAbort(BaseException):
    """Leave now: a stop signal before sampling started, or a second one. The recorders are
    killed and the temporary files removed by the `finally` blocks on the way out. A
    BaseException, so that no `except Exception` on the way swallows it. (Here, not beside the
    signal handling in collect/capture.py, so that every command can catch it without importing
    the capture machinery.)"""

    def __init__(self, error: Interrupted):
        super().__init__(error.message)
        self.error = error
