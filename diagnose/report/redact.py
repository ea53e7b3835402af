"""Removes secrets from command lines before they reach any output."""

from __future__ import annotations

import re

MASK = "***"
_SECRET_WORD = (r"(pass(word|wd)?|pwd|token|secret|api[-_]?key|apikey|access[-_]?key|private[-_]?key|auth|"
                r"credentials?|session[-_]?key|client[-_]?secret|dsn|key)")
# --password=x, --api-key=x, PASSWORD=x, token:x
_INLINE = re.compile(rf"^(?P<name>-{{0,2}}[\w.-]*{_SECRET_WORD}[\w.-]*)(?P<sep>[=:])(?P<value>.+)$", re.I)
# --password x (the value is the next argument)
_FLAG = re.compile(rf"^-{{1,2}}[\w.-]*{_SECRET_WORD}[\w.-]*$", re.I)
# scheme://user:password@host
_URL_CREDENTIALS = re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@]*):([^/\s@]+)@", re.I)
# Well-known token shapes, wherever they appear.
_TOKENS = re.compile(
    r"\b(sk|pk|rk)[-_](live|test|proj)?[-_]?[A-Za-z0-9]{8,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bxox[abpr]-[A-Za-z0-9-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|(?i:bearer\s+)[A-Za-z0-9._~+/-]{12,}=*")


def redact_text(text: str) -> str:
    text = _URL_CREDENTIALS.sub(rf"\1:{MASK}@", text)
    return _TOKENS.sub(MASK, text)


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        inline = _INLINE.match(arg)
        if inline and not _looks_like_path_or_flag_value(inline.group("name")):
            out.append(f"{inline.group('name')}{inline.group('sep')}{MASK}")
            continue
        if _FLAG.match(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def _looks_like_path_or_flag_value(name: str) -> bool:
    # "key" alone is a common word in paths (monkey.py); only treat NAME=value as a secret
    # when NAME itself is option- or variable-like.
    return "/" in name


def redact_cmdline(argv: list[str]) -> str:
    return " ".join(redact_argv(argv))
