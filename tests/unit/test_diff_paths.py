"""`diagnose diff` across release directories and environments: frames matched by function and
by file relative to the package root or to the release directory (the longest common path
suffix), so that the same code at another prefix is the same code; reports with no code in
common are still different programs (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from diagnose.compare import paths
from diagnose.compare.report_diff import DifferentPrograms
from diagnose.compare.model import Diff, PathRoot
from diagnose.compare.paths import library_key, parts
from diagnose.report.model import Report, StackFrame
from diagnose.errors import ExitCode
from diagnose.render.diff_html import render_diff_html
from tests.conftest import invoke_cli
from tests.unit.test_diff import diff_reports, report


def fixed(app_file: str) -> Report:
    return report(0.0, 0, app_file=app_file)


def contended(app_file: str) -> Report:
    return report(0.75, 100, app_file=app_file)


def with_frames(r: Report, change) -> Report:
    """`r` with each of its stack frames replaced by change(index, frame)."""
    frames = tuple(change(i, f) for i, f in enumerate(r.stacks.frames))
    return replace(r, stacks=replace(r.stacks, frames=frames))


def assert_fix_seen(diff: Diff) -> None:
    assert diff.primary.before.severity == "critical"
    assert diff.primary.after.severity == "ok"
    [site] = diff.waits
    assert site.change == "disappeared"
    assert all(node.before > 0 for node in diff.flame.nodes)  # every frame matched
    assert diff.flame.vanished == ()


def test_a_release_directory_per_version_is_the_same_program():
    diff = diff_reports(contended("/srv/app-1.2.3/model_service.py"),
                        fixed("/srv/app-1.2.4/model_service.py"))
    assert_fix_seen(diff)
    paths = diff.paths
    assert not paths.same_paths
    assert paths.roots == (PathRoot(before="/srv/app-1.2.3", after="/srv/app-1.2.4", files=1,
                                    functions=3),)
    assert "/srv/app-1.2.3 ↔ /srv/app-1.2.4" in paths.note


def test_an_app_directory_against_a_release_directory_is_the_same_program():
    diff = diff_reports(contended("/home/ci/app/model_service.py"),
                        fixed("/home/ci/release-2/model_service.py"))
    assert_fix_seen(diff)
    [root] = diff.paths.roots
    assert (root.before, root.after) == ("/home/ci/app", "/home/ci/release-2")


def test_the_same_package_in_two_virtualenvs_is_the_same_code():
    # the interpreters differ too: threading.py of each
    before = with_frames(
        contended("/home/a/venv-old/lib/python3.11/site-packages/mysvc/service.py"),
        lambda i, f: replace(f, file="/usr/lib/python3.11/threading.py") if i == 0 else f)
    after = with_frames(
        fixed("/opt/venv-new/lib/python3.12/site-packages/mysvc/service.py"),
        lambda i, f: replace(f, file="/usr/local/lib/python3.12/threading.py") if i == 0 else f)
    diff = diff_reports(before, after)
    assert_fix_seen(diff)
    assert diff.paths.same_paths and diff.paths.note is None  # keyed on package root
    files = {n.file for n in diff.flame.nodes}
    assert files == {"site-packages/mysvc/service.py", "lib/python/threading.py"}


def test_windows_release_directories_match():
    diff = diff_reports(contended("C:\\srv\\app-1.2.3\\model_service.py"),
                        fixed("C:\\srv\\app-1.2.4\\model_service.py"))
    assert_fix_seen(diff)
    [root] = diff.paths.roots
    assert (root.before, root.after) == ("C:\\srv\\app-1.2.3", "C:\\srv\\app-1.2.4")


def test_a_relative_path_matches_its_absolute_deployment():
    diff = diff_reports(contended("model_service.py"), fixed("/srv/app/model_service.py"))
    assert_fix_seen(diff)
    [root] = diff.paths.roots
    assert (root.before, root.after) == ("(relative path)", "/srv/app")


def test_identical_paths_need_no_note():
    diff = diff_reports(contended("/srv/app/service.py"), fixed("/srv/app/service.py"))
    assert (diff.paths.same_paths, diff.paths.roots, diff.paths.note) == (True, (), None)
    assert 'id="path-matching"' not in render_diff_html(diff)


def test_several_files_under_one_release_map_with_their_subdirectories():
    frames_b = [StackFrame("serve", "/srv/app-1.2.3/app/main.py"),
                StackFrame("predict", "/srv/app-1.2.3/app/model/core.py"),
                StackFrame("helper", "/srv/app-1.2.3/app/util.py")]
    frames_a = [replace(f, file=f.file.replace("1.2.3", "1.2.4"))
                for f in frames_b] + [StackFrame("new", "/srv/app-1.2.4/app/new.py")]
    match = paths.match_files(frames_b, frames_a)
    [root] = match.roots
    assert root.files == 3 and root.before_text == "/srv/app-1.2.3"
    for fb, fa in zip(frames_b, frames_a):
        assert match.key(0, fb.file) == match.key(1, fa.file)
    assert match.key(0, frames_b[1].file) == "app/model/core.py"
    assert match.key(1, "/srv/app-1.2.4/app/new.py") == "app/new.py"


def test_library_keys():
    assert library_key(parts("/v/lib/python3.11/site-packages/numpy/core.py")) == \
        "site-packages/numpy/core.py"
    assert library_key(parts("/usr/lib/python3/dist-packages/numpy/core.py")) == \
        "site-packages/numpy/core.py"
    assert library_key(parts("/usr/lib64/python3.13t/threading.py")) == "lib/python/threading.py"
    assert library_key(parts("C:\\Python311\\Lib\\threading.py")) == "lib/python/threading.py"
    assert library_key(parts("/srv/app/lib/helpers.py")) is None


def test_two_different_programs_still_exit_2():
    other = with_frames(
        report(0.7, 100, app_file="/srv/app-1.2.4/worker.py", functions=("run_job",)),
        lambda i, f: replace(f, function="Worker." + f.function) if i >= 1 else f)
    with pytest.raises(DifferentPrograms) as caught:
        diff_reports(contended("/srv/app-1.2.3/model_service.py"), other)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "different programs" in caught.value.message


def test_two_scripts_sharing_only_a_file_name_and_module_level_code_are_different_programs():
    def script(path: str, function: str) -> Report:
        names = {1: "<module>", 2: function, 3: function + "_inner"}
        r = with_frames(report(0.5, 70, app_file=path),
                        lambda i, f: replace(f, function=names.get(i, f.function)))
        return replace(r, waits=(replace(r.waits[0], function=function), *r.waits[1:]))

    with pytest.raises(DifferentPrograms):
        diff_reports(script("/home/a/proj1/main.py", "train"),
                     script("/home/b/proj2/main.py", "serve"))


def test_the_page_and_the_cli_say_how_the_paths_were_matched(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(contended("/srv/app-1.2.3/model_service.py").to_json()),
                      encoding="utf-8")
    after.write_text(json.dumps(fixed("/srv/app-1.2.4/model_service.py").to_json()),
                     encoding="utf-8")
    proc, _ = invoke_cli("diff", before, after, "-o", tmp_path / "out", check_json=False,
                         timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Diff: primary: lock_contention critical → ok")
    assert "Paths: the two reports ran the same code from different directories" in proc.stdout
    [page] = (tmp_path / "out").glob("diagnose-diff-*.html")
    shown = page.read_text(encoding="utf-8").split('<script type="application/json"')[0]
    assert 'id="path-matching"' in shown
    assert "<code>/srv/app-1.2.3</code>" in shown and "<code>/srv/app-1.2.4</code>" in shown
