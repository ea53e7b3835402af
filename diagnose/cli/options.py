"""The option groups the commands share, each declared once: a decorator that puts a family of
click options on a command (in the order given, where the decorator stands) and hands the
command ONE frozen dataclass built from their values instead of a loose parameter per option.

    @click.command()
    @sampling_options()
    @report_output_options
    def attach(sampling: SamplingOptions, outputs: OutputOptions): ...

An option whose help (or default) differs between commands is still declared here once, as a
function of what differs; the command line reads exactly as it did when each command spelled
its options out."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from diagnose.vocab import GATE_SEVERITIES

if TYPE_CHECKING:
    from diagnose.load.loadtest import Generator

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[Any], Any]


def option_group(dest: str, build: Callable[..., object],
                 options: Sequence[Decorator]) -> Callable[[F], F]:
    """A decorator declaring `options` on a click command and passing the command, as the
    keyword `dest`, `build(**their values)` in place of the values themselves."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            kwargs[dest] = build(**values)
            return fn(*args, **kwargs)

        # functools.wraps shares the options declared below this decorator (click keeps them
        # in __click_params__); those declared here are the ones appended from here on.
        before = len(getattr(command, "__click_params__", ()))
        for option in reversed(options):  # click lists the last one applied first
            option(command)
        names = [p.name for p in getattr(command, "__click_params__", [])[before:]]
        return command  # type: ignore[return-value]

    return decorate


# --- one declaration per option ---------------------------------------------------------------

def duration_option(help: str) -> Decorator:
    return click.option("--duration", "-d", type=click.FloatRange(min=1), default=10.0,
                        show_default=True, help=help)


def warmup_option(help: str) -> Decorator:
    return click.option("--warmup", type=click.IntRange(0, 600), default=2, show_default=True,
                        help=help)


def slo_p99_option(help: str, **attrs: Any) -> Decorator:
    return click.option("--slo-p99", type=click.FloatRange(min=0, min_open=True), help=help,
                        **attrs)


def diagnose_seconds_option(default: float, help: str) -> Decorator:
    return click.option("--diagnose-seconds", type=click.FloatRange(min=0), default=default,
                        show_default=True, help=help)


quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress output.")


def _output_dir_option(help: str) -> Decorator:
    return click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("diagnose-reports"), show_default=True, help=help)


def _rules_option(help: str) -> Decorator:
    return click.option("--rules", "rules_file", type=click.Path(dir_okay=False), help=help)


def _json_option(help: str) -> Decorator:
    return click.option("--json", "as_json", is_flag=True, help=help)


def _open_option(help: str) -> Decorator:
    return click.option("--open", "open_browser", is_flag=True, help=help)


def _fail_on_option(help: str) -> Decorator:
    return click.option("--fail-on", type=click.Choice(GATE_SEVERITIES), default=None, help=help)


_print_option = click.option(
    "--print", "print_format", type=click.Choice(["md"]), default=None,
    help="Print the Markdown ticket summary (also written as .md) on stdout instead of the "
         "verdict lines.")

_pprof_option = click.option(
    "--pprof", "write_pprof", is_flag=True,
    help="Also write the samples as a gzipped pprof profile (.pb.gz) with thread, role, state, "
         "category, pid and tid labels.")


def _push_option(help: str) -> Decorator:
    return click.option("--push", "push_url", metavar="URL", help=help)


def _app_name_option(help: str) -> Decorator:
    return click.option("--app-name", default="diagnose", show_default=True, help=help)


def _tag_option(help: str) -> Decorator:
    return click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE", help=help)


def _tenant_option(help: str) -> Decorator:
    return click.option("--tenant", metavar="ID", help=help)


# --- sampling a live process ------------------------------------------------------------------

@dataclass(frozen=True)
class SamplingOptions:
    """How long and how densely a live process is sampled, and what of it is kept."""

    duration: float = 10.0
    rate: int | None = None  # None: chosen by the sampling plan from the thread count
    native: str = "auto"  # "auto", "on", "off"
    keep_raw: bool = False  # keep py-spy's recordings and the /proc record beside the report


def _sampling(native: bool | None = None, **values: Any) -> SamplingOptions:
    mode = "auto" if native is None else ("on" if native else "off")
    return SamplingOptions(native=mode, **values)


def sampling_options(duration_help: str = "Seconds to sample.",
                     duration_only: bool = False) -> Callable[[F], F]:
    """--duration, --rate, --native/--no-native, --keep-raw as `sampling` (`demo`: --duration
    alone, the rest at their defaults)."""
    options = [duration_option(duration_help)]
    if not duration_only:
        options += [
            click.option(
                "--rate", "-r", type=click.IntRange(1, 1000), default=None,
                help="Stack samples per second. Default: chosen from the thread count so that "
                     "the target pauses little (about 200 thread-samples/s: 20 Hz for 10 "
                     "threads, 3 Hz for 64). --rate 100 is full fidelity at a real cost to the "
                     "target."),
            click.option(
                "--native/--no-native", "native", default=None,
                help="Force native (C) frames on or off. Default: on where py-spy supports "
                     "them; without them thread state is estimated from Python frames."),
            click.option(
                "--keep-raw", is_flag=True, envvar="DIAGNOSE_KEEP_RAW", show_envvar=True,
                help="Also keep py-spy's recording with its measured instants "
                     "(.chrometrace.json; a process tree: one per process, X.1.chrometrace.json, "
                     "X.2...), the /proc record (.procfs.json), the native calibration "
                     "samples (.native.speedscope.json), the asyncio task reads (.tasks.json) and "
                     "the live sampling (.sampling.json) so `analyze X*.chrometrace.json --procfs "
                     "X.procfs.json --native-profile X.native.speedscope.json --tasks X.tasks.json "
                     "--sampling X.sampling.json` can replay the session."),
        ]
    return option_group("sampling", _sampling, options)


@dataclass(frozen=True)
class ProbeOptions:
    """What is read beside the stack samples: the pid's descendant processes, each process's
    asyncio tasks, and what the kernel says each sleeping thread waits on."""

    children: bool = True
    async_tasks: bool = True
    kernel_waits: bool = True
    follow_peers: bool = False


probe_options = option_group("probes", ProbeOptions, [
    click.option(
        "--children/--no-children", default=True, show_default=True,
        help="Also sample every Python process descending from PID (gunicorn / uvicorn workers, "
             "multiprocessing pools), followed as they start and exit; the sampling budget is "
             "shared across them. A launcher PID (a shell) is followed to its Python children."),
    click.option(
        "--async-tasks/--no-async-tasks", "async_tasks", default=True, show_default=True,
        help="Also read each sampled process's asyncio tasks from its memory a few times a "
             "second (CPython 3.11-3.13; nothing runs in the target and it is not paused): what "
             "each suspended task waits on (a Semaphore, Lock, Queue, Event, another task, a "
             "Future, a sleep), which no stack sample shows."),
    click.option(
        "--kernel-waits/--no-kernel-waits", "kernel_waits", default=True, show_default=True,
        help="On every /proc tick, read what each sleeping thread waits on from the kernel "
             "(/proc/PID/task/TID/syscall: a lock's futex, the GIL's, a file lock and its holder "
             "from /proc/locks, a pipe and its other end, a socket, a child, a timer), without "
             "stopping the target; it works where native frames cannot be read (containers) and "
             "names waits no frame shows."),
    click.option(
        "--follow-peers", "follow_peers", is_flag=True, default=False,
        help="Also sample, as part of the service, the local Python processes its connections "
             "lead to (a backend on this host over TCP or a Unix socket, found before the "
             "window; up to 4): a verdict that ends at a backend then names what the backend "
             "runs. Without it such a backend is read from /proc only (its CPU, threads and "
             "waits)."),
])
"""--children, --async-tasks, --kernel-waits (each with its --no- form) and --follow-peers as
`probes`."""


# --- where the outputs go ---------------------------------------------------------------------

@dataclass(frozen=True)
class OutputOptions:
    """Where a command writes its files, the user's rules file, and what it prints or opens."""

    output_dir: Path = Path("diagnose-reports")
    rules_file: str | None = None  # a TOML file of extra patterns and check settings
    as_json: bool = False  # the JSON on stdout instead of the verdict lines
    open_browser: bool = False


def output_options(output_dir_help: str, rules_help: str | None = None,
                   json_help: str | None = None, open_help: str | None = None) -> Callable[[F], F]:
    """--output-dir/-o, and those of --rules, --json, --open whose help is given, as `outputs`."""
    options = [_output_dir_option(output_dir_help)]
    if rules_help is not None:
        options.append(_rules_option(rules_help))
    if json_help is not None:
        options.append(_json_option(json_help))
    if open_help is not None:
        options.append(_open_option(open_help))
    return option_group("outputs", OutputOptions, options)


report_output_options = output_options(
    "Where the .html, .json and .speedscope.json files are written.",
    rules_help="A TOML file of extra frame-category patterns and check settings (checked "
               "before the built-in rules).",
    json_help="Print the JSON report on stdout (logs go to stderr).",
    open_help="Open the HTML report in a browser.")
"""The outputs of the commands that write a diagnosis (attach, analyze, demo, sweep)."""

page_output_options = output_options(
    "Where the .html and .json files are written.",
    json_help="Print the JSON on stdout (logs go to stderr).",
    open_help="Open the HTML page in a browser.")
"""The outputs of the commands that write one page and its JSON (diff, experiment)."""


# --- the push to a profiling server, and the ticket --------------------------------------------

@dataclass(frozen=True)
class PushOptions:
    """Where and how a pprof profile is sent to a Grafana Pyroscope server (`push_url` None:
    not sent)."""

    push_url: str | None = None
    app_name: str = "diagnose"
    tags: tuple[str, ...] = ()  # NAME=VALUE, as given
    tenant: str | None = None  # X-Scope-OrgID of a multi-tenant Pyroscope
    push_timeout: float = 10.0  # seconds per try (watch)
    push_retries: int = 3  # further tries after a transient failure (watch)


_TICKET_PUSH_HELP = (
    "Send the pprof profile to a Grafana Pyroscope server's ingest API (e.g. "
    "http://pyroscope:4040); the local outputs are written first and kept whatever happens "
    "(exit 13 when the push fails).",
    "--push: the application name the profile is filed under.",
    "--push: an extra label (repeatable); verdict, service and host are added (pid and tid ride "
    "on the samples as numbers: no series per process).",
    "--push: the tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID).",
)

_WATCH_PUSH_HELP = (
    "A Grafana Pyroscope server (http:// or https://, e.g. http://localhost:4040): each window's "
    "pprof profile is POSTed to its /ingest API. Without it the windows are only written "
    "locally.",
    "The application name in Pyroscope (letters, digits, _ . - /).",
    "A label on every pushed profile (repeatable); beside verdict, service and host, which are "
    "added by default (pid and tid ride on the samples as numbers: no series per process).",
    "The tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID).",
)


def _push_options(helps: tuple[str, str, str, str]) -> list[Decorator]:
    push, app_name, tag, tenant = helps
    return [_push_option(push), _app_name_option(app_name), _tag_option(tag),
            _tenant_option(tenant)]


watch_push_options = option_group("push", PushOptions, _push_options(_WATCH_PUSH_HELP) + [
    click.option("--push-timeout", type=click.FloatRange(min=0.1), default=10.0,
                 show_default=True, help="Seconds to wait for the server on each try."),
    click.option("--push-retries", type=click.IntRange(0, 10), default=3, show_default=True,
                 help="Further tries after a connection error, a timeout, HTTP 429 or 5xx "
                      "(waiting 0.5 s, 1 s, 2 s, ... between them)."),
])
"""`watch`: --push, --app-name, --tag, --tenant, --push-timeout, --push-retries as `push`."""


@dataclass(frozen=True)
class TicketOptions:
    """What a run does with its outputs besides printing the verdict: the CI gate, the Markdown
    summary on stdout, the pprof file and the push to a profiling server."""

    fail_on: str | None = None  # a GATE_SEVERITIES value: exit 10 when the verdict reaches it
    print_format: str | None = None  # "md": the Markdown summary on stdout
    write_pprof: bool = False
    push: PushOptions = field(default_factory=PushOptions)

    def check(self, as_json: bool) -> None:
        """Usage errors said before any sampling."""
        if self.print_format and as_json:
            raise click.UsageError("--print md and --json both print on stdout: choose one")
        push = self.push
        if push.tags and not push.push_url:
            raise click.UsageError("--tag labels a --push: give --push URL too")
        if push.tenant is not None and not push.push_url:
            raise click.UsageError("--tenant names the tenant of a --push: give --push URL too")
        if push.push_url:
            from diagnose.publish.push import check_push_options

            try:
                check_push_options(push.push_url, push.app_name, push.tags)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None


def _ticket(fail_on: str | None = None, print_format: str | None = None,
            write_pprof: bool = False, **push: Any) -> TicketOptions:
    return TicketOptions(fail_on, print_format, write_pprof, PushOptions(**push))


FAIL_ON_HELP = ("CI gate: exit 10 when the verdict's severity reaches this level, after writing "
                "every output.")


def ticket_options(fail_on_help: str | None = FAIL_ON_HELP,
                   pprof_and_push: bool = True) -> Callable[[F], F]:
    """--fail-on (unless `fail_on_help` is None), --print, and with `pprof_and_push` --pprof,
    --push, --app-name, --tag, --tenant, as `ticket`."""
    options = [] if fail_on_help is None else [_fail_on_option(fail_on_help)]
    options.append(_print_option)
    if pprof_and_push:
        options += [_pprof_option, *_push_options(_TICKET_PUSH_HELP)]
    return option_group("ticket", _ticket, options)


# --- load generation ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadOptions:
    """The load generator of `sweep` and `experiment`."""

    tool: str = "auto"  # "auto", "wrk", "python"
    threads: int = 2  # wrk threads
    request_timeout: int = 10  # seconds before a request counts as a timeout error

    def generator(self, **requests: Any) -> Generator:
        """The generator these options make; `requests`: the model, arrivals, method, body,
        headers (loadtest.Generator's own defaults otherwise)."""
        from diagnose.load.loadtest import Generator

        return Generator(self.tool, self.threads, self.request_timeout, **requests)


def _load(tool: str, gen_threads: int, request_timeout: int) -> LoadOptions:
    return LoadOptions(tool, gen_threads, request_timeout)


load_options = option_group("load", _load, [
    click.option("--tool", type=click.Choice(["auto", "wrk", "python"]), default="auto",
                 show_default=True,
                 help="The load generator: wrk, or the built-in closed-loop Python client "
                      "(auto: wrk when it is on PATH)."),
    click.option("--threads", "gen_threads", type=click.IntRange(1, 64), default=2,
                 show_default=True, help="wrk threads (each can use one core)."),
    click.option("--request-timeout", type=click.IntRange(1, 600), default=10,
                 show_default=True, help="Seconds before a request counts as a timeout error."),
])
"""--tool, --threads, --request-timeout as `load`."""
