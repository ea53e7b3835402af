"""`diagnose demo`: start the bundled demo service, diagnose it, stop it."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import click

from diagnose.cli.attach import AttachArgs, attach_and_report
from diagnose.cli.common import EPILOG, log, run
from diagnose.cli.options import (OutputOptions, SamplingOptions, report_output_options,
                                  sampling_options)
from diagnose.errors import DiagnoseError

# The line the demo service prints once it serves: the fixture programs' one format.
_READY = re.compile(r"READY pid=(\d+)")


@click.command(epilog=EPILOG)
@sampling_options(duration_help="Seconds to sample the demo.", duration_only=True)
@report_output_options
def demo(sampling: SamplingOptions, outputs: OutputOptions) -> None:
    """Start the bundled demo inference service, diagnose it, and stop it."""

    def action() -> int:
        seconds = str(int(sampling.duration) + 30)
        service = subprocess.Popen(
            [sys.executable, "-m", "diagnose.demo.inference_service", "--seconds", seconds],
            stdout=subprocess.PIPE, text=True)
        try:
            ready = _wait_ready(service, timeout=60)
            log(f"Demo service running as pid {ready}")
            return attach_and_report(AttachArgs((ready,), sampling, outputs))
        finally:
            service.terminate()
            try:
                service.wait(timeout=10)
            except subprocess.TimeoutExpired:
                service.kill()

    run(action)


def _wait_ready(service: subprocess.Popen, timeout: float) -> int:
    assert service.stdout is not None  # started with stdout=PIPE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = service.stdout.readline()
        if not line:
            break
        ready = _READY.fullmatch(line.strip())
        if ready:
            return int(ready.group(1))
    raise DiagnoseError("the demo service did not start")

