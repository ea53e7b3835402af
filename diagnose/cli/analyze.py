"""`diagnose analyze FILE`: diagnose a profile recorded elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

from diagnose.cli.common import EPILOG, Ticket, common_output, finish, run, ticket_options


@click.command(epilog=EPILOG)
@click.argument("profiles", metavar="FILE [FILE ...]", type=click.Path(path_type=Path), nargs=-1,
                required=True)
@click.option("--procfs", type=click.Path(dir_okay=False, path_type=Path),
              help="The .procfs.json written by `attach --keep-raw` for the same window.")
@click.option("--native-profile", type=click.Path(dir_okay=False, path_type=Path),
              help="The .native.speedscope.json written by `attach --keep-raw`: sparse native "
                   "samples that calibrate the thread states of a Python-only profile.")
@common_output
@ticket_options
def analyze(profiles, procfs, native_profile, output_dir, rules_file, as_json, open_browser,
            fail_on, print_format, write_pprof, push_url, app_name, tags, tenant):
    """Diagnose a profile recorded elsewhere (py-spy chrometrace, speedscope JSON or
    raw/collapsed). Several files are read as one service: the recordings `attach --keep-raw`
    keeps of a process tree, one per process."""
    from diagnose.report import pipeline

    ticket = Ticket(fail_on, print_format, write_pprof, push_url, app_name, tuple(tags), tenant)
    ticket.check(as_json)

    def action():
        user_rules = pipeline.load_user_rules(rules_file)
        outputs = pipeline.from_file(list(profiles), output_dir, user_rules, procfs,
                                     native_profile)
        return finish(outputs, as_json, open_browser, ticket=ticket)

    run(action)

