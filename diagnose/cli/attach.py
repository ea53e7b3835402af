"""`diagnose attach PID`: sample a live service and diagnose it."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from diagnose.cli.analyst import Analyst, AnalystGone, Request, analyse_and_finish
from diagnose.cli.common import EPILOG, log, run
from diagnose.cli.options import (OutputOptions, ProbeOptions, SamplingOptions, TicketOptions,
                                  probe_options, quiet_option, report_output_options,
                                  sampling_options, ticket_options)
from diagnose.errors import DiagnoseError, NoSamples, SignalAbort
from diagnose.outputs.files import prepare_output_dir


@dataclass(frozen=True)
class AttachArgs:
    """One attach run (`diagnose attach`, and `demo` on its own service)."""

    pids: tuple[int, ...]
    sampling: SamplingOptions
    outputs: OutputOptions
    probes: ProbeOptions = field(default_factory=ProbeOptions)
    ticket: TicketOptions = field(default_factory=TicketOptions)
    quiet: bool = False


def attach_and_report(args: AttachArgs) -> int:
    """SIGINT, SIGTERM and SIGHUP are handled over the whole command (see StopSignals): before
    sampling starts one aborts; during the window one ends it early and the partial report is
    written, exiting 128 + the signal's number; a second one aborts at once."""
    from diagnose.collect import activity, priority

    # Before the heavy imports: beside a service that saturates the cores they took minutes.
    priority.raise_own()
    # The sampling plan measures how busy each process is between two reads of its threads' CPU
    # at least activity.MIN_INTERVAL_S apart: the first read as the command started where its
    # PIDs led the arguments (cli/__init__), else here; the imports and the probes fill that
    # interval.
    busy_since = activity.first_read(list(args.pids))
    from diagnose.collect.capture import StopSignals

    with StopSignals() as stop:
        return _attach_stoppable(stop, args, busy_since)


def _attach_stoppable(stop, args: AttachArgs, busy_since) -> int:
    # The analysis stack is imported by the analyst process beside the probes and the window,
    # at the service's priority once the window is under way (cli/analyst.py), not here on the
    # way to the first sample.
    analyst = Analyst.start()
    try:
        return _attach_with(stop, args, busy_since, analyst)
    finally:
        if analyst is not None:
            analyst.close()


def _attach_with(stop, args: AttachArgs, busy_since, analyst: Analyst | None) -> int:
    from diagnose.collect.capture import AttachOptions, capture, describe_target
    from diagnose.collect.tree import python_descendants

    pids, sampling, probes, quiet = list(args.pids), args.sampling, args.probes, args.quiet
    duration, output_dir = sampling.duration, args.outputs.output_dir

    user_rules = None
    if args.outputs.rules_file:  # said before the window; only then is the check schema read here
        from diagnose.run import pipeline

        user_rules = pipeline.load_user_rules(args.outputs.rules_file)
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
                          + ("" if probes.children else " not sampled: --no-children"))
            labels.append(label + ")")
        except Exception:
            labels.append(f"{pid} (?)")
    followed = _follow_peers(pids, probes.children) if probes.follow_peers else []
    pids += [p.pid for p in followed]
    labels += [f"{p.pid} (peer serving {p.address})" for p in followed]
    log(f"Sampling pid {', '.join(labels)} for {duration:g} s"
         + (f" at {sampling.rate} Hz ..." if sampling.rate else " ..."))
    show_bar = not quiet and sys.stderr.isatty()
    bar_ctx = click.progressbar(length=1000, file=sys.stderr, show_eta=True, width=30) if show_bar else None
    state = {"done": 0}

    def progress(fraction: float, threads: int) -> None:
        if analyst is not None:  # the window is under way
            analyst.share()
        step = int(fraction * 1000)
        if bar_ctx is not None and step > state["done"]:
            bar_ctx.update(step - state["done"])
            state["done"] = step
        elif bar_ctx is None and not quiet and int(fraction * 10) > state["done"]:
            for line in progress_lines(state["done"], fraction, threads):
                log(line)
            state["done"] = int(fraction * 10)

    options = AttachOptions(duration=duration, rate=sampling.rate, native=sampling.native,
                            children=probes.children, async_tasks=probes.async_tasks,
                            kernel_waits=probes.kernel_waits,
                            followed=tuple(p.pid for p in followed))
    # What the analysis needs that does not depend on the samples is made before the window,
    # in this thread: nothing of diagnose's competes with the service or the recorders inside
    # it (a helper thread at the least priority held the GIL while starved and stretched a 6 s
    # window beside 64 busy threads to 50 s).
    if analyst is None:
        from diagnose.run import pipeline

        pipeline.prepare_page()
    if bar_ctx is not None:
        with bar_ctx:
            cap = capture(pids, output_dir, options, progress, stop=stop, warn=log,
                          busy_since=busy_since)
    else:
        cap = capture(pids, output_dir, options, progress, stop=stop, warn=log, busy_since=busy_since)
    sampled_at, sampled_cpu = time.monotonic(), time.process_time()
    stopped = None
    if cap.interrupted_by is not None:
        stopped = stop.error(f"interrupted by {stop.name} after {cap.sampling.duration_s:.1f} s "
                             f"of the {duration:g} s window: partial report written")
    window = (cap.started_at, cap.started_at + (cap.sampling.duration_s or duration))
    request = Request(cap, user_rules, sampling.keep_raw, args.outputs, args.ticket,
                      (stopped.message, stopped.exit_code) if stopped is not None else None, window)
    try:
        code, analyst_cpu = _analyse(analyst, request)
    except NoSamples:
        if stop.signum is None:
            raise
        raise stop.error(f"interrupted by {stop.name} {cap.sampling.duration_s:.1f} s into "
                         f"the window, before py-spy took any sample: no report written") from None
    if stopped is None and stop.signum is not None:
        late = stop.error(f"{stop.name} received after the window ended: the full report was "
                          f"written")
        log(late.message)
        code = late.exit_code
    if os.environ.get("DIAGNOSE_TIMING"):
        log(f"timing: {time.time() - window[1]:.2f} s from the window's end and "
            f"{time.monotonic() - sampled_at:.2f} s from the end of sampling to the printed "
            f"verdict ({time.process_time() - sampled_cpu:.2f} s CPU here{analyst_cpu})")
    return code


def progress_lines(done: int, fraction: float, threads: int) -> list[str]:
    """The log's progress lines for the tenths of the window passed since tenth `done`, each once,
    in order: a tick delayed past a tenth (a loaded machine; ticks 0.1-0.5 s apart in a 3 s
    window) still says it, as a reader of the log and a script waiting for "sampled 10%" expect."""
    return [f"  sampled {tenth * 10}% of the window ({threads} threads)"
            for tenth in range(done + 1, int(fraction * 10) + 1)]


def _analyse(analyst: Analyst | None, request: Request) -> tuple[int, str]:
    """(the exit code, the analyst's CPU in words for DIAGNOSE_TIMING): the analysis by the
    analyst process, or here where it could not start or died without an answer (the capture's
    files are still there unless it got as far as writing the report)."""
    if analyst is not None:
        try:
            done = analyst.finish(request)
            return done.exit_code, (f"; the analyst's: {done.import_cpu_s:.2f} s importing, done "
                                    f"{done.imported_at - request.window[1]:+.2f} s from the window's end, "
                                    f"{done.analysis_cpu_s:.2f} s analysing")
        except (SignalAbort, KeyboardInterrupt):
            # Aborted while the analyst worked: it is killed before its own cleanup could run,
            # so py-spy's temporary outputs are removed here.
            analyst.close()
            request.capture.cleanup()
            raise
        except AnalystGone as exc:
            if not Path(request.capture.profile_path).exists():
                raise DiagnoseError(f"{exc}; the recordings went with it: no report") from None
            log(f"warning: {exc}; analysing here")
    return analyse_and_finish(request), ""


def _follow_peers(pids: list[int], children: bool) -> list:
    """The local Python processes the service's connections lead to (collect/peers.py), said
    as they are found; a peer that is not Python is said and left to /proc."""
    from diagnose.collect.peers import MAX_PEERS, connected_peers
    from diagnose.collect.tree import descendants

    family = list(pids) + ([d for p in pids for d in descendants(p)] if children else [])
    peers = connected_peers(family)
    followed = [p for p in peers if p.python][:MAX_PEERS]
    for peer in peers:
        if not peer.python:
            log(f"Peer pid {peer.pid} serving {peer.address} does not run Python: read from /proc only")
    if not peers:
        log("--follow-peers: no local process serves this service's connections")
    elif len([p for p in peers if p.python]) > MAX_PEERS:
        log(f"--follow-peers: following the first {MAX_PEERS} Python peers")
    return followed


@click.command(epilog=EPILOG)
@click.argument("pids", metavar="PID [PID ...]", type=click.IntRange(min=1), nargs=-1, required=True)
@sampling_options()
@probe_options
@quiet_option
@report_output_options
@ticket_options()
def attach(pids: tuple[int, ...], sampling: SamplingOptions, probes: ProbeOptions, quiet: bool,
           outputs: OutputOptions, ticket: TicketOptions) -> None:
    """Sample the running Python service PID (and its worker processes) and diagnose its
    bottleneck. Name several PIDs to sample several process trees as one service."""
    ticket.check(outputs.as_json)
    args = AttachArgs(tuple(pids), sampling, outputs, probes, ticket, quiet)
    run(lambda: attach_and_report(args))
