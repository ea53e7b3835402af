"""The target's run state before and after a capture: diagnose must never leave it stopped.

py-spy stops the target's threads while it reads their stacks (ptrace). When py-spy exits, the
kernel detaches it and the threads run on; a recorder killed at the wrong instant can still leave
a process in a stop (state `t` or `T`) that nobody will end. A process its owner stopped before
the attach (SIGSTOP, Ctrl-Z: state `T`) must stay stopped. So the states are recorded before any
py-spy touches the target, and after the capture a process found stopped that was not stopped
before is resumed with SIGCONT — unless another live tracer (a debugger) holds it.

A process its owner stops *during* the window cannot be told apart from one our recorders left
stopped; it is resumed too, and the message says so.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

STOPPED = ("T", "t")  # group stop (SIGSTOP, Ctrl-Z) and tracing stop (ptrace)
SETTLE_S = 0.5  # a stop seen right after a tracer exits gets this long to clear by itself


@dataclass
class ProcessState:
    pid: int
    start_ticks: int | None  # /proc/<pid>/stat field 22: tells a reused pid from the same process
    threads: dict[int, str] = field(default_factory=dict)  # tid -> state letter

    @property
    def stopped(self) -> bool:
        return any(state in STOPPED for state in self.threads.values())


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _parse_stat(text: str) -> tuple[str, int | None]:
    """(state letter, start time in clock ticks) of one /proc stat line (comm may hold spaces)."""
    rest = text[text.rfind(")") + 2:].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return (rest[0] if rest else "?"), None


def process_state(pid: int) -> ProcessState | None:
    """Every thread's state letter, or None when the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    state, start = _parse_stat(stat)
    result = ProcessState(pid, start)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = []
    for tid in tids:
        text = _read(f"/proc/{pid}/task/{tid}/stat")
        if text is not None:
            result.threads[tid] = _parse_stat(text)[0]
    if not result.threads:
        result.threads[pid] = state
    return result


STOP_CONFIRM_READS = 5  # a stop counts as the owner's only if it lasts this many reads...
STOP_CONFIRM_INTERVAL_S = 0.05  # ...this far apart: another profiler's pause lasts milliseconds


def snapshot(pids: Iterable[int]) -> dict[int, ProcessState]:
    """Each process's state. A process seen stopped is read again a few times, so another
    sampler's brief pause (a second `diagnose attach`, a py-spy) is not taken for a stop its
    owner made; it counts as stopped only when every read finds it stopped."""
    states = {}
    for pid in dict.fromkeys(pids):
        state = process_state(pid)
        for _ in range(STOP_CONFIRM_READS - 1):
            if state is None or not state.stopped:
                break
            time.sleep(STOP_CONFIRM_INTERVAL_S)
            state = process_state(pid)
        if state is not None:
            states[pid] = state
    return states


def tracer_pid(pid: int, tid: int | None = None) -> int:
    """The pid ptrace-attached to the process (or to its thread `tid`), 0 for none."""
    path = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    for line in (_read(path) or "").splitlines():
        if line.startswith("TracerPid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return 0
    return 0


def _process_name(pid: int) -> str:
    return (_read(f"/proc/{pid}/comm") or "?").strip()


def _stopped(pid: int) -> bool:
    state = process_state(pid)
    return state is not None and state.stopped


def describe_stop(state: ProcessState) -> str:
    letters = sorted({s for s in state.threads.values() if s in STOPPED})
    tracer = tracer_pid(state.pid)
    if tracer:
        return f"held in tracing stop by process {tracer} ({_process_name(tracer)})"
    return f"stopped (state {'/'.join(letters)}: by SIGSTOP or Ctrl-Z)"


def restore(before: dict[int, ProcessState], pids: Iterable[int],
            settle_s: float = SETTLE_S) -> list[str]:
    """Resumes each of `pids` (and each process of `before`) found stopped now that was not
    stopped before; leaves the rest alone. Call once every py-spy of ours has exited.
    Returns one message per process resumed, or found stopped and left so."""
    candidates = []
    for pid in dict.fromkeys([*before, *pids]):
        now = process_state(pid)
        if now is None or not now.stopped:
            continue
        was = before.get(pid)
        if was is not None and was.start_ticks != now.start_ticks:
            continue  # the pid now names another process, never ours to touch
        if was is not None and was.stopped:
            continue  # its owner stopped it before the attach: it stays stopped
        candidates.append(pid)
    if not candidates:
        return []
    deadline = time.monotonic() + settle_s
    while candidates and time.monotonic() < deadline:
        time.sleep(0.05)
        candidates = [pid for pid in candidates if _stopped(pid)]
    messages = []
    for pid in candidates:
        state = process_state(pid)
        if state is None or not state.stopped:
            continue
        tracers = {tracer_pid(pid, tid) for tid, s in state.threads.items() if s in STOPPED}
        live = sorted(t for t in tracers if t and os.path.exists(f"/proc/{t}"))
        if live:  # a debugger holds it: resuming it is that debugger's business
            messages.append(f"process {pid} is held in tracing stop by process {live[0]} "
                            f"({_process_name(live[0])}), not by diagnose: left as it is")
            continue
        how = describe_stop(state)
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError as exc:
            messages.append(f"process {pid} was left {how} after sampling and could not be "
                            f"resumed ({exc.strerror}): resume it with `kill -CONT {pid}`")
            continue
        messages.append(f"process {pid} was found {how} after sampling, though it ran before the "
                        f"attach: it was resumed (SIGCONT)")
    return messages
