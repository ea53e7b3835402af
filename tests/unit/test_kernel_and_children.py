"""The kernel's work and the children's CPU (issue 44): read from the kernel's counters first, the
calling line from native samples in libc's system-call wrappers (model/syscall_sites.py) or from
the standard library's process-starting frames (model/children.py); kernel_work and children_cpu
lead where that is where the CPU goes, ahead of the findings that count it as their code's."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from diagnose.checks import children_cpu, kernel_work
from diagnose.checks.arbiter import rank
from diagnose.checks.base import Finding
from diagnose.checks.engine import load_check_settings, order_of, verdict_for
from diagnose.collect.forks import parse_processes
from diagnose.collect.kernel_waits import KernelRecord
from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.model.analysis import Analysis
from diagnose.model.children import ChildProcesses, child_processes, spawn_sites, spawns
from diagnose.model.syscall_sites import call_name, syscall_samples
from diagnose.report.model import NotApplicable
from tests.conftest import REPO, WORKLOADS, marker_line
from tests.replay import replay
from tests.unit.test_gc_pressure import GIL_WAIT, LIB, LIBC, PYTHON, THREAD, WINDOW_S, analysis, finding, native, py

KERNEL = load_check_settings()["kernel_work"]
CHILDREN = load_check_settings()["children_cpu"]
SUBPROCESS = f"{LIB}/subprocess.py"

# a line writing to an unbuffered file: the thread inside libc's write
WRITING = THREAD + [py("write_response", 44), native("_io_FileIO_write"), native("write", LIBC)]
# glibc's internal aliases of the same call
WRITING_GI = THREAD + [py("write_response", 44), native("__GI___libc_write", LIBC)]
# np.load of a file per request: the read is made inside numpy, an installed package
NPYIO = "/srv/venv/lib/python3.11/site-packages/numpy/lib/npyio.py"
READING = THREAD + [py("projection", 58), py("load", 456, NPYIO),
                    py("read_array", 847, "/srv/venv/lib/python3.11/site-packages/numpy/lib/format.py"),
                    native("array_fromfile"), native("__libc_read", LIBC)]
# subprocess.run's fork, made inside the standard library: the service's line is its caller
SPAWNING = THREAD + [py("fingerprint", 46), py("run", 548, SUBPROCESS), py("Popen.__init__", 1026, SUBPROCESS),
                     py("Popen._execute_child", 1883, SUBPROCESS), native("do_fork_exec"), native("vfork", LIBC)]
WAITING_CHILD = THREAD + [py("fingerprint", 46), py("run", 550, SUBPROCESS),
                          py("Popen.communicate", 1209, SUBPROCESS), native("poll", LIBC)]


def with_times(found: Analysis, user_s: float, system_s: float, reaped_s: float = 0.0) -> Analysis:
    """The analysis with its process-level counters set."""
    assert found.os is not None
    found.os = dataclasses.replace(found.os, process_user_s=user_s, process_system_s=system_s,
                                   reaped_children_s=reaped_s)
    return found


def children(own_s: float = 1.0, reaped_s: float = 1.5, commands=(("sha256sum", 12),)) -> ChildProcesses:
    return ChildProcesses(own_s=own_s, reaped_s=reaped_s, alive_s=0.0, seen=12, waited=5,
                          machine_forks=900, commands=tuple(commands), window_s=4.0)


# -- the calls and the lines ------------------------------------------------------------------------

def test_libcs_wrappers_of_working_calls_are_named_and_waits_are_not():
    assert call_name(native("write", LIBC)) == "write"
    assert call_name(native("__GI___libc_write", LIBC)) == "write"
    assert call_name(native("__libc_pread64", LIBC)) == "pread"
    assert call_name(native("__open64_nocancel", LIBC)) == "open"
    assert call_name(native("_Fork", LIBC)) == "fork"
    assert call_name(native("vfork", LIBC)) == "vfork"
    # waits are the wait analysis's, not the kernel's work
    for wait in ("pthread_cond_timedwait", "poll", "epoll_wait", "__futex_abstimed_wait_common", "nanosleep"):
        assert call_name(native(wait, LIBC)) is None
    assert call_name(native("write")) is None  # not in the C library
    assert call_name(py("write")) is None


def test_the_line_that_made_the_call_is_the_innermost_python_frame_past_the_standard_library():
    found = analysis({1: [(WRITING, 30), (WRITING_GI, 10), (PYTHON, 40)], 2: [(GIL_WAIT, 80)],
                      3: [(SPAWNING, 20)]})
    calls = syscall_samples(found.native, {1, 2, 3}, 100)
    assert calls is not None
    assert (calls.samples, calls.in_calls) == (180, 60)
    assert calls.calls == (("write", 40), ("vfork", 20))
    assert [(s.function, s.line, s.samples) for s in calls.sites] == [("write_response", 44, 40),
                                                                      ("fingerprint", 46, 20)]


def test_a_call_made_inside_an_installed_package_is_the_services_line_that_called_it():
    found = analysis({1: [(READING, 30), (PYTHON, 30)]})
    calls = syscall_samples(found.native, {1}, 100)
    assert calls is not None and calls.calls == (("read", 30),)
    assert [(s.function, s.line) for s in calls.sites] == [("projection", 58)]


def test_a_call_whose_every_python_frame_is_a_librarys_stays_at_the_innermost():
    server = [native("thread_run"), py("<module>", 6, "/srv/venv/bin/gunicorn"),
              py("ThreadWorker.handle", 280, "/srv/venv/lib/python3.11/site-packages/gunicorn/workers/gthread.py"),
              py("write", 348, "/srv/venv/lib/python3.11/site-packages/gunicorn/util.py"), native("send", LIBC)]
    calls = syscall_samples(analysis({1: [(server, 10)]}).native, {1}, 100)
    assert calls is not None and [(s.function, s.line) for s in calls.sites] == [("write", 348)]


def test_without_native_frames_no_call_is_seen():
    found = analysis({1: [(WRITING, 30)]}, native_profile=False)
    assert syscall_samples(found.native, {1}, 100) is None


def test_the_spawning_line_is_the_caller_of_subprocess():
    assert spawns(py("run", 548, SUBPROCESS)) and spawns(py("Popen._execute_child", 1883, SUBPROCESS))
    assert not spawns(py("run", 10)) and not spawns(native("vfork", LIBC))
    found = analysis({1: [(SPAWNING, 20), (WAITING_CHILD, 60), (PYTHON, 20)]})
    counts = np.bincount(found.samples["stack"].to_numpy(dtype=np.int64),
                         weights=found.samples["count"].to_numpy(), minlength=len(found.profile.stacks))
    sites, in_spawn = spawn_sites(found.profile, counts)
    assert in_spawn == 80
    assert [(s.function, s.line, s.samples) for s in sites] == [("fingerprint", 46, 80)]


# -- the children, by the kernel's counters ---------------------------------------------------------------

def tree_of(pid: int = 100) -> TreeRecord:
    record = ProcRecord(pid=pid, cores=2, cpu_quota_cores=None, started_at=10.0)
    record.ended_at = 14.0
    # user, system, reaped children's user, system: at the start and the end of the window
    record.process_cpu = [[5.0, 1.0, 2.0, 0.5], [6.0, 1.4, 4.0, 0.8]]
    record.kernel = KernelRecord(machine="x86_64", observations=[
        (0.1, 101, 61, 5001, 0, 0, ""), (0.2, 101, 61, 5001, 0, 0, ""), (0.3, 102, 61, 5002, 0, 0, ""),
        (0.4, 102, 247, 1, 5003, 0, ""), (0.5, 101, 202, 0x55, 0x80, 0, "")])
    tree = TreeRecord(roots=[pid], records={pid: record}, parents={pid: None},
                      cmdlines={pid: ["python", "app.py"]})
    tree.other_children = {5001: [float(pid), None, None], 5004: [float(pid), None, None],
                           5005: [None, None, None], 5006: [float(pid), 0.5, 0.9]}
    tree.other_cmdlines = {5001: ["sha256sum"], 5004: ["sha256sum"], 5006: ["python", "app.py"]}
    tree.forks = [1000, 1900]
    return tree


def test_the_children_are_counted_from_the_counters_and_what_was_seen_of_them():
    found = child_processes(tree_of(), 100)
    assert found is not None
    assert found.own_s == pytest.approx(1.4) and found.reaped_s == pytest.approx(2.3)
    assert found.alive_s == pytest.approx(0.4)  # the one still alive at the end, from first sight
    assert found.seen == 4  # the one gone before its parent was read is the only process's
    assert found.waited == 3  # wait4's pid, waitid's second argument
    assert found.machine_forks == 900
    # a child read before its exec shows its parent's command line: not a command
    assert found.commands == (("sha256sum", 2),)
    assert found.share == pytest.approx(2.7 / 4.1)


def test_an_older_recording_has_no_children():
    tree = tree_of()
    tree.records[100].process_cpu = []
    assert child_processes(tree, 100) is None
    assert child_processes(None, 100) is None


def test_the_new_fields_round_trip_through_a_recording_and_older_ones_read_empty():
    tree = tree_of()
    again = TreeRecord.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again.other_cmdlines == tree.other_cmdlines and again.forks == tree.forks
    data = tree.to_dict()
    del data["other_cmdlines"], data["forks"]
    older = TreeRecord.from_dict(data)
    assert older.other_cmdlines == {} and older.forks == []
    assert parse_processes("cpu  1 2 3\nctxt 99\nprocesses 123456\nprocs_running 2\n") == 123456


# -- kernel_work ------------------------------------------------------------------------------------

def busy_writer() -> Analysis:
    return with_times(analysis({1: [(WRITING, 30), (PYTHON, 30)], 2: [(GIL_WAIT, 60)]}), 0.8, 1.2)


def test_a_service_whose_cpu_is_mostly_the_kernels_is_told_to_make_fewer_calls_at_the_line():
    found = kernel_work.run(busy_writer(), KERNEL)
    assert isinstance(found, Finding) and found.score == 100
    assert found.evidence["kernel_share"] == pytest.approx(0.6)
    assert (found.sites[0].function, found.sites[0].line) == ("write_response", 44)
    assert found.advice[0].startswith("Make fewer system calls at write_response")
    assert found.evidence["syscalls"] == {"write": 30}
    assert found.predicted_gain == pytest.approx(2.5)
    assert found.gain_basis.startswith("estimate:")
    assert [f.knob for f in found.fixes] == ["batch_syscalls"]


# a recursion past the edge of CPython's frame-stack chunk: the interpreter maps a new chunk on
# the way down and unmaps it on the way back (fixtures/sanity/recursion.py: 55% system time)
MAPPING = THREAD + [py("descend", 16), py("descend", 16), native("_PyThreadState_PushFrame"),
                    native("_PyObject_VirtualAlloc"), native("mmap64", LIBC)]
UNMAPPING = THREAD + [py("descend", 16), native("_PyThreadState_PopFrame"), native("munmap", LIBC)]


def test_calls_that_map_and_unmap_memory_are_told_to_reuse_it_not_to_buffer_io():
    found = kernel_work.run(with_times(analysis({1: [(MAPPING, 10), (UNMAPPING, 20), (PYTHON, 30)]}), 0.9, 1.1),
                            KERNEL)
    assert isinstance(found, Finding) and found.score == 100
    assert found.advice[0].startswith("Stop mapping and unmapping memory on every call at descend")
    assert "iterative" in found.advice[0] and "buffer the writes" not in found.advice[0]
    assert [f.knob for f in found.fixes] == ["reuse_memory"]


def test_a_recursion_whose_mapping_also_faults_keeps_the_recursion_in_the_one_memory_advice():
    # CI's sanity target `recursion` (400 frames deep): the native samples caught mmap/munmap and
    # the counters read 51,735 faults a second. The faults' advice alone (reuse the buffers)
    # dropped the recursion; both causes of memory mapped per call are one advice
    found = with_times(analysis({1: [(MAPPING, 10), (UNMAPPING, 20), (PYTHON, 30)]}), 0.9, 1.1)
    assert found.os is not None
    found.os = dataclasses.replace(found.os, minor_faults=200_000, io_syscalls=0)
    result = kernel_work.run(found, KERNEL)
    assert isinstance(result, Finding) and result.score == 100
    first = result.advice[0]
    assert first.startswith("Stop mapping and unmapping memory on every call at descend")
    assert "the threads were inside" in first and "page faults a second" in first
    assert "iterative" in first and "Reuse the buffers" in first and "buffer the writes" not in first
    assert [f.knob for f in result.fixes] == ["reuse_memory"]


def reader(read_gb: float, storage_gb: float | None = 0.0) -> Analysis:
    """Threads reading a file per request: 1.0 s of system time of 1.5 s, `read_gb` taken in by
    read calls (rchar) over the window, `storage_gb` of it from storage."""
    found = with_times(analysis({1: [(READING, 30), (PYTHON, 30)], 2: [(GIL_WAIT, 60)]}), 0.5, 1.0)
    assert found.os is not None
    found.os = dataclasses.replace(found.os, read_bytes=int(read_gb * 1e9), read_calls=1000,
                                   storage_read_bytes=None if storage_gb is None else int(storage_gb * 1e9),
                                   minor_faults=int(300 * 1000), io_syscalls=1000)
    return found


def test_reads_whose_copies_are_most_of_the_kernels_time_are_told_to_read_once():
    # fixtures/servers/weights_per_request.py: a 40 MB weights file np.load-ed per request, 3.55
    # GB a second from the page cache; the faults of the fresh arrays outnumber the calls, but
    # reusing a buffer for the read keeps the copy (0.15-0.17 s of system time per GB either way)
    found = kernel_work.run(reader(read_gb=5.0), KERNEL)
    assert isinstance(found, Finding) and found.score == 100
    assert found.evidence["read_copy_share"] == pytest.approx(5.0 * KERNEL.copy_s_per_gb / 1.0)
    assert found.evidence["storage_read_share"] == 0.0
    assert found.evidence["read_mb_per_s"] == pytest.approx(5000 / WINDOW_S)
    first = found.advice[0]
    assert first.startswith("Read once what every call reads again at projection")
    assert "served from memory" in first and "mmap_mode" in first and "Reuse the buffers" not in first
    assert (found.sites[0].function, found.sites[0].line) == ("projection", 58)
    assert [f.knob for f in found.fixes] == ["read_once"]
    assert "its read calls took in" in found.summary


def test_reads_from_storage_are_said_to_come_from_storage():
    found = kernel_work.run(reader(read_gb=5.0, storage_gb=4.0), KERNEL)
    assert isinstance(found, Finding)
    assert "80% of it fetched from storage" in found.advice[0]
    assert "served from memory" not in found.advice[0]


def test_reads_whose_copies_explain_little_of_the_kernels_time_leave_the_faults_advice():
    # 1 GB over the window copies in ~0.16 s of the 1.0 s system time: the faults are the work
    found = kernel_work.run(reader(read_gb=1.0, storage_gb=None), KERNEL)
    assert isinstance(found, Finding)
    assert found.evidence["read_copy_share"] < KERNEL.reads_share
    assert found.advice[0].startswith("Stop mapping and unmapping memory on every call")
    assert [f.knob for f in found.fixes] == ["reuse_memory"]


def test_a_few_percent_of_system_time_shows_no_problem():
    found = kernel_work.run(with_times(analysis({1: [(PYTHON, 60)]}), 1.9, 0.1), KERNEL)
    assert isinstance(found, Finding) and found.score == 0


def test_a_process_using_next_to_no_cpu_is_not_slowed_by_the_kernel():
    found = kernel_work.run(with_times(analysis({1: [(WRITING, 30)]}), 0.004, 0.006), KERNEL)
    assert isinstance(found, Finding) and found.score < 25


def test_threads_mostly_waiting_for_work_gain_no_throughput_from_fewer_calls():
    idle = THREAD[:-1] + [py("Queue.get", 171, f"{LIB}/queue.py"), native("PyThread_acquire_lock_timed"),
                          native("pthread_cond_timedwait", LIBC)]
    found = kernel_work.run(with_times(analysis({1: [(WRITING, 10), (PYTHON, 40), (idle, 150)]}), 0.1, 0.2),
                            KERNEL)
    assert isinstance(found, Finding) and found.predicted_gain == 1.0 and "latency" in found.gain_basis


def test_without_native_frames_the_threads_system_time_estimates_the_line_and_without_it_none_is_named():
    # the thread's system time over the lines its running samples show: an estimate
    estimated = kernel_work.run(with_times(analysis({1: [(WRITING, 60)]}, native_profile=False), 0.8, 1.2),
                                KERNEL)
    assert isinstance(estimated, Finding) and estimated.score == 100
    assert [(s.function, s.line) for s in estimated.sites] == [("write_response", 44)]
    assert "(an estimate)" in estimated.summary and estimated.evidence["syscall_sites"] is None
    # no thread's own system time read (an older recording): the share stands, no line is named
    blind = with_times(analysis({1: [(WRITING, 60)]}, native_profile=False), 0.8, 1.2)
    assert blind.os is not None
    blind.os = dataclasses.replace(blind.os, threads={t: dataclasses.replace(c, system_s=None)
                                                      for t, c in blind.os.threads.items()})
    found = kernel_work.run(blind, KERNEL)
    assert isinstance(found, Finding) and found.score == 100 and found.sites == ()
    assert "no line is named" in found.summary


def test_without_the_process_counters_kernel_work_does_not_apply():
    found = analysis({1: [(WRITING, 60)]})
    assert found.os is not None
    found.os = dataclasses.replace(found.os, process_user_s=None, process_system_s=None)
    assert isinstance(kernel_work.run(found, KERNEL), NotApplicable)


# -- children_cpu -----------------------------------------------------------------------------------

def spawner(kids: ChildProcesses | None) -> Analysis:
    found = analysis({1: [(SPAWNING, 20), (WAITING_CHILD, 60), (PYTHON, 20)]})
    found.children = kids
    return found


def test_a_service_whose_cpu_is_mostly_its_childrens_is_told_what_they_were_and_where_they_start():
    found = children_cpu.run(spawner(children()), CHILDREN)
    assert isinstance(found, Finding) and found.score == 100
    assert found.evidence["children_share"] == pytest.approx(0.6)
    assert (found.sites[0].function, found.sites[0].line) == ("fingerprint", 46)
    assert "sha256sum" in found.summary and "at least 12 children" in found.summary
    assert "at most 900" in found.summary
    assert "(sha256sum)" in found.advice[0] and "at fingerprint" in found.advice[0]
    # starting them: half the service's running samples (the fork; the poll for the child's
    # output is a wait) of its 1 s, stated beside the gain, which is Amdahl on the children's 60%
    assert found.evidence["starting_cpu_s"] == pytest.approx(0.5)
    assert found.predicted_gain == pytest.approx(2.5) and "up to 20% more" in found.gain_basis
    assert found.evidence["fix"] == {"knob": "children_in_process", "value": "sha256sum"}


def test_children_using_little_cpu_show_no_problem():
    found = children_cpu.run(spawner(children(own_s=2.0, reaped_s=0.1)), CHILDREN)
    assert isinstance(found, Finding) and found.score == 0


def test_without_the_reaped_childrens_counters_children_cpu_does_not_apply():
    assert isinstance(children_cpu.run(spawner(None), CHILDREN), NotApplicable)


# -- the ranking ---------------------------------------------------------------------------------

@pytest.mark.parametrize("part", ["kernel_work", "children_cpu"])
def test_the_kernels_and_the_childrens_cpu_rank_before_the_findings_that_count_it_as_their_code(part):
    found = finding(part, 100, 2.4)
    gil = finding("gil_contention", 100, 20.0)
    busy = finding("cpu_bound", 100, 1.0)
    preprocess = finding("preprocess_bound", 90, 3.0)
    ranked = rank([gil, busy, preprocess, found], order_of)
    assert ranked[0].id == part and verdict_for(ranked).primary == part


def test_a_small_kernel_share_leaves_the_ranking_alone():
    kernel = finding("kernel_work", 10, 1.1)
    gil = finding("gil_contention", 100, 20.0)
    assert [f.id for f in rank([kernel, gil], order_of)] == ["gil_contention", "kernel_work"]


def test_the_children_name_the_cause_before_the_kernel_time_their_starting_costs():
    kids = finding("children_cpu", 100, 2.0)
    kernel = finding("kernel_work", 100, 2.0)
    assert [f.id for f in rank([kernel, kids], order_of)][0] == "children_cpu"


def test_a_lock_every_request_queues_on_still_leads():
    kernel = finding("kernel_work", 80, 1.3)
    lock = finding("lock_contention", 100, 3.0)
    assert [f.id for f in rank([kernel, lock], order_of)] == ["lock_contention", "kernel_work"]


def test_asyncios_subprocess_functions_are_its_own():
    assert spawns(py("create_subprocess_exec", 218, f"{LIB}/asyncio/subprocess.py"))
    assert not spawns(py("create_subprocess_exec", 218, SUBPROCESS))


def test_a_sampled_child_that_exited_is_counted_as_itself_not_again_as_reaped():
    tree = tree_of()
    child = ProcRecord(pid=200, cores=2, cpu_quota_cores=None, started_at=10.0)
    child.process_cpu = [[0.0, 0.0, 0.0, 0.0], [0.5, 0.1, 0.0, 0.0]]
    child.target_exited = True
    tree.records[200], tree.parents[200] = child, 100
    found = child_processes(tree, 100)
    assert found is not None and found.reaped_s == pytest.approx(2.3 - 0.6)


def test_a_process_idling_at_a_twentieth_of_a_core_shows_no_kernel_or_children_problem():
    # CI: threads queued on a GIL held asleep used 0.05 cores, 45% of it system time; kernel_work
    # scored 25 and led the verdict over gil_contention 100.
    idle = with_times(analysis({1: [(WRITING, 30)]}), 0.11, 0.09)
    found = kernel_work.run(idle, KERNEL)
    assert isinstance(found, Finding) and found.score == 0


def test_a_small_kernel_share_of_a_busy_process_scores_by_its_share_alone():
    # ramp() runs 0-100: the CPU factor is its fraction, or a 21% share (a GIL convoy's futex
    # hand-offs) scored 100 and led the sqlite shared-connection verdict
    found = kernel_work.run(with_times(analysis({1: [(PYTHON, 60)]}), 3.16, 0.84), KERNEL)
    assert isinstance(found, Finding) and found.score < 10, found.score


def test_without_native_samples_the_threads_system_time_names_the_line_as_an_estimate(tmp_path):
    # syscall_heavy attached with --no-native: no sample inside libc's write, so the calls'
    # line is estimated from each thread's system time over the lines its running samples show
    report = replay("kernel", "syscall_heavy_without_native", tmp_path)
    assert report.verdict.primary == "kernel_work"
    found = next(f for f in report.findings if f.id == "kernel_work")
    line = marker_line(WORKLOADS / "syscall_heavy.py", "spool-write")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("write_response", line)
    assert found.evidence.get("syscall_sites") is None
    estimated = found.evidence.get("stime_sites")
    assert isinstance(estimated, dict) and next(iter(estimated)).startswith("write_response")
    assert "(an estimate)" in found.summary
    assert report.verdict.first_advice[0].startswith("Make fewer system calls at write_response")
    assert "estimate from the threads' system time" in report.verdict.first_advice[0]


def test_an_intra_op_pools_spin_in_the_kernel_is_the_pools_fan_out_not_the_services_calls(tmp_path):
    # CI's live blas_fanout attach on CPython 3.6 (fixtures/recorded/blas_fanout_starved): 8
    # request threads fanning out into OpenBLAS beside the suite's other tests. The pool's one
    # thread spun for work in sched_yield, 0.49 s of the process's 0.66 s of system time, and the
    # verdict read kernel_work critical ("the kernel does most of the work, 63%": buffer the
    # writes). The service's own calls made the rest.
    report = replay("blas_fanout_starved", "py36_pool_spinning_in_the_kernel", tmp_path)
    assert report.verdict.primary == "scheduler_overhead", report.verdict.headline
    kernel = next(f for f in report.findings if f.id == kernel_work.ID)
    assert kernel.evidence["kernel_cpu_s"] < 0.25 and "intra-op pool's own" in kernel.summary


def test_page_faults_name_the_line_that_touches_fresh_memory_not_where_it_is_unmapped(tmp_path):
    # fresh_buffers on CPython 3.13 (fixtures/recorded/kernel): the native samples in the kernel
    # were in munmap, called where each request's buffer is freed; the faults, most of the
    # system time, show in no call. The counters' faults name the work, the threads' system
    # time over their lines names the copying line, and the advice is to reuse the buffers.
    report = replay("kernel", "fresh_buffers_py313", tmp_path)
    assert report.verdict.primary == "kernel_work"
    found = next(f for f in report.findings if f.id == "kernel_work")
    line = marker_line(WORKLOADS / "fresh_buffers.py", "fresh-buffer")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("handle", line)
    assert isinstance(found.evidence.get("minor_faults_per_s"), float)
    assert report.verdict.first_advice[0].startswith("Stop mapping and unmapping memory on every call at handle")
    assert [f.knob for f in found.fixes] == ["reuse_memory"]


def test_a_weights_file_loaded_per_request_is_told_to_load_once_not_to_reuse_buffers(tmp_path):
    # fixtures/servers/weights_per_request.py under gunicorn -k gthread --threads 4 with wrk
    # (fixtures/recorded/kernel): 81% of the CPU system time, 37,000 page faults a second of the
    # fresh arrays, and 5.18 GB a second of reads the page cache served. The faults' advice
    # ("reuse the buffers") was the verdict's, with no gain: the threads inside `read` sampled
    # as waiting on I/O. Loading the matrix once was measured 5.42x.
    report = replay("kernel", "weights_loaded_per_request_gthread", tmp_path)
    assert report.verdict.primary == "kernel_work"
    found = next(f for f in report.findings if f.id == "kernel_work")
    line = marker_line(REPO / "fixtures" / "servers" / "weights_per_request.py", "load-per-request")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("projection", line)
    assert found.evidence["storage_read_share"] == 0.0
    assert found.evidence["read_copy_share"] >= KERNEL.reads_share
    assert report.verdict.first_advice[0].startswith("Read once what every call reads again at projection")
    assert [f.knob for f in found.fixes] == ["read_once"]
    assert found.predicted_gain == pytest.approx(4.0)  # Amdahl on 81%, capped
    # capped, the figure is neither bound for the advice (5.42x measured; a spool file buffered,
    # 3.24x where the cap said 4.00x) but a floor for the work made free
    assert "about 4.00x" in found.gain_basis and found.gain_floor is None
    lever = found.levers[0]
    assert not lever.upper_bound and "at least 4.00x" in lever.basis


def test_threads_sampled_waiting_in_their_reads_still_gain_when_the_cores_are_busy():
    # a read the page cache serves samples as an I/O wait while the kernel copies on the
    # thread's core: the process's cores, not the samples' states, say whether the CPU limits it
    found = reader(read_gb=5.0)
    assert found.os is not None
    idle = THREAD[:-1] + [py("Queue.get", 171, f"{LIB}/queue.py"), native("PyThread_acquire_lock_timed"),
                          native("pthread_cond_timedwait", LIBC)]
    waiting = with_times(analysis({1: [(READING, 10), (PYTHON, 40), (idle, 150)]}), 0.5, 1.0)
    assert waiting.os is not None
    busy_cores = dataclasses.replace(found.os, cpu_utilization=0.9)
    for utilization, gains in ((0.9, True), (0.3, False)):
        waiting.os = dataclasses.replace(busy_cores, cpu_utilization=utilization)
        result = kernel_work.run(waiting, KERNEL)
        assert isinstance(result, Finding)
        assert (result.predicted_gain > 1.0) is gains, (utilization, result.gain_basis)
