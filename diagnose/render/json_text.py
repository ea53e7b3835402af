"""The JSON report's text: `json.dumps(report, indent=2, ensure_ascii=False)`, written by orjson.

The standard library's encoder falls back to pure Python when it indents, which costs seconds on
a report with many distinct stacks; orjson writes the same document (two-space indentation, UTF-8
text, numpy scalars as numbers) in C. A value orjson cannot write (an integer beyond 64 bits)
takes the standard path."""

from __future__ import annotations

import json

import orjson

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def report_text(report: dict) -> str:
    try:
        return orjson.dumps(report, option=_OPTIONS).decode("utf-8") + "\n"
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def compact_text(data) -> str:
    """`json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`, in C."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
