"""Sends a report's pprof profile to a Grafana Pyroscope server's ingest API.

The request follows Pyroscope's documented ingest API ("Pyroscope server HTTP API", docs/sources/
configure-server/about-server-api.md in github.com/grafana/pyroscope) and its handler
(pkg/ingester/pyroscope/ingest_handler.go there): `POST /ingest` with the metadata as query
parameters (`name`, `from`, `until`, `format`, `sampleRate`, `spyName`) and, for
`format=pprof`, the profile itself as the raw request body (gzipped pprof is detected by its
magic bytes; a multipart form is read only when no `format` is given). `name` is
`app{label=value,...}`, parsed by api/model/labelset there: the app name allows
[A-Za-z0-9_./-], a label name [A-Za-z0-9_.], and a value ends at `,` or `}` with no escape,
so values are sanitised rather than escaped. Standard library only (urllib).
"""

from __future__ import annotations

import base64
import math
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from diagnose.errors import BadProfile, DiagnoseError, ExitCode

if TYPE_CHECKING:
    from diagnose.report.model import Report

APP_NAME_RE = re.compile(r"[A-Za-z0-9_./-]+")
LABEL_NAME_RE = re.compile(r"[A-Za-z0-9_.]+")
RESERVED_LABEL_NAMES = {"__name__"}  # the app name's own label in Pyroscope
MAX_LABEL_VALUE = 200
SPY_NAME = "pyspy"  # the samples come from py-spy; Pyroscope's Python spy has this name
# For a raw (non-multipart) pprof body; the same type Pyroscope's own RawProfile reports.
CONTENT_TYPE = "binary/octet-stream"
MAX_RETRY_AFTER_S = 30.0
# Pyroscope answers these when it is overloaded or restarting: worth another try.
RETRYABLE_STATUS = {429, 500, 502, 503, 504}


class PushFailed(DiagnoseError):
    """The profiling server refused the profile or never answered (exit 13); the local outputs
    were written before the push and are kept."""

    exit_code = ExitCode.PUSH_FAILED


@dataclass(frozen=True)
class PushTarget:
    """A validated `--push` URL: where to POST, how to show it (no credentials), and the
    Authorization header its user:password gave (Grafana Cloud uses basic auth)."""

    ingest: str
    shown: str
    authorization: str | None = None


@dataclass(frozen=True)
class PushResult:
    url: str  # the ingest URL, credentials removed
    status: int
    tries: int
    bytes_sent: int


def parse_push_url(base_url: str) -> PushTarget:
    """The server's base URL (http or https, optionally under a path prefix, or already ending
    in /ingest). ValueError with a one-line message for anything else: the CLI reports it as a
    usage error before any sampling."""
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        port = parts.port  # raises on a non-numeric port
    except ValueError as exc:
        raise ValueError(f"--push {base_url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--push {base_url!r}: give the Pyroscope server's http:// or https:// "
                         f"URL, e.g. http://localhost:4040")
    if parts.query or parts.fragment:
        raise ValueError(f"--push {base_url!r}: give the server's base URL without a query; "
                         f"the ingest parameters are added by diagnose")
    authorization = None
    if parts.username is not None:
        token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(token.encode()).decode("ascii")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{port}" if port is not None else "")
    path = parts.path.rstrip("/")
    if not path.endswith("/ingest"):
        path += "/ingest"
    ingest = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
    return PushTarget(ingest, ingest, authorization)


def validate_app_name(app_name: str) -> str:
    if not APP_NAME_RE.fullmatch(app_name or ""):
        raise ValueError(f"--app-name {app_name!r}: Pyroscope allows letters, digits and _ . - / "
                         f"only, and it cannot be empty")
    return app_name


def validate_label_name(name: str) -> str:
    if not LABEL_NAME_RE.fullmatch(name or "") or name in RESERVED_LABEL_NAMES:
        raise ValueError(f"tag name {name!r}: Pyroscope label names use letters, digits, _ and . "
                         f"only (and __name__ is reserved)")
    return name


def sanitise_label_value(value: object) -> str:
    """Pyroscope's label syntax has no escapes: a value ends at `,` or `}` and is trimmed, so
    those, the other braces, `=`, quotes and any space or control character become `_`."""
    text = re.sub(r"[,{}=\"'\s\x00-\x1f\x7f]", "_", str(value).strip())
    return text[:MAX_LABEL_VALUE]


def parse_tags(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`--tag K=V` options as a dict (a repeated K: the last wins). ValueError naming the bad
    one: no `=`, an invalid label name, or an empty value."""
    tags: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--tag {pair!r}: write it as NAME=VALUE")
        validate_label_name(name.strip())
        if not sanitise_label_value(value):
            raise ValueError(f"--tag {pair!r}: the value is empty")
        tags[name.strip()] = value
    return tags


def label_set(app_name: str, tags: Mapping[str, object]) -> str:
    """`app{k=v,...}`: names validated, values sanitised, sorted (as Pyroscope normalises
    them); a tag whose value is None or sanitises to nothing is left out."""
    validate_app_name(app_name)
    labels = []
    for name in sorted(tags):
        validate_label_name(name)
        value = tags[name]
        clean = sanitise_label_value(value) if value is not None else ""
        if clean:
            labels.append(f"{name}={clean}")
    return f"{app_name}{{{','.join(labels)}}}"


def time_span(start: float, end: float) -> tuple[int, int]:
    """Unix seconds that cover the window, `from` < `until` (Pyroscope's unit is a second)."""
    first = math.floor(start)
    last = max(math.ceil(end), first + 1)
    return first, last


def ingest_url(base_url: str, app_name: str, tags: dict[str, object], start: float, end: float,
               sample_rate: int | None = None) -> str:
    """The full `POST` URL: /ingest?name=app{tags}&from=&until=&format=pprof&spyName=pyspy
    [&sampleRate=]. (Pyroscope takes units and aggregation from a pprof body's sample types,
    and ignores `units`/`aggregationType` for it: they are not sent.)"""
    target = parse_push_url(base_url)
    first, last = time_span(start, end)
    params = {"name": label_set(app_name, tags), "from": str(first), "until": str(last),
              "format": "pprof", "spyName": SPY_NAME}
    if sample_rate:
        params["sampleRate"] = str(int(sample_rate))
    return f"{target.ingest}?{urllib.parse.urlencode(params)}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would turn a redirected POST into a GET without the body: fail instead."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def push_profile(base_url: str, pprof: bytes, app_name: str, tags: dict[str, object],
                 start: float, end: float, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep,
                 sample_rate: int | None = None, tenant: str | None = None) -> PushResult:
    """POSTs `pprof` (gzipped pprof bytes) to the server. Up to `retries` more tries after the
    first on a connection error, a timeout (`timeout` seconds per try), HTTP 429 or 5xx,
    waiting `backoff` x 2^n between them (or the server's Retry-After, up to 30 s); any other
    answer but 2xx fails at once. PushFailed: "could not push the profile to URL: reason after
    N tries" (callers append where the local report is kept)."""
    target = parse_push_url(base_url)
    url = ingest_url(base_url, app_name, tags, start, end, sample_rate)
    headers = {"Content-Type": CONTENT_TYPE, "User-Agent": "diagnose"}
    if target.authorization:
        headers["Authorization"] = target.authorization
    if tenant:  # a multi-tenant Pyroscope files the profile under this tenant
        headers["X-Scope-OrgID"] = tenant
    tries = 0
    while True:
        tries += 1
        request = urllib.request.Request(url, data=pprof, headers=headers, method="POST")
        wait = backoff * (2 ** (tries - 1))
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                response.read()
                return PushResult(target.shown, response.status, tries, len(pprof))
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code}{_said(exc)}"
            if 300 <= exc.code < 400:
                reason += f" (a redirect to {exc.headers.get('Location', '?')}: push to that URL)"
            retryable = exc.code in RETRYABLE_STATUS
            wait = max(wait, _retry_after(exc.headers.get("Retry-After")))
        except (TimeoutError, socket.timeout):
            reason, retryable = f"no answer within {timeout:g} s", True
        except urllib.error.URLError as exc:
            inner = exc.reason
            if isinstance(inner, (TimeoutError, socket.timeout)):
                reason = f"no answer within {timeout:g} s"
            else:
                reason = getattr(inner, "strerror", None) or str(inner)
            retryable = True
        except (ConnectionError, OSError) as exc:  # reset mid-answer, and the like
            reason, retryable = exc.strerror or type(exc).__name__, True
        if not retryable or tries > retries:
            raise PushFailed(f"could not push the profile to {target.shown}: {reason} after "
                             f"{tries} tr{'y' if tries == 1 else 'ies'}")
        sleep(wait)


def _said(exc: urllib.error.HTTPError) -> str:
    """The first line of the server's answer, short: Pyroscope says what it rejected."""
    try:
        body = exc.read(500).decode("utf-8", "replace")
    except Exception:
        return ""
    line = " ".join(body.split())[:200]
    return f" ({line})" if line else ""


def _retry_after(value: str | None) -> float:
    if value is None:
        return 0.0
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(value)))
    except (TypeError, ValueError):
        return 0.0


def default_tags(report: Report, service: str | None = None, host: str | None = None) -> dict:
    """verdict=<primary>, service and host (this machine's name unless given): the labels that
    let a fleet's windows be told apart and filtered in Pyroscope. Never the pid: Pyroscope keeps
    one series per distinct label set, and every restart of every worker would open a new one
    (the samples carry pid and tid as numeric labels, which its ingest drops)."""
    return {"verdict": report.verdict.primary, "service": service, "host": host or socket.gethostname()}


def check_push_options(push_url: str | None, app_name: str,
                       tag_pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`--push`, `--app-name` and `--tag` checked before any sampling: the parsed tags, or
    ValueError with the one-line message the CLI turns into a usage error."""
    tags = parse_tags(tag_pairs)
    label_set(app_name, tags)
    if push_url:
        parse_push_url(push_url)
    return tags


def push_report(report: Report, base_url: str, app_name: str, tags: Mapping[str, object] | None,
                start: float | None, end: float | None, kept: list | tuple = (),
                service: str | None = None, timeout: float = 10.0, retries: int = 3,
                backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep,
                tenant: str | None = None) -> PushResult:
    """The one call for `attach`/`analyze --push` and `watch`, made after the outputs are
    written: builds the report's pprof (diagnose.export.pprof.pprof_bytes), labels it with
    `default_tags(report, service or app_name)` overridden by `tags` (the validated `--tag`s),
    and pushes it for the window [`start`, `end`] in unix seconds (None: the report's own
    window, `sampling.started_at` + its duration; without a start, as ending now: a recorded
    file's own time is unknown).
    `tenant`: sent as X-Scope-OrgID (a multi-tenant Pyroscope).
    `kept`: the local output paths, named in the PushFailed message ("...; the local report is
    kept at A, B")."""
    from diagnose.export.pprof import pprof_bytes  # built by the export module; loaded on use

    suffix = f"; the local report is kept at {', '.join(map(str, kept))}" if kept else ""
    try:
        body = pprof_bytes(report, for_push=True)
    except BadProfile as exc:
        raise PushFailed(f"could not build the pprof profile to push: {exc.message}{suffix}") from None
    if start is None or end is None:
        duration = float(report.sampling.duration_s or 1.0)
        began = report.sampling.started_at  # a live capture's window start
        if began is not None and began > 0:
            start, end = float(began), float(began) + duration
        else:  # a recorded file's own time is unknown: the window as ending now
            end = time.time()
            start = end - duration
    labels = {**default_tags(report, service or app_name), **(tags or {})}
    rate = report.sampling.rate_hz
    try:
        return push_profile(base_url, body, app_name, labels, start, end, timeout=timeout,
                            retries=retries, backoff=backoff, sleep=sleep,
                            sample_rate=int(rate) if rate else None, tenant=tenant)
    except PushFailed as exc:
        raise PushFailed(exc.message + suffix) from None
