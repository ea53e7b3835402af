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
