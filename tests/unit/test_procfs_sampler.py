"""The /proc sampler's cheap reads: what it reads, and how often."""

import os

from diagnose.collect.procfs import ProcSampler, parse_status_ctx


def test_context_switches_are_read_from_any_line_of_a_status_file():
    text = ("voluntary_ctxt_switches:\t5\nName:\tx\nnonvoluntary_ctxt_switches:\t7")
    assert parse_status_ctx(text) == (5, 7)
    assert parse_status_ctx("Name:\tx\n") == (None, None)


def test_the_proc_sampler_refreshes_its_counters_by_the_clock_not_every_few_ticks():
    sampler = ProcSampler(os.getpid())
    sampler.start()
    refreshed = []
    real = sampler._snapshot_counters
    sampler._snapshot_counters = lambda into: (refreshed.append(1), real(into))
    for _ in range(30):  # 30 ticks well inside COUNTER_REFRESH_S
        sampler.tick()
    assert refreshed == []
    sampler._refreshed_at -= ProcSampler.COUNTER_REFRESH_S
    sampler.tick()
    assert refreshed == [1]


def test_a_proc_file_is_read_whole_and_a_gone_one_is_none(tmp_path):
    from diagnose.collect.procfs import read_proc_text
    big = tmp_path / "big"
    big.write_text("x" * 200_000)  # longer than one read
    assert read_proc_text(str(big)) == "x" * 200_000
    assert read_proc_text(f"/proc/{os.getpid()}/stat").startswith(f"{os.getpid()} (")
    assert read_proc_text("/proc/999999999/stat") is None
