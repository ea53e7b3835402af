"""`diagnose sweep` / `diagnose experiment` refuse what they cannot load before any load starts:
a URL off the loopback (exit 2), one that does not answer (exit 12), a pid that does not exist
(exit 3), a change that is missing (exit 2). No server and no generator is started here."""

from __future__ import annotations

import socket

from tests.conftest import invoke_cli


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


def test_sweep_refuses_a_url_off_the_loopback(out_dir):
    proc, _ = invoke_cli("sweep", "http://example.com/predict", "-o", out_dir, timeout=30)
    assert proc.returncode == 2
    assert "only 127.0.0.1 / localhost may be loaded" in proc.stderr
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_sweep_of_a_url_nothing_answers_is_exit_12_with_no_report(out_dir):
    port = closed_port()
    proc, _ = invoke_cli("sweep", f"http://127.0.0.1:{port}/predict", "-o", out_dir, timeout=30)
    assert proc.returncode == 12
    assert f"http://127.0.0.1:{port}/predict does not answer" in proc.stderr
    assert not out_dir.exists() or not list(out_dir.glob("*sweep-*"))


def test_sweep_with_a_pid_that_does_not_exist_is_exit_3(out_dir):
    proc, _ = invoke_cli("sweep", "http://127.0.0.1:1/", "--pid", "4194303", "-o", out_dir,
                      timeout=30)
    assert proc.returncode == 3
    assert "no process with pid 4194303" in proc.stderr


def test_sweep_levels_must_be_increasing_numbers(out_dir):
    for option, levels in (("--concurrency", "4,2"), ("--concurrency", "1,x"),
                           ("--concurrency", "1.5,2"), ("--rate", "20,10"), ("--rate", "0,5")):
        proc, _ = invoke_cli("sweep", "http://127.0.0.1:1/", option, levels, "-o",
                          out_dir, timeout=30)
        assert proc.returncode == 2, levels
        assert "Error:" in proc.stderr and "Traceback" not in proc.stderr


def test_sweep_takes_one_load_model_and_well_formed_requests(out_dir, tmp_path):
    cases = [
        (["--concurrency", "1,2", "--rate", "10,20"], "not both"),
        (["--header", "no-colon-here"], "NAME:VALUE"),
        (["--body", str(tmp_path / "missing.bin")], "--body"),
    ]
    for args, message in cases:
        proc, _ = invoke_cli("sweep", "http://127.0.0.1:1/", *args, "-o", out_dir, timeout=30)
        assert proc.returncode == 2, args
        assert message in proc.stderr, proc.stderr
    proc, _ = invoke_cli("sweep", "http://127.0.0.1:1/", "--rate", "10", "--tool", "wrk",
                      "-o", out_dir, timeout=30)
    assert proc.returncode == 12 and "open model" in proc.stderr


def test_experiment_needs_a_change_to_compare(out_dir):
    proc, _ = invoke_cli("experiment", "http://127.0.0.1:1/", "--start", "true", "-o", out_dir,
                      timeout=30)
    assert proc.returncode == 2
    assert "nothing to compare" in proc.stderr
    proc, _ = invoke_cli("experiment", "http://127.0.0.1:1/", "--start", "true", "--set", "NOPE",
                      "-o", out_dir, timeout=30)
    assert proc.returncode == 2 and "NAME=VALUE" in proc.stderr


def test_experiment_whose_service_exits_before_answering_is_exit_12(out_dir):
    port = closed_port()
    proc, _ = invoke_cli("experiment", f"http://127.0.0.1:{port}/", "--start", "false",
                      "--set", "A=1", "--rounds", "1", "-o", out_dir, timeout=60)
    assert proc.returncode == 12
    assert "the service exited with 1 before" in proc.stderr
