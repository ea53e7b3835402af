"""A local stand-in for Grafana Pyroscope's ingest endpoint that checks every request against
the documented API, for the `--push` and `watch` tests (no real Pyroscope can be installed on
the test machines).

What it checks, and where that is documented (github.com/grafana/pyroscope):
* `POST /ingest` only; metadata in the query string: `name` (required), `from`, `until`
  (unix seconds), `format`, `sampleRate`, `spyName`, `units`, `aggregationType`
  (docs/sources/configure-server/about-server-api.md); any other parameter is a problem here,
  so a misspelt one cannot pass silently.
* `name` = `app{label=value,...}` as api/model/labelset parses it: app name of
  [A-Za-z0-9_./-], label names of [A-Za-z0-9_.], not `__name__`, a value ending at `,` or `}`
  (so it may not contain them, nor `{`), each label once.
* `format=pprof`: the handler (pkg/ingester/pyroscope/ingest_handler.go) then reads the raw
  body as the profile; a multipart form, or a `+trie`/`+tree` content type (which that handler
  tests before `format`), would be misread, so the content type must be a plain octet-stream.
* The body: gzip (pkg/og/convert/pprof/decoder.go detects the 1f 8b magic) of a pprof
  `Profile` that decodes with diagnose/export/profile_pb2.py and is internally consistent.
* Series: Pyroscope's distributor (extractSampleSeries, pkg/distributor) turns the `name`
  labels and every *string* label of a sample into series labels (numeric sample labels are
  dropped at ingest), and keeps one series per distinct label set. A label per process or per
  thread (pid, tid, a thread name) among them opens a series per worker and per restart: a
  problem here (`series` lists the label sets a request makes).
* `X-Scope-OrgID`: the tenant of a multi-tenant Pyroscope (`tenant`).

It answers 200 with an empty body to a valid request and 400 with the problems to an invalid
one (as Pyroscope answers a bad parameter), records every request, and can be told to fail
the next N requests with a status, or to hang on them.
"""

from __future__ import annotations

import gzip
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOCUMENTED_PARAMS = {"name", "from", "until", "format", "sampleRate", "spyName", "units",
                     "aggregationType"}
APP_NAME_RE = re.compile(r"[A-Za-z0-9_./-]+")
LABEL_NAME_RE = re.compile(r"[A-Za-z0-9_.]+")
RAW_CONTENT_TYPES = {"binary/octet-stream", "application/octet-stream"}
PER_INSTANCE_LABELS = {"pid", "tid", "thread"}  # one series per process / thread


@dataclass
class IngestRequest:
    method: str
    path: str
    params: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    status: int = 0  # what the server answered
    problems: list[str] = field(default_factory=list)
    app_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    start: int | None = None
    end: int | None = None
    profile: object | None = None  # the decoded perftools.profiles.Profile

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def tenant(self) -> str | None:
        return self.headers.get("x-scope-orgid")

    @property
    def series(self) -> set[frozenset[tuple[str, str]]]:
        """The distinct label sets the request makes: the name's labels and each sample's
        string labels (its numeric labels are dropped, as Pyroscope's ingest drops them)."""
        if self.profile is None:
            return set()
        strings = self.profile.string_table
        out = set()
        for sample in self.profile.sample:
            labels = dict(self.labels)
            labels.update({strings[label.key]: strings[label.str]
                           for label in sample.label if label.str})
            out.add(frozenset(labels.items()))
        return out

    def sample_total(self, sample_type: str | None = None, unit: str | None = None) -> int:
        """The sum over samples of the value of the first sample type matching `sample_type`
        and/or `unit` (the first sample type when neither is given)."""
        strings = self.profile.string_table
        for index, kind in enumerate(self.profile.sample_type):
            if ((sample_type is None or strings[kind.type] == sample_type)
                    and (unit is None or strings[kind.unit] == unit)):
                return sum(sample.value[index] for sample in self.profile.sample)
        raise AssertionError(f"no sample type {sample_type!r} / unit {unit!r}")


def parse_name(name: str) -> tuple[str, dict[str, str], list[str]]:
    """(app name, labels, problems) for `app{k=v,...}` under Pyroscope's label-set rules."""
    problems: list[str] = []
    app, brace, rest = name.partition("{")
    if not APP_NAME_RE.fullmatch(app):
        problems.append(f"name: invalid app name {app!r}")
    labels: dict[str, str] = {}
    if not brace:
        return app, labels, problems
    if not rest.endswith("}"):
        problems.append(f"name: label set does not end with '}}': {name!r}")
        return app, labels, problems
    body = rest[:-1]
    if "{" in body or "}" in body:
        problems.append(f"name: a brace inside the label set: {name!r}")
    for pair in filter(None, body.split(",")):
        key, eq, value = pair.partition("=")
        if not eq:
            problems.append(f"name: label {pair!r} has no '='")
            continue
        if not LABEL_NAME_RE.fullmatch(key) or key == "__name__":
            problems.append(f"name: invalid label name {key!r}")
        if value != value.strip() or not value:
            problems.append(f"name: label {key!r} has an empty or padded value {value!r}")
        if key in labels:
            problems.append(f"name: label {key!r} given twice")
        labels[key] = value
    return app, labels, problems


def _unix_seconds(params: dict[str, list[str]], key: str, problems: list[str]) -> int | None:
    values = params.get(key) or []
    if len(values) != 1 or not values[0].isdigit():
        problems.append(f"{key}: expected one unix time in seconds, got {values!r}")
        return None
    value = int(values[0])
    if not 1_000_000_000 <= value <= time.time() + 86400:  # seconds, not ms, and not the future
        problems.append(f"{key}: {value} is not a plausible unix time in seconds")
    return value


def decode_pprof(body: bytes, problems: list[str]):
    """The Profile in a gzipped pprof body, checked for the references pprof requires."""
    from diagnose.export import profile_pb2

    if body[:2] != b"\x1f\x8b":
        problems.append("body: not gzip (pprof bodies are gzipped)")
        return None
    try:
        raw = gzip.decompress(body)
        profile = profile_pb2.Profile.FromString(raw)
    except Exception as exc:  # a bad body is a finding here, whatever broke
        problems.append(f"body: does not decode as a gzipped pprof Profile: {exc}")
        return None
    strings = len(profile.string_table)
    if not strings or profile.string_table[0] != "":
        problems.append("body: string_table[0] must be the empty string")
    if not profile.sample_type:
        problems.append("body: no sample_type")
    if not profile.sample:
        problems.append("body: no samples")
    locations = {loc.id for loc in profile.location}
    functions = {fn.id for fn in profile.function}
    for fn in profile.function:
        if not 0 <= fn.name < strings or not 0 <= fn.filename < strings:
            problems.append(f"body: function {fn.id} names a string out of range")
    for loc in profile.location:
        for line in loc.line:
            if line.function_id not in functions:
                problems.append(f"body: location {loc.id} names a missing function")
    for sample in profile.sample:
        if len(sample.value) != len(profile.sample_type):
            problems.append("body: a sample's values do not match the sample types")
            break
        if any(loc not in locations for loc in sample.location_id):
            problems.append("body: a sample names a missing location")
            break
    return profile


def validate(request: IngestRequest) -> None:
    """Fills in `request.problems` and the parsed name, labels, times and profile."""
    problems = request.problems
    if request.method != "POST":
        problems.append(f"method {request.method}: the ingest API takes POST")
    if request.path != "/ingest":
        problems.append(f"path {request.path!r}: the ingest API is at /ingest")
    params = request.params
    unknown = set(params) - DOCUMENTED_PARAMS
    if unknown:
        problems.append(f"undocumented query parameters: {sorted(unknown)}")
    names = params.get("name") or []
    if len(names) != 1:
        problems.append(f"name: required once, got {names!r}")
    else:
        request.app_name, request.labels, name_problems = parse_name(names[0])
        problems.extend(name_problems)
    request.start = _unix_seconds(params, "from", problems)
    request.end = _unix_seconds(params, "until", problems)
    if request.start is not None and request.end is not None and request.start >= request.end:
        problems.append(f"from {request.start} is not before until {request.end}")
    if params.get("format") != ["pprof"]:
        problems.append(f"format: expected pprof, got {params.get('format')!r}")
    for key in ("sampleRate",):
        if key in params and not (len(params[key]) == 1 and params[key][0].isdigit()):
            problems.append(f"{key}: expected one integer, got {params[key]!r}")
    if "spyName" in params and not params["spyName"][0]:
        problems.append("spyName: empty")
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() not in RAW_CONTENT_TYPES:
        problems.append(f"content type {content_type!r}: with format=pprof the raw body is the "
                        f"profile (send an octet-stream, not a form)")
    request.profile = decode_pprof(request.body, problems)
    per_instance = {key for labels in request.series for key, _ in labels} & PER_INSTANCE_LABELS
    if per_instance:
        problems.append(f"series labels {sorted(per_instance)}: a series per process or thread "
                        f"(send them as numeric sample labels, which ingest drops)")


class IngestServer:
    """Serves on 127.0.0.1:<free port> in a thread while used as a context manager."""

    def __init__(self):
        self.requests: list[IngestRequest] = []
        self._lock = threading.Lock()
        self._failures: list[tuple[int, str | None]] = []  # (status, Retry-After) to come
        self._hangs = 0
        self._hang_s = 0.0
        self._release = threading.Event()  # ends every hang at shutdown
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, count: int, status: int = 500, retry_after: str | None = None) -> None:
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def hang_next(self, count: int, seconds: float = 30.0) -> None:
        with self._lock:
            self._hangs, self._hang_s = count, seconds

    @property
    def accepted(self) -> list[IngestRequest]:
        with self._lock:
            return [r for r in self.requests if r.status == 200]

    def __enter__(self) -> IngestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _answer(self, request: IngestRequest) -> tuple[int, bytes, dict[str, str]]:
        with self._lock:
            self.requests.append(request)
            hang = self._hangs > 0
            if hang:
                self._hangs -= 1
            failure = self._failures.pop(0) if self._failures and not hang else None
        if hang:
            self._release.wait(self._hang_s)
            request.status = 504
            return 504, b"hung on purpose", {}
        validate(request)
        if failure is not None:
            request.status, retry_after = failure
            return request.status, b"failing on purpose", ({"Retry-After": retry_after}
                                                       if retry_after else {})
        if request.problems:
            request.status = 400
            return 400, ("; ".join(request.problems)).encode(), {}
        request.status = 200
        return 200, b"", {}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urllib.parse.urlsplit(self.path)
                request = IngestRequest(
                    self.command, split.path,
                    urllib.parse.parse_qs(split.query, keep_blank_values=True),
                    {k.lower(): v for k, v in self.headers.items()}, body)
                status, text, headers = server._answer(request)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                except OSError:
                    pass  # the client gave up (a timeout test)

            do_POST = do_GET = do_PUT = _any

            def log_message(self, *args):
                pass

        return Handler
