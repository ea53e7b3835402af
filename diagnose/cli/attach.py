"""`diagnose attach PID`: sample a live service and diagnose it."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from diagnose.cli.common import EPILOG, Ticket, common_output, finish, log, run, ticket_options
from diagnose.errors import NoSamples
from diagnose.outputs.files import prepare_output_dir


@dataclass(frozen=True)
class AttachArgs:
    """The options of one attach run (`diagnose attach`, and `demo` on its own service)."""

    pids: tuple[int, ...]
    duration: float
    rate: int | None
    native: str
    output_dir: Path
    rules_file: str | None
    as_json: bool
    open_browser: bool
    keep_raw: bool
    quiet: bool
    children: bool = True
    async_tasks: bool = True
    kernel_waits: bool = True
    ticket: Ticket = field(default_factory=Ticket)


def attach_and_report(args: AttachArgs) -> int:
    """SIGINT, SIGTERM and SIGHUP are handled over the whole command (see StopSignals): before
    sampling starts one aborts; during the window one ends it early and the partial report is
    written, exiting 128 + the signal's number; a second one aborts at once."""
    from diagnose.collect import priority
    from diagnose.collect.attach import StopSignals

    # Before the heavy imports: beside a service that saturates the cores they took minutes.
    priority.raise_own()
    with StopSignals() as stop:
        return _attach_stoppable(stop, args)


def _attach_stoppable(stop, args: AttachArgs) -> int:
    from diagnose.collect.attach import AttachOptions, capture, describe_target
    from diagnose.collect.tree import python_descendants
    from diagnose.report import pipeline

    pids, duration, rate, native = list(args.pids), args.duration, args.rate, args.native
    output_dir, rules_file, keep_raw, quiet = args.output_dir, args.rules_file, args.keep_raw, args.quiet
    children, ticket = args.children, args.ticket

    user_rules = pipeline.load_user_rules(rules_file)
    # Before the window, not after it: a read-only or full directory is said before sampling.
    prepare_output_dir(output_dir, probe=True)
    labels = []
    for pid in pids:
        proc = describe_target(pid)
        try:
            label = f"{pid} ({proc.name()}, {proc.num_threads()} threads"
            workers = len(python_descendants(pid))
            if workers:
                label += (f", {workers} Python child process{'es' if workers > 1 else ''}"
                          + ("" if children else " not sampled: --no-children"))
            labels.append(label + ")")
        except Exception:
            labels.append(f"{pid} (?)")
    log(f"Sampling pid {', '.join(labels)} for {duration:g} s"
         + (f" at {rate} Hz ..." if rate else " ..."))
    show_bar = not quiet and sys.stderr.isatty()
    bar_ctx = click.progressbar(length=1000, file=sys.stderr, show_eta=True, width=30) if show_bar else None
    state = {"done": 0}

    def progress(fraction: float, threads: int) -> None:
        step = int(fraction * 1000)
        if bar_ctx is not None and step > state["done"]:
            bar_ctx.update(step - state["done"])
            state["done"] = step
        elif bar_ctx is None and not quiet and int(fraction * 10) > state["done"]:
            state["done"] = int(fraction * 10)
            log(f"  sampled {state['done'] * 10}% of the window ({threads} threads)")

    options = AttachOptions(duration=duration, rate=rate, native=native, children=children,
                            async_tasks=args.async_tasks, kernel_waits=args.kernel_waits)
    # What the analysis needs that does not depend on the samples is made before the window,
    # in this thread: nothing of diagnose's competes with the service or the recorders inside
    # it (a helper thread at the least priority held the GIL while starved and stretched a 6 s
    # window beside 64 busy threads to 50 s).
    pipeline.prepare_page()
    if bar_ctx is not None:
        with bar_ctx:
            cap = capture(pids, output_dir, options, progress, stop=stop, warn=log)
    else:
        cap = capture(pids, output_dir, options, progress, stop=stop, warn=log)
    sampled_at, sampled_cpu = time.monotonic(), time.process_time()
    try:
        outputs = pipeline.from_capture(cap, output_dir, user_rules, keep_raw)
    except NoSamples:
        if stop.signum is None:
            raise
        raise stop.error(f"interrupted by {stop.name} {cap.sampling.duration_s:.1f} s into "
                         f"the window, before py-spy took any sample: no report written") from None
    stopped = None
    if cap.interrupted_by is not None:
        stopped = stop.error(f"interrupted by {stop.name} after {cap.sampling.duration_s:.1f} s "
                             f"of the {duration:g} s window: partial report written")
    elif stop.signum is not None:
        stopped = stop.error(f"{stop.name} received after the window ended: the full report was "
                             f"written")
    ticket.window = (cap.started_at, cap.started_at + (cap.sampling.duration_s or duration))
    code = finish(outputs, args.as_json, args.open_browser, stopped, cap.recorder_failure, ticket)
    if os.environ.get("DIAGNOSE_TIMING"):
        log(f"timing: {time.monotonic() - sampled_at:.2f} s from the end of sampling to the "
            f"printed verdict ({time.process_time() - sampled_cpu:.2f} s CPU)")
    return code


@click.command(epilog=EPILOG)
@click.argument("pids", metavar="PID [PID ...]", type=click.IntRange(min=1), nargs=-1, required=True)
@click.option("--duration", "-d", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds to sample.")
@click.option("--rate", "-r", type=click.IntRange(1, 1000), default=None,
              help="Stack samples per second. Default: chosen from the thread count so that the "
                   "target pauses little (about 200 thread-samples/s: 20 Hz for 10 threads, "
                   "3 Hz for 64). --rate 100 is full fidelity at a real cost to the target.")
@click.option("--native/--no-native", "native", default=None,
              help="Force native (C) frames on or off. Default: on where py-spy supports them; "
                   "without them thread state is estimated from Python frames.")
@click.option("--keep-raw", is_flag=True,
              help="Also keep py-spy's recording with its measured instants (.chrometrace.json; a "
                   "process tree: one per process, X.1.chrometrace.json, X.2...), the /proc record "
                   "(.procfs.json) and the native calibration samples (.native.speedscope.json) so "
                   "`analyze X*.chrometrace.json --procfs X.procfs.json --native-profile "
                   "X.native.speedscope.json` can replay the session.")
@click.option("--children/--no-children", default=True, show_default=True,
              help="Also sample every Python process descending from PID (gunicorn / uvicorn "
                   "workers, multiprocessing pools), followed as they start and exit; the sampling "
                   "budget is shared across them. A launcher PID (a shell) is followed to its "
                   "Python children.")
@click.option("--async-tasks/--no-async-tasks", "async_tasks", default=True, show_default=True,
              help="Also read each sampled process's asyncio tasks from its memory a few times "
                   "a second (CPython 3.11-3.13; nothing runs in the target and it is not "
                   "paused): what each suspended task waits on (a Semaphore, Lock, Queue, "
                   "Event, another task, a Future, a sleep), which no stack sample shows.")
@click.option("--kernel-waits/--no-kernel-waits", "kernel_waits", default=True, show_default=True,
              help="On every /proc tick, read what each sleeping thread waits on from the kernel "
                   "(/proc/PID/task/TID/syscall: a lock's futex, the GIL's, a file lock and its "
                   "holder from /proc/locks, a pipe and its other end, a socket, a child, a "
                   "timer), without stopping the target; it works where native frames cannot be "
                   "read (containers) and names waits no frame shows.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@common_output
@ticket_options
def attach(pids, duration, rate, native, children, async_tasks, kernel_waits, keep_raw, quiet, output_dir,
           rules_file, as_json, open_browser, fail_on, print_format, write_pprof, push_url, app_name, tags, tenant):
    """Sample the running Python service PID (and its worker processes) and diagnose its
    bottleneck. Name several PIDs to sample several process trees as one service."""
    mode = "auto" if native is None else ("on" if native else "off")
    ticket = Ticket(fail_on, print_format, write_pprof, push_url, app_name, tuple(tags), tenant)
    ticket.check(as_json)
    args = AttachArgs(tuple(pids), duration, rate, mode, output_dir, rules_file, as_json,
                      open_browser, keep_raw, quiet, children, async_tasks, kernel_waits, ticket)
    run(lambda: attach_and_report(args))
