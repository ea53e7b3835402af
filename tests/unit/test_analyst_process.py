"""The attach's analysis process (diagnose/cli/analyst.py): its errors come back as the attach's
own, it answers nothing when asked nothing, and the attach goes on without it where it cannot
start."""

from __future__ import annotations

import io
import pickle
import subprocess

from diagnose import errors
from diagnose.cli import analyst


def test_a_refusal_comes_back_as_the_same_error_class_and_exit_code():
    error = analyst.error_of(analyst.Refused("NoSamples", "py-spy took no sample", 9))
    assert type(error) is errors.NoSamples
    assert (error.message, error.exit_code) == ("py-spy took no sample", 9)


def test_a_refusal_of_an_unknown_class_keeps_its_message_and_exit_code():
    error = analyst.error_of(analyst.Refused("SomethingNew", "it failed", 11))
    assert type(error) is errors.DiagnoseError
    assert (error.message, error.exit_code) == ("it failed", 11)


def test_an_analyst_asked_nothing_answers_nothing():
    answers = io.BytesIO()
    analyst.serve(io.BytesIO(b""), answers)  # the attach ended before its window did
    assert answers.getvalue() == b""


def test_a_refusal_in_the_analysis_is_answered_not_raised(monkeypatch):
    def refuse(_request):
        raise errors.OutputFailed("could not write report.html: disk full")

    monkeypatch.setattr(analyst, "analyse_and_finish", refuse)
    answers = io.BytesIO()
    analyst.serve(io.BytesIO(pickle.dumps("a request")), answers)
    answer = pickle.loads(answers.getvalue())
    assert answer == analyst.Refused("OutputFailed", "could not write report.html: disk full",
                                     errors.ExitCode.OUTPUT_FAILED)


def test_a_crash_in_the_analysis_is_answered_with_its_traceback(monkeypatch):
    def crash(_request):
        raise KeyError("a bug")

    monkeypatch.setattr(analyst, "analyse_and_finish", crash)
    answers = io.BytesIO()
    analyst.serve(io.BytesIO(pickle.dumps("a request")), answers)
    answer = pickle.loads(answers.getvalue())
    assert isinstance(answer, analyst.Crashed)
    assert "KeyError: 'a bug'" in answer.trace


def test_the_attach_analyses_itself_where_no_analyst_can_start(monkeypatch):
    def cannot(*_args, **_kwargs):
        raise OSError("no such interpreter")

    monkeypatch.setattr(subprocess, "Popen", cannot)
    assert analyst.Analyst.start() is None


def test_an_abort_while_the_analyst_works_kills_it_and_removes_the_recordings():
    from types import SimpleNamespace

    import pytest

    from diagnose.cli.attach import _analyse
    from diagnose.cli.options import OutputOptions, TicketOptions

    events = []

    class Aborted:
        def finish(self, _request):
            raise errors.SignalAbort(errors.Interrupted("aborted by a second SIGINT", 130))

        def close(self):
            events.append("analyst killed")

    capture = SimpleNamespace(cleanup=lambda: events.append("recordings removed"),
                              profile_path="/nonexistent")
    request = analyst.Request(capture, None, False, OutputOptions(), TicketOptions(), None, (0.0, 1.0))
    with pytest.raises(errors.SignalAbort):
        _analyse(Aborted(), request)
    assert events == ["analyst killed", "recordings removed"]
