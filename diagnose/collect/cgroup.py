"""The CPU limits the kernel puts on a process through its cgroup: the CFS quota (cgroup v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us`, v2 `cpu.max`), the cpuset, and the throttling the
quota causes (`cpu.stat`: `nr_periods`, `nr_throttled`, `throttled_time` in ns on v1,
`throttled_usec` on v2).

A process's usable cores are its quota, not the machine's: a pod limited to 0.5 core on a
64-core node gets half a core's time per period, and its threads sit throttled (runnable, on
no core) for the rest of each period once the quota is spent. The quota that binds is the
smallest on the way up to the root: a parent's smaller quota caps every child.

Where the group is: the `/proc/PID/cgroup` line whose controller list has `cpu`
(`4:cpu,cpuacct:/NAME`, v1) or the `0::/PATH` line (v2), under the mount of that hierarchy found
in `/proc/self/mountinfo` (a hybrid host mounts v2 at /sys/fs/cgroup/unified, with no cpu
controller there: the v1 hierarchy is read first). The path in `/proc/PID/cgroup` is relative to
the reader's cgroup namespace root and the mount's root (mountinfo's fourth field) is where that
mount starts: a host reading a container's process sees the full host path under a mount of the
whole hierarchy; a reader inside a container sees paths under its own namespace root. A path
outside the reader's view (`/../..`) cannot be read: no reading.

Every function takes `root`, the directory the absolute paths are read under ("/" on a live
system; a recorded fake tree in tests). Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuCgroup:
    """One reading of a process's cpu cgroup: its limits and its throttling counters so far."""

    version: int  # 1 or 2
    path: str  # the process's group, as /proc/PID/cgroup names it
    quota_cores: float | None  # the binding (smallest) quota up to the root; None: unlimited
    period_us: int | None  # the period of that quota
    limit_path: str | None = None  # the group whose quota binds: the process's own or a parent's
    cpuset_cores: int | None = None  # CPUs in the group's effective cpuset, where one is read
    # Cumulative counters of the group whose quota binds (its own group's when unlimited):
    # periods with runnable threads, periods that ran out of quota, and the time runqueues sat
    # throttled, summed over CPUs (two CPUs throttled for 1 s count 2 s).
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_s: float | None = None
    stat_file: str | None = None  # the cpu.stat the counters came from (read_throttling)

    @property
    def usable_cores(self) -> float | None:
        """The cores the limits allow: the quota and the cpuset, whichever is smaller."""
        limits = [x for x in (self.quota_cores, self.cpuset_cores) if x]
        return float(min(limits)) if limits else None

    def throttling(self) -> tuple[int, int, float] | None:
        """(nr_periods, nr_throttled, throttled_s), or None when the counters were not read."""
        if self.nr_periods is None or self.nr_throttled is None or self.throttled_s is None:
            return None
        return self.nr_periods, self.nr_throttled, self.throttled_s


@dataclass(frozen=True)
class Mount:
    """A cgroup hierarchy's mount, from one mountinfo line."""

    version: int
    root: str  # the path inside the hierarchy the mount shows (mountinfo's fourth field)
    point: str  # where it is mounted
    controllers: frozenset[str]  # v1: the super options naming controllers; v2: empty


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:  # gone, not ours to read, or not there (no such controller file)
        return None


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup (v1) and cgroup2 mounts of a mountinfo text, in its order."""
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        if fstype == "cgroup2":
            mounts.append(Mount(2, _unescape(fields[3]), _unescape(fields[4]), frozenset()))
        elif fstype == "cgroup":
            mounts.append(Mount(1, _unescape(fields[3]), _unescape(fields[4]), frozenset(options)))
    return mounts


# Where hierarchies are usually mounted, for a reader without a mountinfo (a trimmed fake tree).
_GUESSED = (Mount(1, "/", "/sys/fs/cgroup/cpu,cpuacct", frozenset({"cpu", "cpuacct"})),
            Mount(1, "/", "/sys/fs/cgroup/cpu", frozenset({"cpu"})),
            Mount(1, "/", "/sys/fs/cgroup/cpuset", frozenset({"cpuset"})),
            Mount(2, "/", "/sys/fs/cgroup/unified", frozenset()),
            Mount(2, "/", "/sys/fs/cgroup", frozenset()))


def mounts(root: str = "/") -> list[Mount]:
    """The reader's cgroup mounts (/proc/self/mountinfo), or the usual places when it has none."""
    text = _read(_under(root, "/proc/self/mountinfo"))
    found = parse_mountinfo(text) if text else []
    if found:
        return found
    return [m for m in _GUESSED if os.path.isdir(_under(root, m.point))]


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """({v1 controller: path}, the v2 path or None) from a /proc/PID/cgroup text."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path.strip()
        else:
            for name in controllers.split(","):
                v1.setdefault(name, path.strip())
    return v1, v2


def group_dir(mount: Mount, path: str, root: str = "/") -> str | None:
    """The directory of group `path` (as /proc/PID/cgroup names it) under `mount`, or None when
    the group lies outside what the mount shows (another cgroup namespace's `/..` paths)."""
    if path.startswith("/.."):
        return None
    rel = path
    if mount.root not in ("", "/"):
        if path == mount.root or path.startswith(mount.root.rstrip("/") + "/"):
            rel = path[len(mount.root.rstrip("/")):]
        # else: already relative to the mount's root (a reader inside the namespace it shows)
    directory = _under(root, os.path.join(mount.point, rel.lstrip("/")))
    return directory if os.path.isdir(directory) else None


def _ancestors(directory: str, top: str) -> list[str]:
    """`directory`, its parents, ... up to and including `top` (the mount point)."""
    out = [directory]
    top = os.path.normpath(top)
    while os.path.normpath(out[-1]) != top:
        parent = os.path.dirname(os.path.normpath(out[-1]))
        if parent == os.path.normpath(out[-1]) or not parent.startswith(top):
            break
        out.append(parent)
    return out


def _quota_v1(directory: str) -> tuple[int, int] | None:
    quota, period = _read(os.path.join(directory, "cpu.cfs_quota_us")), \
        _read(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        q, p = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return None
    return (q, p) if q > 0 and p > 0 else None  # -1: no quota


def _quota_v2(directory: str) -> tuple[int, int] | None:
    text = _read(os.path.join(directory, "cpu.max"))
    if not text:
        return None
    quota, _, period = text.strip().partition(" ")
    try:
        q, p = int(quota), int(period or "100000")
    except ValueError:  # "max": no quota
        return None
    return (q, p) if q > 0 and p > 0 else None


def parse_cpu_stat(text: str) -> tuple[int, int, float] | None:
    """(nr_periods, nr_throttled, throttled seconds) from a cpu.stat text."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    if "nr_periods" not in values or "nr_throttled" not in values:
        return None
    if "throttled_usec" in values:
        throttled = values["throttled_usec"] / 1e6
    elif "throttled_time" in values:
        throttled = values["throttled_time"] / 1e9
    else:
        return None
    return values["nr_periods"], values["nr_throttled"], throttled


def read_throttling(stat_file: str | None) -> tuple[int, int, float] | None:
    """The throttling counters in `stat_file` now (CpuCgroup.stat_file), or None."""
    text = _read(stat_file) if stat_file else None
    return parse_cpu_stat(text) if text else None


def count_cpus(text: str) -> int | None:
    """CPUs in a cpuset list ("0-3,5,7-8"), or None when it names none."""
    total = 0
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            total += (int(high) - int(low) + 1) if high else 1
        except ValueError:
            return None
    return total or None


def _cpuset_cores(v1: dict[str, str], v2_dir: str | None, found: list[Mount], root: str) -> int | None:
    if "cpuset" in v1:
        for mount in found:
            if mount.version == 1 and "cpuset" in mount.controllers:
                directory = group_dir(mount, v1["cpuset"], root)
                if directory:
                    for name in ("cpuset.effective_cpus", "cpuset.cpus"):
                        text = _read(os.path.join(directory, name))
                        if text and text.strip():
                            return count_cpus(text)
    if v2_dir:
        text = _read(os.path.join(v2_dir, "cpuset.cpus.effective"))
        if text and text.strip():
            return count_cpus(text)
    return None


def _locate(v1: dict[str, str], v2: str | None, found: list[Mount], root: str
            ) -> tuple[int, str, Mount, str] | None:
    """(version, path, mount, directory) of the process's cpu group: v1's cpu hierarchy first (a
    hybrid host's v2 mount has no cpu controller), else v2."""
    if "cpu" in v1:
        for mount in found:
            if mount.version == 1 and "cpu" in mount.controllers:
                directory = group_dir(mount, v1["cpu"], root)
                if directory:
                    return 1, v1["cpu"], mount, directory
    if v2 is not None:
        for mount in found:
            if mount.version == 2:
                directory = group_dir(mount, v2, root)
                if directory and (os.path.exists(os.path.join(directory, "cpu.stat"))
                                  or os.path.exists(os.path.join(directory, "cpu.max"))):
                    return 2, v2, mount, directory
    return None


def cpu_cgroup(pid: int | str = "self", root: str = "/") -> CpuCgroup | None:
    """The cpu cgroup reading of process `pid`, or None when none can be read (no cgroup file,
    no mount of its hierarchy, a group outside the reader's namespace)."""
    text = _read(_under(root, f"/proc/{pid}/cgroup"))
    if not text:
        return None
    v1, v2 = parse_proc_cgroup(text)
    found = mounts(root)
    located = _locate(v1, v2, found, root)
    if located is None:
        return None
    version, path, mount, directory = located
    read_quota = _quota_v1 if version == 1 else _quota_v2
    best: tuple[float, int, str] | None = None  # (cores, period, directory)
    for level in _ancestors(directory, _under(root, mount.point)):
        quota = read_quota(level)
        if quota is not None and (best is None or quota[0] / quota[1] < best[0]):
            best = (quota[0] / quota[1], quota[1], level)
    stat_dir = best[2] if best is not None else directory
    stat_file = os.path.join(stat_dir, "cpu.stat")
    counters = read_throttling(stat_file)
    v2_dir = directory if version == 2 else None
    if v2_dir is None and v2 is not None:  # a hybrid host: the cpuset may be on v2
        v2_mount = next((m for m in found if m.version == 2), None)
        v2_dir = group_dir(v2_mount, v2, root) if v2_mount else None
    return CpuCgroup(
        version=version, path=path,
        quota_cores=round(best[0], 6) if best is not None else None,
        period_us=best[1] if best is not None else None,
        limit_path=_relative(best[2], _under(root, mount.point), mount.root) if best else None,
        cpuset_cores=_cpuset_cores(v1, v2_dir, found, root),
        nr_periods=counters[0] if counters else None,
        nr_throttled=counters[1] if counters else None,
        throttled_s=counters[2] if counters else None,
        stat_file=stat_file if counters else None)


def _relative(directory: str, point: str, mount_root: str) -> str:
    """A group directory as a cgroup path (the mount's root joined with the part under it)."""
    rel = os.path.relpath(os.path.normpath(directory), os.path.normpath(point))
    rel = "" if rel == "." else rel
    return "/" + "/".join(p for p in (mount_root.strip("/"), rel) if p)
