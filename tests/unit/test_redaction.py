"""Secrets in command lines never reach an output."""

from diagnose.report.redact import redact_cmdline


def test_secret_flags_urls_and_tokens_are_masked():
    argv = ["python", "serve.py", "--api-key=sk-live-SECRET123", "--password", "hunter2",
            "--db", "postgres://admin:s3cret@localhost/db", "AWS_SECRET_ACCESS_KEY=abcd1234",
            "--header", "Authorization: Bearer abcdefghijklmnopqrst", "--model", "resnet.onnx"]
    out = redact_cmdline(argv)
    for secret in ("SECRET123", "hunter2", "s3cret", "abcd1234", "abcdefghijklmnopqrst"):
        assert secret not in out
    assert "postgres://admin:***@localhost/db" in out
    assert "--model resnet.onnx" in out  # ordinary arguments survive


def test_known_token_shapes_are_masked_anywhere():
    out = redact_cmdline(["run", "ghp_" + "a" * 30, "x=AKIA" + "B" * 16, "hf_" + "c" * 25])
    assert "ghp_" not in out and "AKIA" not in out and "hf_" not in out


def test_paths_containing_the_word_key_are_kept():
    assert redact_cmdline(["python", "/srv/monkey/keyboard.py"]) == "python /srv/monkey/keyboard.py"


SECRET_ARGV = ["--api-key", "sk-live-abcdef123456789", "--password=hunter2hunter2",
               "postgres://user:s3cr3tpass@db/x"]
ARGV_SECRETS = ("abcdef123456789", "hunter2hunter2", "s3cr3tpass")


def test_a_kept_command_line_masks_the_secrets_and_keeps_what_the_analysis_reads():
    from diagnose.collect.procfs import kept_argv
    from diagnose.collect.tree import HELPER_MARKERS

    server = ["gunicorn", "-w", "4", "-k", "uvicorn.workers.UvicornWorker", "--bind", "0.0.0.0:8000",
              "app:app", *SECRET_ARGV]
    kept = kept_argv(server)
    assert kept[:8] == server[:8]  # the program, its flags and values: worker counts, roles
    assert not any(s in " ".join(kept) for s in ARGV_SECRETS)
    assert kept_argv(kept) == kept  # a kept record read again is unchanged
    for marker in HELPER_MARKERS:
        helper = ["python", "-c", f"from {marker} import main;main(5)"]
        assert kept_argv(helper) == helper


def test_a_proc_record_read_from_a_file_holds_no_secret_nor_reports_one_of_a_child():
    import json

    from diagnose.collect.procfs import ProcRecord, TreeRecord
    from diagnose.model.children import child_processes

    record = ProcRecord(pid=100, cores=2, cpu_quota_cores=None, started_at=10.0)
    record.ended_at = 14.0
    record.process_cpu = [[5.0, 1.0, 2.0, 0.5], [6.0, 1.4, 4.0, 0.8]]
    older = TreeRecord(roots=[100], records={100: record}, parents={100: None},
                       cmdlines={100: ["python", "app.py", *SECRET_ARGV]})
    older.other_children = {5001: [100.0, None, None]}
    older.other_cmdlines = {5001: ["psql", "postgres://user:s3cr3tpass@db/x"]}
    older.server_cmdlines = {7: ["redis-server", "--requirepass", "hunter2hunter2"]}
    older.server_records = {7: ProcRecord(pid=7, cores=2, cpu_quota_cores=None, started_at=10.0)}
    # a /proc record kept before its command lines were redacted, replayed
    tree = TreeRecord.from_dict(json.loads(json.dumps(older.to_dict())))
    text = json.dumps(tree.to_dict())
    assert not any(s in text for s in ARGV_SECRETS)
    assert tree.cmdlines[100][:2] == ["python", "app.py"]
    children = child_processes(tree, 100)
    assert children is not None and children.commands == (("psql postgres://user:***@db/x", 1),)


def test_an_experiments_command_is_written_without_its_secrets():
    from diagnose.load.experiment_decision import Arm

    shown = Arm("baseline", ("python", "serve.py", *SECRET_ARGV)).describe().command
    assert shown.startswith("python serve.py --api-key")
    assert not any(s in shown for s in ARGV_SECRETS)
