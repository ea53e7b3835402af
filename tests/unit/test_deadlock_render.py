"""A deadlock printed like a thread dump, in the terminal and in the Markdown summary: each
thread, the lock it holds and the one it waits for, with the target's names kept inert."""

from __future__ import annotations

from diagnose.render.deadlock_text import deadlocks_in, dump_lines
from diagnose.render.markdown import render_markdown
from tests.report_data import as_report


def lock(name, line, file="/srv/app/shop/orders.py"):
    return {"name": name, "qualified": name, "file": file, "line": line, "function": "f", "taken": "with"}


KEEP = object()


def report(threads, victims=(), victims_as_written=KEEP):
    """A deadlock report; `victims_as_written` replaces the victims' JSON list (a malformed one)."""
    written = [{"thread": v} for v in victims] if victims_as_written is KEEP else victims_as_written
    cycle = {"threads": threads, "victims": written, "lock_order": []}
    return {"verdict": {"primary": "deadlock", "headline": "The service is deadlocked — hung",
                        "severity": "critical", "confidence": "ok"},
            "findings": [{"id": "deadlock", "title": "The service is deadlocked", "score": 100,
                          "severity": "critical", "summary": "hung", "advice": ["order"],
                          "evidence": {"deadlocks": [cycle]}}]}


TWO = [{"thread": "request-0", "tid": 11, "holds": lock("INVENTORY_LOCK", 45),
        "waits_for": lock("PRICING_LOCK", 48), "held_by": "request-1"},
       {"thread": "request-1", "tid": 12, "holds": lock("PRICING_LOCK", 53),
        "waits_for": lock("INVENTORY_LOCK", 56), "held_by": "request-0"}]


def test_the_terminal_prints_found_one_deadlock_then_each_thread():
    lines = dump_lines(as_report(report(TWO, victims=["request-2", "request-3"])))
    assert lines == [
        "Found one deadlock:",
        '  "request-0" (tid 11)',
        "      holds INVENTORY_LOCK (shop/orders.py:45)",
        '      waits for PRICING_LOCK (shop/orders.py:48), held by "request-1"',
        '  "request-1" (tid 12)',
        "      holds PRICING_LOCK (shop/orders.py:53)",
        '      waits for INVENTORY_LOCK (shop/orders.py:56), held by "request-0"',
        "  2 more threads wait behind it: request-2, request-3",
    ]


def test_a_report_without_a_deadlock_prints_nothing_and_a_malformed_one_is_skipped():
    assert dump_lines(as_report({"findings": [{"id": "lock_contention", "evidence": {}}]})) == []
    broken = report([{"thread": "a", "holds": "LOCK", "waits_for": None}, TWO[1]])
    assert deadlocks_in(as_report(broken)) == ()  # one thread left: no cycle to print


def test_terminal_control_and_bidi_characters_in_names_are_shown_as_code_points():
    hostile = [dict(TWO[0], thread="evil\x1b[2J\u202ename"), TWO[1]]
    text = "\n".join(dump_lines(as_report(report(hostile))))
    assert "\x1b" not in text and "\u202e" not in text
    assert '"evil[U+001B][2J[U+202E]name"' in text


def test_the_markdown_summary_lists_each_thread_as_code_spans():
    hostile = [dict(TWO[0], thread="req`0 [x](http://e.vil)"), TWO[1]]
    text = render_markdown(as_report(report(hostile, victims=["request-2"])))
    assert "**Found one deadlock:**" in text
    assert ("- `req'0 [x](http://e.vil)` holds `INVENTORY_LOCK` (`shop/orders.py:45`), waits for "
            "`PRICING_LOCK` (`shop/orders.py:48`), held by `request-1`") in text
    assert "- 1 more thread waits behind it: `request-2`" in text


def test_a_malformed_entry_is_left_out_and_the_rest_of_its_deadlock_printed():
    odd = dict(TWO[0], thread="request-9", waits_for={"name": "L", "line": "not a line"})
    cycle = report([TWO[0], odd, TWO[1]],
                   victims_as_written=[{"thread": "request-2"}, "not an object"])
    (found,) = deadlocks_in(as_report(cycle))
    assert [t.thread for t in found.threads] == ["request-0", "request-1"]
    assert [v.thread for v in found.victims] == ["request-2"]
    missing = report(TWO, victims_as_written=None)
    assert [t.thread for t in deadlocks_in(as_report(missing))[0].threads] == ["request-0",
                                                                                "request-1"]
