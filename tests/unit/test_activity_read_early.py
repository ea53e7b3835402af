"""The sampling plan measures each process's activity between two reads of its threads' CPU at
least MIN_INTERVAL_S apart. `attach` takes the first read before importing its analysis stack,
so the import fills that interval: the plan then reads once more instead of sleeping after the
probes (0.24 s of every attach's start-up, measured). Where the PIDs lead its arguments, that
read is taken as the command starts, before the CLI's own imports (cli/__init__)."""

from __future__ import annotations

import os
import time

from diagnose.collect import activity
from diagnose.collect.capture import activity_since


def test_an_early_read_that_holds_every_member_is_the_one_measured_from():
    early = activity.snapshot([os.getpid()])
    assert activity_since(early, [os.getpid()]) is early


def test_a_member_missing_from_the_early_read_gets_a_fresh_read():
    early = activity.snapshot([os.getpid()])
    later = activity_since(early, [os.getpid(), os.getppid()])
    assert later is not early and set(later.cpu) == {os.getpid(), os.getppid()}


def test_measuring_from_a_read_older_than_the_interval_does_not_wait():
    early = activity.snapshot([os.getpid()])
    spin_until = time.monotonic() + activity.MIN_INTERVAL_S  # this thread, busy over the interval
    while time.monotonic() < spin_until:
        pass
    started = time.monotonic()
    found = activity.measure(activity_since(early, [os.getpid()]), [os.getpid()])
    assert time.monotonic() - started < activity.MIN_INTERVAL_S / 2
    assert found[0].busy_threads >= 1, found


def test_schedstat_for_every_thread_halves_the_interval_and_clock_ticks_keep_the_longer_one():
    timed = activity.snapshot([os.getpid()])
    assert timed.run, "this kernel keeps schedstat"
    assert activity.interval_s(timed) == activity.MIN_SCHEDSTAT_INTERVAL_S
    ticks_only = activity.CpuSnapshot(timed.at, timed.cpu, timed.cmdlines)  # no schedstat read
    assert activity.interval_s(ticks_only) == activity.MIN_INTERVAL_S


def test_a_thread_spinning_over_the_short_interval_is_busy_and_a_sleeping_one_is_not():
    import threading
    stop = threading.Event()
    sleeper = threading.Thread(target=stop.wait, name="sleeper")
    sleeper.start()
    try:
        before = activity.snapshot([os.getpid()])
        spin_until = before.at + activity.MIN_SCHEDSTAT_INTERVAL_S
        while time.monotonic() < spin_until:
            pass
        found = activity.measure(before, [os.getpid()])
    finally:
        stop.set()
        sleeper.join()
    assert found[0].busy_threads == 1, found  # the spinning main thread, not the sleeper


def test_the_pids_leading_attachs_arguments_are_read_as_it_starts_and_that_read_is_used():
    me = os.getpid()
    activity.read_early([str(me), "--duration", "5"])
    early = activity.first_read([me])
    assert me in early.cpu
    later = activity.first_read([me])  # the early read is used once
    assert later.at > early.at


def test_options_before_the_pids_leave_the_first_read_to_the_attach():
    me = os.getpid()
    activity.read_early(["--duration", "5", str(me)])
    assert (me,) not in activity._early_reads
    assert me in activity.first_read([me]).cpu


def test_an_early_read_of_other_pids_is_not_taken_for_these():
    me = os.getpid()
    activity.read_early([str(me)])
    parent = os.getppid()
    read = activity.first_read([me, parent])  # not the early read of `me` alone
    assert set(read.cpu) >= {me, parent}
    activity._early_reads.clear()


def test_an_unreadable_pid_given_early_never_raises():
    activity.read_early(["999999999"])
    assert activity.first_read([999999999]).cpu == {}
