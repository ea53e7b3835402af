"""A user's --rules file is validated strictly: every mistake is exit 2 naming its line."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.classify import rules_file
from diagnose.checks.engine import load_check_settings
from diagnose.checks.registry import SPECS
from diagnose.classify.categories import Categorizer
from diagnose.classify.rules_file import BadRules, builtin_rules_text
from diagnose.errors import ExitCode


def _load(tmp_path, text: str | bytes):
    path = tmp_path / "rules.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return rules_file.load(path)


# (rules text, the line the message must name, fragments it must contain)
MALFORMED = {
    "unknown table": ("# my rules\n[categories]\nname = 'model'\n", 2,
                      ["unknown table [categories]", "did you mean 'category'"]),
    "key outside any table": ("low = 0.2\n", 1, ["unknown key 'low' outside any table"]),
    "misspelled check id": (("[checks.lock_contention]\nlow = 0.1\n\n[checks.lock_contenton]\n"
                             "high = 0.3\n"), 4,
                            ["unknown check id 'lock_contenton'", "did you mean 'lock_contention'"]),
    "check id in an inline table": ("[checks]\npool_wait = { low = 0.1 }\nbogus_check = { low = 1 }\n",
                                    3, ["unknown check id 'bogus_check'"]),
    "misspelled key": ("[checks.lock_contention]\nlow = 0.1\nhigth = 0.5\n", 3,
                       ["unknown key 'higth' for check 'lock_contention'", "did you mean 'high'"]),
    "dotted key": ("checks.gil_contention.lowest = 0.1\n", 1, ["unknown key 'lowest'"]),
    "number as a string": ('[checks.lock_contention]\ntitle = "x"\nlow = "0.1"\n', 3,
                           ["checks.lock_contention.low must be a number, not string ('0.1')"]),
    "boolean for a number": ("[checks.pool_wait]\nhigh = true\n", 2,
                             ["checks.pool_wait.high must be a number, not boolean"]),
    "not a finite number": ("[checks.pool_wait]\nlow = 0.1\nhigh = inf\n", 3,
                            ["checks.pool_wait.high must be a finite number"]),
    "advice of numbers": ("[checks.underloaded]\nadvice = [\n  1,\n  2,\n]\n", 2,
                          ["checks.underloaded.advice must be a list of strings"]),
    "check settings not a table": ("[checks]\nlock_contention = 0.3\n", 2,
                                   ["checks.lock_contention must be a table"]),
    "unknown category": ('[[category]]\nname = "modle"\npatterns = [{ function = "x" }]\n', 2,
                         ["unknown category 'modle'", "did you mean 'model'"]),
    "category without a name": ('[[category]]\npatterns = [{ function = "x" }]\n', 1,
                                ["[[category]] entry 1 has no 'name'"]),
    "unknown category key": ('[[category]]\nname = "io"\npattern = [{ function = "x" }]\n', 3,
                             ["unknown key 'pattern' in [[category]] entry 1",
                              "did you mean 'patterns'"]),
    "unknown pattern key": (('[[category]]\nname = "io"\npatterns = [\n  { function = "a" },\n'
                             '  { fle = "b" },\n]\n'), 5,
                            ["unknown key 'fle' in pattern 2 of 'io'", "did you mean 'file'"]),
    "pattern of the wrong type": ('[[category]]\nname = "io"\npatterns = ["recv"]\n', 3,
                                  ["pattern 1 of 'io' must be a table"]),
    "pattern without function or file": ('[[category]]\nname = "io"\npatterns = [{ generic = true }]\n',
                                         3, ["pattern 1 of 'io' needs 'function' or 'file'"]),
    "generic not a boolean": ('[[category]]\nname = "model"\npatterns = [{ file = "/m/", generic = "yes" }]\n',
                              3, ["'generic' of pattern 1 of 'model' must be a boolean"]),
    "bad regex in the second entry": (('[[category]]\nname = "io"\npatterns = [{ function = "ok" }]\n\n'
                                       '[[category]]\nname = "model"\npatterns = [\n'
                                       '  { function = "fine" },\n  { function = "(unclosed" },\n]\n'),
                                      9, ["invalid regular expression '(unclosed'",
                                          "'function' of a 'model' pattern"]),
    "bad regex in a literal string": (("[[category]]\nname = 'preprocess'\npatterns = [\n"
                                       "  { file = 'ok' },\n  { file = '[a-' },\n]\n"), 5,
                                      ["invalid regular expression '[a-'"]),
    "non-UTF-8": (b"[checks.lock_contention]\ntitle = 'caf\xe9'\n", 2, ["not UTF-8 text"]),
    "not TOML": ("[checks.lock_contention\nlow = 1\n", 1, ["not valid TOML", "line 1"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_rules_exit_2_naming_the_line(tmp_path, case):
    text, line, fragments = MALFORMED[case]
    with pytest.raises(BadRules) as info:
        _load(tmp_path, text)
    message = info.value.message
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in message
    assert f"line {line}" in message, message
    assert message.startswith(str(tmp_path / "rules.toml"))
    for fragment in fragments:
        assert fragment in message, message


def test_valid_rules_load_and_take_effect(tmp_path):
    rules = _load(tmp_path, "# thresholds\n"
                            "[checks.lock_contention]\nlow = 0.02\nhigh = 0.3\n"
                            "advice = ['one']\n\n"
                            "[checks]\npool_wait.low = 1  # an int where the shipped value is a float\n\n"
                            "[[category]]\nname = 'model'\ndescription = 'our model'\nphase = true\n"
                            "patterns = [{ function = '^MyNet\\.forward$' }, { file = '/ourlib/', generic = true }]\n")
    settings = load_check_settings(rules)
    assert settings["lock_contention"].low == 0.02
    assert settings["lock_contention"].advice == ("one",)
    assert settings["pool_wait"].low == 1
    assert settings["lock_contention"].what  # unset keys keep the shipped values
    assert Categorizer(rules).patterns[0].category == "model"


def test_without_rules_each_check_has_its_declared_settings():
    """The defaults are the Settings classes' (the shipped rules/checks.toml lists them); a user's
    rules change only the keys they name, the title and advice too."""
    assert load_check_settings() == {spec.id: spec.defaults for spec in SPECS}
    settings = load_check_settings({"checks": {"pool_wait": {"title": "ours", "advice": ["a", "b"]}}})
    pool_wait = next(spec for spec in SPECS if spec.id == "pool_wait")
    assert settings["pool_wait"] == dataclasses.replace(pool_wait.defaults, title="ours", advice=("a", "b"))


@pytest.mark.parametrize("name", ["checks.toml", "categories.toml"])
def test_the_shipped_rules_files_are_valid_user_rules(tmp_path, name):
    """Copying a shipped file as a starting point must work: it is the reference."""
    assert _load(tmp_path, builtin_rules_text(name))


def test_empty_rules_file_is_valid(tmp_path):
    assert _load(tmp_path, "# nothing yet\n") == {}


@pytest.mark.parametrize("rules, fragment", [
    ({"checks": {"nope": {"low": 1}}}, "unknown check id 'nope'"),
    ({"checks": {"pool_wait": {"low": "x"}}}, "must be a number"),
    ({"category": [{"name": "io", "patterns": [{"file": "("}]}]}, "invalid regular expression"),
    ({"extra": {}}, "unknown table [extra]"),
])
def test_rules_given_as_data_are_validated_too(rules, fragment):
    """Callers that pass rules as a dict (no file, so no line) get the same checks."""
    check = load_check_settings if "checks" in rules else Categorizer
    with pytest.raises(BadRules, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        check(rules)


def test_unreadable_rules_paths(tmp_path):
    with pytest.raises(BadRules, match="no such file \\(expected a rules file\\)"):
        rules_file.load(tmp_path / "absent.toml")
    with pytest.raises(BadRules, match="is a directory"):
        rules_file.load(tmp_path)
    with pytest.raises(BadRules, match="not a regular file"):
        rules_file.load("/dev/zero")  # a device is never read (it would never end)


def test_locator_finds_keys_in_every_toml_spelling():
    text = ("# comment with [checks.fake] and low = 1\n"
            "[checks]\n"
            "'quoted-id'.low = 1\n"
            "\n"
            "[checks.\"lock_contention\"]  # a quoted header\n"
            "low = 0.1\n"
            "high = 0.2\n"
            "[[category]]\n"
            "name = 'io'\n"
            "[[category]]\n"
            "name = 'model'\n"
            "patterns = [ { function = 'a' },\n"
            "             { function = 'b(' } ]\n")
    locate = rules_file.Locator(text).line_of
    assert locate(("checks", "quoted-id", "low")) == 3
    assert locate(("checks", "lock_contention")) == 5
    assert locate(("checks", "lock_contention", "high")) == 7
    assert locate(("category", 1, "name")) == 11
    assert locate(("category", 1, "patterns", 1, "function"), "b(") == 13
    assert locate(("nothing", "here")) is None
