"""Fault injection on the filesystem side: permissions, unwritable or full output directories,
report names, malformed rules files and hostile profile files.

Every fault is one `error: ...` line on stderr (never a traceback) with its own exit code, and
whatever was written before it is kept.
"""

from __future__ import annotations

import gzip
import json
import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from diagnose.errors import ExitCode
from tests.conftest import RECORDED, REPO, CliResult, invoke_cli
from tests.integration.conftest import requires_ptrace
from tests.integration.typed import read_report
from tests.speedscope_file import speedscope_of

# The exact files a default attach writes, and none beside them: attaches at their defaults.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("keep_raw_off")]

PROFILE = RECORDED / "underloaded.speedscope.json"
SLEEPER = "import time\nwhile True:\n    time.sleep(0.1)\n"


def cli(*args, user: str | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`python -m diagnose ARGS`, as `user` (via setpriv) when given."""
    command = [sys.executable, "-m", "diagnose", *map(str, args)]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}",
                   "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          **kwargs)


def analyze(*args) -> CliResult:
    """`diagnose analyze ARGS` in this process (click's test runner): reading a hostile file or a
    bad rules file needs no process of its own, and the exit code, stderr and any traceback are
    what a real run gives. Faults that need one (another user, signals, a pipe, two runs at once,
    a file that would block) keep `cli`."""
    return invoke_cli("analyze", *args, check_json=False)[0]


def one_line_error(proc: subprocess.CompletedProcess | CliResult, code: int, *fragments: str) -> str:
    """Asserts the exit code, no traceback, and exactly one `error:` line (the last one) holding
    every fragment; returns that line."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.fixture
def sleeper():
    """A live Python process owned by the test's user; killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER])
    time.sleep(0.3)
    yield proc.pid
    proc.kill()
    proc.wait()


# --- an unprivileged user ---------------------------------------------------------------------

def _can_run_as_nobody() -> str | None:
    """None when the tests can run diagnose as `nobody`, else why not."""
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "no 'nobody' user"
    probe = cli("--version", user="nobody", timeout=60)
    if probe.returncode != 0:
        return f"'nobody' cannot run this interpreter and package: {probe.stderr.strip()[-200:]}"
    return None


@pytest.fixture(scope="module")
def as_nobody():
    reason = _can_run_as_nobody()
    if reason:
        pytest.skip(reason)
    return "nobody"


@pytest.fixture
def shared_dir():
    """A directory every user can read (pytest's tmp_path is private to root), with a copy of a
    recorded profile in it."""
    path = Path(tempfile.mkdtemp(prefix="diagnose-faults-"))
    path.chmod(0o755)
    shutil.copyfile(PROFILE, path / "profile.speedscope.json")
    (path / "profile.speedscope.json").chmod(0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@requires_ptrace
def test_attaching_as_an_unprivileged_user_is_permission_denied(as_nobody, sleeper, shared_dir):
    out = shared_dir / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    proc = cli("attach", sleeper, "-d", "2", "-q", "-o", out, user=as_nobody)
    one_line_error(proc, ExitCode.PERMISSION, f"not permitted to read process {sleeper}",
                   "run as root or allow ptrace")
    assert files(out) == []


def test_read_only_output_directory_names_the_file_and_touches_nothing(as_nobody, shared_dir):
    read_only = shared_dir / "reports"
    read_only.mkdir(mode=0o755)  # root's: `nobody` may not write in it
    earlier = read_only / "diagnose-earlier.json"
    earlier.write_text("{}")
    proc = cli("analyze", shared_dir / "profile.speedscope.json", "-o", read_only, user=as_nobody)
    one_line_error(proc, ExitCode.OUTPUT_FAILED, f"could not write {read_only}/diagnose-profile-",
                   "Permission denied", "no report file was written")
    assert files(read_only) == ["diagnose-earlier.json"] and earlier.read_text() == "{}"
    assert (shared_dir / "profile.speedscope.json").read_bytes() == PROFILE.read_bytes()


@requires_ptrace
def test_read_only_output_directory_stops_attach_before_sampling(as_nobody, shared_dir):
    read_only = shared_dir / "reports"
    read_only.mkdir(mode=0o755)
    target = subprocess.Popen(["setpriv", f"--reuid={as_nobody}",
                               f"--regid={pwd.getpwnam(as_nobody).pw_gid}", "--clear-groups",
                               sys.executable, "-c", SLEEPER])
    try:
        time.sleep(0.5)
        proc = cli("attach", target.pid, "-d", "2", "-q", "-o", read_only, user=as_nobody)
    finally:
        target.kill()
        target.wait()
    one_line_error(proc, ExitCode.OUTPUT_FAILED,
                   f"cannot write to the output directory {read_only}: Permission denied")
    assert files(read_only) == []


# --- output path that is a file ---------------------------------------------------------------

def test_output_path_that_is_a_file(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("precious\n")
    proc = analyze(PROFILE, "-o", blocker)
    assert proc.returncode == ExitCode.USAGE and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(f"Directory '{blocker}' is a file.")
    proc = analyze(PROFILE, "-o", blocker / "reports")
    one_line_error(proc, ExitCode.OUTPUT_FAILED,
                   f"could not create the output directory {blocker / 'reports'}: Not a directory")
    # attach refuses it before sampling anything
    proc = cli("attach", os.getpid(), "-d", "2", "-o", blocker)
    assert proc.returncode == ExitCode.USAGE and "is a file" in proc.stderr
    assert blocker.read_text() == "precious\n"


# --- a full disk ------------------------------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path):
    """A 64 kB tmpfs: room for a profile and the JSON report, not for the HTML report."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _kept_after_full_disk(proc, out: Path) -> dict:
    message = one_line_error(proc, ExitCode.OUTPUT_FAILED, "No space left on device", "; kept ")
    html = next(word for word in message.split() if word.endswith(".html:"))[:-1]
    base = Path(html).name.removesuffix(".html")
    assert Path(html).parent == out
    assert [n for n in files(out) if not n.startswith(".")] == [f"{base}.json", f"{base}.md",
                                                                f"{base}.speedscope.json"]
    assert not list(out.rglob("*.tmp"))  # no half-written report left behind
    assert f"kept {base}.speedscope.json, {base}.json, {base}.md" in message
    assert read_report(out / f"{base}.json").verdict.primary
    return json.loads((out / f"{base}.speedscope.json").read_text())


def test_full_disk_during_analyze_keeps_the_files_written_before(full_disk):
    proc = analyze(PROFILE, "-o", full_disk)
    speedscope = _kept_after_full_disk(proc, full_disk)
    assert speedscope == json.loads(PROFILE.read_text())


@requires_ptrace
def test_full_disk_during_attach_keeps_the_samples(full_disk, sleeper):
    proc = cli("attach", sleeper, "-d", "2", "-q", "-o", full_disk)
    speedscope = speedscope_of(_kept_after_full_disk(proc, full_disk))
    assert sum(len(p.samples) for p in speedscope.profiles) > 0


# --- report names -----------------------------------------------------------------------------

@requires_ptrace
def test_an_attach_in_the_same_second_as_an_earlier_report_does_not_overwrite_it(sleeper, out_dir):
    """Two attaches cannot share a window on one pid without disturbing each other's probes, so
    the earlier run is stood in for by its files: one for every second the new run may take."""
    out_dir.mkdir(parents=True)
    now = time.time()
    earlier = {}
    for second in range(30):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + second))
        suffix = (".json", ".html", ".speedscope.json")[second % 3]  # any one file claims a name
        earlier[f"diagnose-{sleeper}-{stamp}{suffix}"] = f"earlier run {second}"
    for name, text in earlier.items():
        (out_dir / name).write_text(text)
    proc = cli("attach", sleeper, "-d", "2", "-q", "-o", out_dir)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    for name, text in earlier.items():
        assert (out_dir / name).read_text() == text, name
    new = sorted(set(files(out_dir)) - set(earlier))
    stem = new[0].removesuffix(".html")
    assert stem.endswith("-2") and new == [f"{stem}.html", f"{stem}.json", f"{stem}.md",
                                           f"{stem}.speedscope.json"], new
    assert read_report(out_dir / f"{stem}.json").verdict


def test_two_analyze_runs_at_once_keep_both_reports(out_dir):
    command = [sys.executable, "-m", "diagnose", "analyze", str(PROFILE), "-o", str(out_dir)]
    runs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    stems = sorted(n.removesuffix(".html") for n in files(out_dir) if n.endswith(".html"))
    assert len(stems) == 2 and len(files(out_dir)) == 8, files(out_dir)
    plain = [stem.removesuffix("-2") for stem in stems]
    if plain[0] == plain[1]:  # the same second (nearly always): the second run got a suffix
        assert stems == [plain[0], plain[0] + "-2"], stems
    for stem in stems:
        assert read_report(out_dir / f"{stem}.json").verdict
        assert (out_dir / f"{stem}.speedscope.json").read_bytes() == PROFILE.read_bytes()


def test_a_taken_report_name_gets_a_suffix(out_dir):
    """Deterministic: the same base name three times gives base, base-2, base-3; nothing is
    overwritten."""
    from diagnose.collect.run_context import RunContext
    from diagnose.run import pipeline

    service, results, per_process, categorizer = pipeline.analyze([PROFILE], None, RunContext(),
                                                                  None, live=False)
    written = [pipeline.write_outputs(service, results, per_process, categorizer, [PROFILE],
                                      out_dir, "diagnose-42-20260101-000000", None,
                                      keep_raw=False, move_profile=False) for _ in range(3)]
    assert [o.html.name for o in written] == ["diagnose-42-20260101-000000.html",
                                              "diagnose-42-20260101-000000-2.html",
                                              "diagnose-42-20260101-000000-3.html"]
    assert len(files(out_dir)) == 12


# --- malformed rules --------------------------------------------------------------------------

RULES = {
    "unknown table": ("[categories]\nname = 'model'\n", 1, "unknown table [categories]"),
    "unknown check id": ("[checks.lock_contention]\nlow = 0.1\n[checks.lock_contenton]\nlow = 0.1\n",
                         3, "unknown check id 'lock_contenton'"),
    "unknown key": ("[checks.pool_wait]\nlow = 0.1\nhihg = 0.4\n", 3, "unknown key 'hihg'"),
    "wrong type": ("[checks.pool_wait]\nlow = '0.1'\n", 2, "must be a number, not string"),
    "bad regex": ("[[category]]\nname = 'model'\npatterns = [\n  { function = 'forward(' },\n]\n",
                  4, "invalid regular expression 'forward('"),
    "not TOML": ("[checks.pool_wait\n", 1, "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_malformed_rules_exit_2_naming_the_line(tmp_path, out_dir, case):
    text, line, fragment = RULES[case]
    rules = tmp_path / "rules.toml"
    rules.write_text(text)
    proc = analyze(PROFILE, "--rules", rules, "-o", out_dir)
    one_line_error(proc, ExitCode.USAGE, f"error: {rules}", f"line {line}", fragment)
    assert files(out_dir) == []


def test_malformed_rules_stop_attach_before_sampling(tmp_path, out_dir, sleeper):
    rules = tmp_path / "rules.toml"
    rules.write_text("[checks.lock_contenton]\nlow = 0.1\n")
    started = time.monotonic()
    proc = cli("attach", sleeper, "-d", "30", "--rules", rules, "-o", out_dir)
    one_line_error(proc, ExitCode.USAGE, f"{rules}, line 1: unknown check id 'lock_contenton'")
    assert time.monotonic() - started < 20 and files(out_dir) == []


# --- hostile profile files --------------------------------------------------------------------

def _deep(depth: int) -> bytes:
    return b'{"shared": {"frames": []}, "profiles": ' + b"[" * depth + b"]" * depth + b"}"


PROFILES = {
    "binary garbage": (lambda: random.Random(7).randbytes(8192), "a binary file"),
    "text garbage": (lambda: b"hello, this is not a profile\n" * 50, "not a profile"),
    "truncated speedscope": (lambda: PROFILE.read_bytes()[: PROFILE.stat().st_size // 2],
                             "not valid JSON"),
    "deeply nested": (lambda: _deep(200_000), "nested too deeply"),
    "non-UTF-8 garbage": (lambda: "d\xe9j\xe0 vu, \xa7 not a profile\n".encode("latin-1") * 20,
                          "not a profile"),
    "gzip-compressed": (lambda: gzip.compress(PROFILE.read_bytes()), "gzip-compressed"),
    "speedscope of the wrong shape": (lambda: b'{"shared": [], "profiles": {}}',
                                      "not a valid py-spy profile"),
    "an integer of 5000 digits": (lambda: b'{"shared": {"frames": [{"name": "f", "line": '
                                  + b"9" * 5000 + b'}]}, "profiles": []}',
                                  "not a valid py-spy profile"),
}


@pytest.mark.parametrize("case", sorted(PROFILES))
def test_hostile_profiles_exit_6(tmp_path, out_dir, case):
    make, fragment = PROFILES[case]
    path = tmp_path / "input.prof"
    path.write_bytes(make())
    proc = analyze(path, "-o", out_dir)
    one_line_error(proc, ExitCode.BAD_PROFILE, f"error: {path}", fragment)
    assert files(out_dir) == []


def test_huge_profile_is_refused_before_it_is_read(tmp_path, out_dir):
    huge = tmp_path / "huge.speedscope.json"
    with open(huge, "wb") as fh:
        fh.truncate(600 << 20)  # sparse: costs no disk
    started = time.monotonic()
    proc = analyze(huge, "-o", out_dir)
    one_line_error(proc, ExitCode.BAD_PROFILE, f"{huge}: 600 MiB is larger than a profile may be")
    assert time.monotonic() - started < 20 and files(out_dir) == []


def test_a_device_is_never_read_as_a_profile(out_dir):
    proc = cli("analyze", "/dev/zero", "-o", out_dir, timeout=60)  # would never end if read
    one_line_error(proc, ExitCode.BAD_PROFILE, "/dev/zero: not a regular file")


def test_non_utf8_names_in_a_real_profile_are_kept(tmp_path, out_dir):
    path = tmp_path / "latin1.txt"
    path.write_bytes("thread (7): w\xf6rker;main (/srv/app.py:3);r\xe9sum\xe9 (/srv/app.py:9) 25\n"
                     .encode("latin-1"))
    proc = analyze(path, "-o", out_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(files(out_dir)) == 4


def test_a_profile_read_from_a_pipe(tmp_path, out_dir):
    """`diagnose analyze <(cat profile)`: a pipe is read once; the speedscope copy is re-encoded."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(PROFILE.read_bytes())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = cli("analyze", fifo, "-o", out_dir, timeout=60)
    writer.join(5)
    assert proc.returncode == 0, proc.stderr
    speedscope = next(out_dir.glob("*.speedscope.json"))
    assert json.loads(speedscope.read_text())["profiles"]


def test_a_profile_naming_special_files_never_blocks(tmp_path, out_dir):
    """Source lines are read for the report: a frame whose file is a FIFO (or a link to one), a
    device or a /proc file must be skipped, not opened (a FIFO with no writer blocks forever)."""
    fifo = tmp_path / "stage.py"
    os.mkfifo(fifo)
    (tmp_path / "link.py").symlink_to(fifo)
    lib = "/usr/lib/python3.11/threading.py"
    stacks = [f"thread ({100 + i}): req-{i};_bootstrap ({lib}:995);run ({lib}:975);"
              f"loop ({loop}:3);{leaf} 20"
              for i, (loop, leaf) in enumerate([
                  (fifo, "get (/usr/lib/python3.11/queue.py:171)"),
                  ("/dev/zero", "sleep (/dev/tty:7)"),
                  (tmp_path / "link.py", "compute (/dev/stdin:9)"),
                  ("/proc/kmsg", "compute (/dev/watchdog:9)")])]
    # and a main thread whose only frame is in the FIFO: its state and the verdict's wording
    # are read from that line
    idle = [f"thread (1): MainThread;<module> ({fifo}:2) 50", "thread (2): t;<module> (/dev/tty:1) 5"]
    for name, lines in (("special.txt", stacks), ("idle.txt", idle)):
        profile = tmp_path / name
        profile.write_text("\n".join(lines) + "\n")
        proc = cli("analyze", profile, "-o", out_dir / name, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert len(files(out_dir / name)) == 4


# --- a containerised target -------------------------------------------------------------------

def test_source_lines_of_a_containerised_target_are_read_through_its_root(tmp_path):
    """A target in another mount namespace (a container) sees its own files at its paths: they
    are read through /proc/<pid>/root, not from the host's path of the same name."""
    from diagnose.samples import source

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private mount namespace needs root and unshare(1)")
    app = tmp_path / "app"
    app.mkdir()
    (app / "server.py").write_text("host copy\n")
    script = (f"mount -t tmpfs tmpfs {app} && printf 'first\\ncontainer copy\\n' > {app}/server.py"
              f" && echo ready && exec sleep 60")
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            pytest.skip(f"a private mount namespace is not permitted here: {proc.stderr.read()}")
        with source.reading_from([proc.pid]):
            assert source.getline(str(app / "server.py"), 2) == "container copy\n"
        with source.reading_from([]):  # offline: the name as it is
            assert source.getline(str(app / "server.py"), 1) == "host copy\n"
    finally:
        proc.kill()
        proc.wait()
