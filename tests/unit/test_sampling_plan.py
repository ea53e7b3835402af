"""The sampling plan over a process tree: the budget goes where the threads work."""

import subprocess
import sys
import time

from diagnose.collect import activity
from diagnose.collect.activity import ProcessActivity
from diagnose.collect.plan import (
    IDLE_PROCESS_RATE_HZ,
    IDLE_SAMPLES_PER_WINDOW,
    idle_rate_hz,
    plan_sampling,
    plan_tree,
    stop_lead_s,
    uncut_rate,
)

PROGRAM = ("python", "app.py")


def supervisor(pid=100):
    return ProcessActivity(pid, threads=1, busy_threads=0, cpu_cores=0.0, program=PROGRAM)


def worker(pid, threads=5, busy=4, cpu=0.6, program=PROGRAM):
    return ProcessActivity(pid, threads=threads, busy_threads=busy, cpu_cores=cpu, program=program)


def test_busy_workers_get_the_rate_and_the_idle_supervisor_little():
    plan = plan_tree([supervisor(), worker(101), worker(102), worker(103)], None)
    rates = {p.pid: p.rate_hz for p in plan.processes}
    assert rates[100] == IDLE_PROCESS_RATE_HZ
    assert rates[101] == rates[102] == rates[103] == plan.sampling.rate_hz
    # the busy processes share the budget among their own 15 threads, not the supervisor's too
    assert plan.sampling.rate_hz == round(200 / 15)
    assert plan.sampling.rate_hz > IDLE_PROCESS_RATE_HZ


def test_a_short_window_samples_an_idle_supervisor_often_enough_to_see_it():
    # py-spy's first sample comes after an exponential gap: at 1 Hz a 3 s window can end first
    long = plan_tree([supervisor(), worker(101)], None, duration_s=10)
    short = plan_tree([supervisor(), worker(101)], None, duration_s=3)
    assert long.of(100).rate_hz == IDLE_PROCESS_RATE_HZ
    assert short.of(100).rate_hz * 3 >= IDLE_SAMPLES_PER_WINDOW
    assert short.of(100).rate_hz < short.of(101).rate_hz  # still far below the busy rate


def test_an_idle_process_gets_the_least_rate_that_sees_it_before_its_stop_lead():
    # each sample of an idle process costs py-spy as much as a busy one's and shows nothing new
    for window in (2, 3, 4, 6, 10, 30):
        rate = idle_rate_hz(window)
        assert rate * (window - stop_lead_s(rate, window)) >= IDLE_SAMPLES_PER_WINDOW
        if rate > IDLE_PROCESS_RATE_HZ:
            # one less would see it too seldom, or stop too late (its lead cut by the window)
            lower = rate - 1
            assert (lower * (window - stop_lead_s(lower, window)) < IDLE_SAMPLES_PER_WINDOW
                    or lower < uncut_rate(window))
    assert idle_rate_hz(10) == IDLE_PROCESS_RATE_HZ < 10


def test_one_busy_process_per_program_is_calibrated_natively_the_busiest():
    plan = plan_tree([supervisor(), worker(101, cpu=0.3), worker(102, cpu=0.7),
                      worker(103, cpu=0.5)], None)
    calibrated = [p.pid for p in plan.processes if p.native_rate_hz]
    assert calibrated == [102]
    # what the three workers would have had between them, in the one that is unwound
    assert plan.sampling.native_rate_hz == plan.of(102).native_rate_hz >= 2


def test_each_distinct_program_gets_its_own_calibration():
    other = ("python", "-m", "celery", "worker")
    plan = plan_tree([supervisor(), worker(101), worker(102), worker(103, program=other)], None)
    assert sorted(p.pid for p in plan.processes if p.native_rate_hz) in ([101, 103], [102, 103])


def test_an_idle_supervisor_is_never_unwound_natively():
    plan = plan_tree([supervisor(), worker(101)], None)
    assert plan.of(100).native_rate_hz == 0
    assert plan.of(101).native_rate_hz > 0


def test_a_single_process_keeps_the_single_process_plan():
    for threads in (4, 11, 64):
        one = plan_tree([worker(7, threads=threads, busy=threads - 1)], None)
        flat = plan_sampling(threads, None)
        assert (one.sampling.rate_hz, one.sampling.native_rate_hz) == \
            (flat.rate_hz, flat.native_rate_hz)


def test_an_idle_service_is_sampled_evenly():
    idle = [supervisor(100), worker(101, busy=0, cpu=0.0), worker(102, busy=0, cpu=0.0)]
    plan = plan_tree(idle, None)
    assert {p.rate_hz for p in plan.processes} == {plan.sampling.rate_hz}


def test_a_requested_rate_applies_to_every_process_blocking():
    plan = plan_tree([supervisor(), worker(101)], 50)
    assert {p.rate_hz for p in plan.processes} == {50}
    assert not plan.sampling.nonblocking and not any(p.native_rate_hz for p in plan.processes)


def test_a_process_born_mid_window_gets_the_busy_rate():
    plan = plan_tree([supervisor(), worker(101)], None)
    assert plan.of(999).rate_hz == plan.sampling.rate_hz and plan.of(999).busy


def test_activity_tells_a_spinning_process_from_a_sleeping_one():
    code = ("import sys, time\nprint('up', flush=True)\nend = time.time() + 20\n"
            "while time.time() < end:\n    {}\n")
    spin = subprocess.Popen([sys.executable, "-c", code.format("pass")], stdout=subprocess.PIPE)
    sleep = subprocess.Popen([sys.executable, "-c", code.format("time.sleep(0.5)")],
                             stdout=subprocess.PIPE)
    try:
        for proc in (spin, sleep):
            proc.stdout.readline()  # past interpreter start-up
        before = activity.snapshot([spin.pid, sleep.pid])
        time.sleep(0.5)
        found = {a.pid: a for a in activity.measure(before, [spin.pid, sleep.pid])}
        assert found[spin.pid].busy and found[spin.pid].cpu_cores > 0
        assert not found[sleep.pid].busy
        # a spinner wants a whole core (ran or queued) whatever else runs; a sleeper next to none
        assert found[spin.pid].demand_cores > 0.8 and found[sleep.pid].demand_cores < 0.05
    finally:
        for proc in (spin, sleep):
            proc.kill()
            proc.wait()


def test_a_thread_that_ran_is_busy_though_it_was_charged_no_tick():
    # the thread ran 30 ms of 0.5 s, and no clock tick happened to catch it
    assert activity.busy_thread_count({1: 0.0}, {1: 0.03}, elapsed_s=0.5) == 1


def test_a_thread_that_queued_for_the_cpu_is_busy_though_it_got_little_of_it():
    # a machine loaded by others: 8 ms run, 0.45 s runnable in the queue, of 0.5 s
    assert activity.busy_thread_count({1: 0.0}, {1: 0.008}, 0.5, {1: 0.458}) == 1


def test_a_sleeper_queued_long_after_its_wake_is_not_busy():
    # a 0.5 s sleep loop beside the suite on CI: woken once, it waited 0.47 s of 0.5 runnable and
    # ran for microseconds; a thread that wants the CPU runs milliseconds even when starved
    assert activity.busy_thread_count({1: 0.0}, {1: 0.0001}, 0.5, {1: 0.471}) == 0


def test_a_sleeper_charged_a_stray_tick_is_not_busy():
    # a supervisor's wait loop on a loaded machine: charged one tick by the timer, ran 0.3 ms,
    # queued 50 ms over its wakes
    assert activity.busy_thread_count({1: 0.01}, {1: 0.0003}, 0.5, {1: 0.05}) == 0


def test_without_schedstat_a_charged_tick_still_decides():
    assert activity.busy_thread_count({1: 0.01, 2: 0.0}, {}, elapsed_s=0.5) == 1


def saturating(pid, demand, threads=5):
    return ProcessActivity(pid, threads=threads, busy_threads=threads - 1, cpu_cores=0.2,
                           program=PROGRAM, demand_cores=demand)


def test_busy_workers_that_want_every_core_get_half_the_python_budget_but_all_the_native():
    calm = plan_tree([supervisor(), saturating(101, 0.5), saturating(102, 0.5),
                      saturating(103, 0.5)], None, cores=2)
    full = plan_tree([supervisor(), saturating(101, 1.2), saturating(102, 1.2),
                      saturating(103, 1.2)], None, cores=2)
    assert calm.sampling.rate_hz == round(200 / 15)
    assert full.sampling.rate_hz == round(100 / 15)
    # the native recorder costs mostly its start, and the GIL and lock shares rest on it
    assert full.sampling.native_rate_hz == calm.sampling.native_rate_hz
    assert "halved" in full.sampling.reason and "halved" not in calm.sampling.reason
    # the /proc sampler reads every thread each tick: it ticks half as often too
    assert full.sampling.proc_interval_s >= 1.8 * calm.sampling.proc_interval_s


def test_one_process_wanting_every_core_keeps_the_single_process_plan():
    # one Python process: its cores are shared by its own threads, the plan is the flat one
    plan = plan_tree([saturating(7, 3.0, threads=11)], None, cores=2)
    assert plan.sampling.rate_hz == plan_sampling(11, None).rate_hz


def test_saturation_is_not_guessed_without_schedstat_or_cores():
    busy = [saturating(101, float("nan")), saturating(102, float("nan"))]
    assert plan_tree(busy, None, cores=2).sampling.rate_hz == round(200 / 10)
    assert plan_tree([saturating(101, 2.0), saturating(102, 2.0)], None).sampling.rate_hz == 20



def test_a_process_whose_run_queue_would_keep_it_stopped_is_not_calibrated_natively():
    # the scheduler_overhead fixture: 64 busy threads on 2 cores; each blocking native sample
    # waits for every one of them to be scheduled to stop (57 ms measured)
    plan = plan_tree([saturating(7, 46.0, threads=65)], None, cores=2, duration_s=10)
    assert plan.sampling.native_rate_hz == 0
    assert all(p.native_rate_hz == 0 for p in plan.processes)
    assert "no native calibration in 1 process whose run queue would keep it stopped" in plan.sampling.reason
    assert "plus native stacks" not in plan.sampling.reason
    assert plan.sampling.rate_hz > 0  # the non-blocking samples stay


def test_sixteen_busy_threads_keep_the_native_calibration_whatever_the_machines_load():
    # 16 threads behind one sqlite connection: their GIL waits are told from running by the
    # calibration. On a loaded machine their run-queue time says 12 cores wanted of 2: their own
    # busy threads, not other tenants' load, decide
    plan = plan_tree([saturating(7, 12.0, threads=17)], None, cores=2, duration_s=10)
    assert plan.sampling.native_rate_hz > 0 and "no native calibration" not in plan.sampling.reason
    # without the cores nothing is guessed
    unknown = plan_tree([saturating(7, 46.0, threads=65)], None, cores=None, duration_s=10)
    assert unknown.sampling.native_rate_hz > 0
