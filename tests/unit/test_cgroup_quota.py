"""A process's CPU quota and throttling, read from fake cgroup v1 and v2 trees
(diagnose/collect/cgroup.py), and how the /proc sampler's record carries them."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.collect import cgroup
from diagnose.collect.procfs import ProcRecord
from diagnose.model.os_summary import combine, summarize

PID = 4242
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID_MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


@pytest.fixture
def v2_tree(tmp_path):
    """A Kubernetes-like v2 tree: the pod's group holds the quota, the container's has none."""
    _write(tmp_path, f"/proc/{PID}/cgroup", "0::/kubepods/pod1/c1\n")
    _write(tmp_path, "/proc/self/mountinfo", V2_MOUNTINFO)
    _write(tmp_path, "/sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/pod1/cpu.max", "50000 100000\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/pod1/cpu.stat",
           "usage_usec 900000\nuser_usec 800000\nsystem_usec 100000\nnr_periods 30\n"
           "nr_throttled 28\nthrottled_usec 1500000\nnr_bursts 0\nburst_usec 0\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/pod1/c1/cpu.stat",
           "usage_usec 900000\nnr_periods 30\nnr_throttled 0\nthrottled_usec 0\n")
    _write(tmp_path, "/sys/fs/cgroup/kubepods/pod1/c1/cpuset.cpus.effective", "0-3\n")
    return tmp_path


def _v1_tree(root: Path, quota: str = "150000", parent_quota: str = "-1") -> Path:
    """A hybrid host's v1 cpu hierarchy (docker-like), v2 mounted at unified without cpu."""
    _write(root, f"/proc/{PID}/cgroup",
           "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:cpuset:/docker/abc\n0::/docker/abc\n")
    _write(root, "/proc/self/mountinfo", HYBRID_MOUNTINFO)
    base = "/sys/fs/cgroup/cpu,cpuacct"
    _write(root, f"{base}/cpu.cfs_quota_us", "-1\n")
    _write(root, f"{base}/cpu.cfs_period_us", "100000\n")
    _write(root, f"{base}/docker/cpu.cfs_quota_us", parent_quota + "\n")
    _write(root, f"{base}/docker/cpu.cfs_period_us", "100000\n")
    _write(root, f"{base}/docker/cpu.stat", "nr_periods 40\nnr_throttled 1\nthrottled_time 2000000\n")
    _write(root, f"{base}/docker/abc/cpu.cfs_quota_us", quota + "\n")
    _write(root, f"{base}/docker/abc/cpu.cfs_period_us", "100000\n")
    _write(root, f"{base}/docker/abc/cpu.stat",
           "nr_periods 30\nnr_throttled 12\nthrottled_time 750000000\nnr_bursts 0\nburst_time 0\n")
    _write(root, "/sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "0,2\n")
    (root / "sys/fs/cgroup/unified/docker/abc").mkdir(parents=True)
    return root


def test_v2_the_pods_quota_caps_the_container_and_its_counters_are_read(v2_tree):
    reading = cgroup.cpu_cgroup(PID, root=str(v2_tree))
    assert reading is not None
    assert (reading.version, reading.path) == (2, "/kubepods/pod1/c1")
    assert reading.quota_cores == 0.5 and reading.period_us == 100000
    assert reading.limit_path == "/kubepods/pod1"  # a parent's quota binds
    assert reading.throttling() == (30, 28, 1.5)  # the binding group's counters, in seconds
    assert reading.cpuset_cores == 4
    assert reading.usable_cores == 0.5
    # read again later from the same file
    assert cgroup.read_throttling(reading.stat_file) == (30, 28, 1.5)


def test_v2_max_everywhere_is_no_quota(v2_tree):
    _write(v2_tree, "/sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n")
    reading = cgroup.cpu_cgroup(PID, root=str(v2_tree))
    assert reading is not None and reading.quota_cores is None and reading.limit_path is None
    assert reading.usable_cores == 4  # the cpuset still limits
    # the counters of the process's own group
    assert reading.throttling() == (30, 0, 0.0)


def test_v1_on_a_hybrid_host_reads_the_cpu_hierarchy_not_the_unified_mount(tmp_path):
    reading = cgroup.cpu_cgroup(PID, root=str(_v1_tree(tmp_path)))
    assert reading is not None
    assert (reading.version, reading.path, reading.limit_path) == (1, "/docker/abc", "/docker/abc")
    assert reading.quota_cores == 1.5
    assert reading.throttling() == (30, 12, 0.75)  # throttled_time is in ns
    assert reading.cpuset_cores == 2


def test_v1_a_parents_smaller_quota_binds_and_its_counters_are_the_ones_read(tmp_path):
    reading = cgroup.cpu_cgroup(PID, root=str(_v1_tree(tmp_path, quota="150000", parent_quota="50000")))
    assert reading is not None
    assert reading.quota_cores == 0.5 and reading.limit_path == "/docker"
    assert reading.throttling() == (40, 1, 0.002)


def test_v1_minus_one_is_no_quota(tmp_path):
    reading = cgroup.cpu_cgroup(PID, root=str(_v1_tree(tmp_path, quota="-1")))
    assert reading is not None and reading.quota_cores is None and reading.period_us is None


def test_inside_a_container_the_mount_shows_the_containers_own_group(tmp_path):
    """No cgroup namespace: /proc/PID/cgroup names the host path, and the container's mount root
    is that group (mountinfo's fourth field): the group is the mount point itself."""
    _write(tmp_path, f"/proc/{PID}/cgroup", "4:cpu,cpuacct:/docker/abc\n")
    _write(tmp_path, "/proc/self/mountinfo",
           "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n")
    _write(tmp_path, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n")
    _write(tmp_path, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    _write(tmp_path, "/sys/fs/cgroup/cpu,cpuacct/cpu.stat", "nr_periods 5\nnr_throttled 0\nthrottled_time 0\n")
    reading = cgroup.cpu_cgroup(PID, root=str(tmp_path))
    assert reading is not None and reading.quota_cores == 2.0 and reading.limit_path == "/docker/abc"


def test_a_group_outside_the_readers_namespace_or_no_cgroup_file_is_no_reading(tmp_path):
    _write(tmp_path, f"/proc/{PID}/cgroup", "0::/../../other\n")
    _write(tmp_path, "/proc/self/mountinfo", V2_MOUNTINFO)
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True, exist_ok=True)
    assert cgroup.cpu_cgroup(PID, root=str(tmp_path)) is None
    assert cgroup.cpu_cgroup(999, root=str(tmp_path)) is None


def test_without_a_mountinfo_the_usual_mount_points_are_tried(tmp_path):
    _v1_tree(tmp_path)
    (tmp_path / "proc/self/mountinfo").unlink()
    reading = cgroup.cpu_cgroup(PID, root=str(tmp_path))
    assert reading is not None and reading.version == 1 and reading.quota_cores == 1.5


def test_mountinfo_escapes_and_cpu_lists():
    mounts = cgroup.parse_mountinfo(
        "32 31 0:29 / /sys/fs/cgroup/my\\040cpu rw - cgroup cgroup rw,cpu\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "50 31 0:40 / /proc rw - proc proc rw\n")
    assert [(m.version, m.point, "cpu" in m.controllers) for m in mounts] == [
        (1, "/sys/fs/cgroup/my cpu", True), (2, "/sys/fs/cgroup/unified", False)]
    assert cgroup.count_cpus("0-3,5,7-8\n") == 7
    assert cgroup.count_cpus("\n") is None


def test_the_live_machine_gives_a_reading_or_none():
    reading = cgroup.cpu_cgroup("self")
    assert reading is None or reading.version in (1, 2)


def _record(throttling, cgroup_path="v1:/q", pid=1, quota=0.5) -> ProcRecord:
    rec = ProcRecord(pid=pid, cores=2, cpu_quota_cores=quota, started_at=100.0)
    rec.ended_at = 103.0
    rec.cpu_throttling = throttling
    rec.cpu_cgroup = cgroup_path
    return rec


def test_the_record_keeps_the_counters_at_both_ends_and_older_records_still_load():
    rec = _record([[10, 8, 0.5], [40, 36, 4.0]])
    back = ProcRecord.from_dict(rec.to_dict())
    assert back.cpu_throttling == [[10, 8, 0.5], [40, 36, 4.0]] and back.cpu_cgroup == "v1:/q"
    old = rec.to_dict()
    del old["cpu_throttling"], old["cpu_cgroup"]
    assert ProcRecord.from_dict(old).cpu_throttling == [] and ProcRecord.from_dict(old).cpu_cgroup is None


def test_the_summary_has_the_windows_throttling_and_one_group_counts_once():
    summary = summarize(_record([[10, 8, 0.5], [40, 36, 4.0]]))
    assert (summary.throttle_periods, summary.throttled_periods) == (30, 28)
    assert summary.throttled_s == pytest.approx(3.5)
    assert summary.throttled_share == pytest.approx(28 / 30)
    assert summary.usable_cores == 0.5
    no_counters = summarize(_record([]))
    assert no_counters.throttled_share is None and no_counters.throttled_s is None
    # two workers in one group share its counters; another group's add up
    same = combine([summary, summarize(_record([[10, 8, 0.5], [40, 36, 4.0]], pid=2))])
    assert same.throttle_periods == 30 and same.throttled_s == pytest.approx(3.5)
    other = combine([summary, summarize(_record([[0, 0, 0.0], [30, 3, 0.5]], "v1:/r", pid=3))])
    assert other.throttle_periods == 60 and other.throttled_periods == 31 and other.cpu_cgroup is None
