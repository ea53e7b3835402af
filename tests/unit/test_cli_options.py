"""The command line's option groups: each command gets one frozen dataclass per group, built
from the options the group declares, and the shared options read the same in every command."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from diagnose.cli import main
from diagnose.cli.options import (LoadOptions, OutputOptions, ProbeOptions, SamplingOptions,
                                  TicketOptions, load_options, probe_options, quiet_option,
                                  report_output_options, sampling_options, ticket_options)


def _capture(*decorators):
    """A command with `decorators` whose callback returns what it was given."""
    seen = {}

    def callback(**values):
        seen.update(values)

    for decorate in reversed(decorators):
        callback = decorate(callback)
    return click.command()(callback), seen


def test_a_group_hands_the_command_one_frozen_dataclass():
    command, seen = _capture(sampling_options(), probe_options, quiet_option,
                             report_output_options, ticket_options(), load_options)
    result = CliRunner().invoke(command, [
        "-d", "3", "--no-native", "--keep-raw", "--no-kernel-waits", "-q", "-o", "out",
        "--json", "--fail-on", "warning", "--push", "http://p:4040", "--tag", "a=b",
        "--tool", "python", "--threads", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert set(seen) == {"sampling", "probes", "quiet", "outputs", "ticket", "load"}
    assert seen["sampling"] == SamplingOptions(3.0, None, "off", True)
    assert seen["probes"] == ProbeOptions(children=True, async_tasks=True, kernel_waits=False)
    assert seen["quiet"] is True
    assert seen["outputs"] == OutputOptions(Path("out"), None, True, False)
    ticket = seen["ticket"]
    assert (ticket.fail_on, ticket.push.push_url, ticket.push.tags) == (
        "warning", "http://p:4040", ("a=b",))
    assert seen["load"] == LoadOptions("python", 3, 10)
    for value in seen.values():
        if dataclasses.is_dataclass(value):
            with pytest.raises(dataclasses.FrozenInstanceError):
                value.x = 1  # type: ignore[attr-defined]


def test_the_defaults_of_a_group_are_its_dataclass_defaults(keep_raw_off):
    command, seen = _capture(sampling_options(), probe_options, report_output_options,
                             ticket_options(), load_options)
    assert CliRunner().invoke(command, []).exit_code == 0
    assert seen == {"sampling": SamplingOptions(), "probes": ProbeOptions(),
                    "outputs": OutputOptions(), "ticket": TicketOptions(), "load": LoadOptions()}


def test_keep_raw_is_on_where_the_environment_asks_for_it(monkeypatch):
    """DIAGNOSE_KEEP_RAW=1 (the test suite's setting, a CI job's): every attach keeps its
    recording without the flag; =0 keeps the default."""
    command, seen = _capture(sampling_options())
    for value, kept in (("1", True), ("0", False)):
        monkeypatch.setenv("DIAGNOSE_KEEP_RAW", value)
        assert CliRunner().invoke(command, []).exit_code == 0
        assert seen["sampling"].keep_raw is kept, value


def test_every_command_takes_a_handful_of_values():
    for name, command in main.commands.items():
        params = inspect.signature(command.callback).parameters
        assert len(params) <= 7, (name, list(params))


def _declaration(option: click.Option) -> tuple:
    return (tuple(option.opts), tuple(option.secondary_opts), option.type.to_info_dict(),
            option.is_flag, option.multiple)


def test_a_shared_option_is_declared_alike_in_every_command():
    """--output-dir, --json, --fail-on, --duration, --tag... take the same values whatever the
    command (their help says what each command does with them). `--rate` is two options: the
    samples per second of attach, the open model's rates of sweep."""
    declared: dict[str, dict[tuple, list[str]]] = {}
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.opts[0] != "--rate":
                declared.setdefault(param.opts[0], {}).setdefault(
                    repr(_declaration(param)), []).append(name)
    assert {opt: list(ways.values()) for opt, ways in declared.items() if len(ways) > 1} == {}
    shared = {opt for opt, ways in declared.items() if sum(map(len, ways.values())) > 1}
    assert {"--output-dir", "--json", "--fail-on", "--print", "--duration", "--push", "--tag",
            "--quiet", "--tool", "--warmup", "--diagnose-seconds"} <= shared
