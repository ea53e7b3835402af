"""The service structure (pipeline diagram, stages, wait-for edges) and the predicted gain of the
findings in the HTML report, in a real browser.

The pages are rendered with the production renderer from reports/dev_sample_data.json: worker
4340 runs a pipeline client_loop -> decode_stage x2 -> model_stage x1 (the bottleneck, busy 98%)
-> postprocess_stage x2 over the queues intake / decoded / scored, listed (as diagnose lists
stages) by busy thread-seconds, not in queue order; a plugin thread starves on a queue whose name
is hostile markup; every finding carries predicted_gain / gain_basis, most an evidence.fix knob.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from diagnose.report.model import Edge, Fix, Report, Stage, Structure
from tests.browser.conftest import analyze_recorded, dev_sample_data, render_page, requires_browser
from tests.browser.typed import finding, report_of, shown, with_evidence, with_report

pytestmark = requires_browser

PIPELINE_PID = 4340
QUEUE_ORDER = ["client_loop", "decode_stage", "model_stage", "postprocess_stage"]
HOSTILE_QUEUE = "<svg onload=alert(1)>:23"
ROLE_LABELS = {"event_loop": "event loop"}  # page/structure.js STAGE_ROLES: the others as they are
EDGE_WORDS = {"starved": "starved on", "backpressure": "backpressure on", "result": "waiting for",
              "lock": "waiting on", "gil": "waiting for"}  # page/structure.js EDGE_KINDS


@pytest.fixture
def sample():
    return dev_sample_data()


@pytest.fixture
def report(sample) -> Report:
    """The sample's report, decoded once."""
    return report_of(sample)


@pytest.fixture
def sample_page(sample, open_report, tmp_path):
    return open_report(render_page(sample, tmp_path / "dev.html"))


def fmt_pct(share: float | None) -> str:
    """page/core.js fmtPct."""
    if share is None:
        return "\u2014"
    p = share * 100
    if p == 0:
        return "0%"
    if abs(p) < 0.1:
        return "<0.1%"
    return f"{p:.0f}%" if abs(p) >= 99.95 else f"{p:.1f}%"


def pipeline_entry(report: Report) -> tuple[int, Structure]:
    return next((i, e) for i, e in enumerate(report.structure) if e.pid == PIPELINE_PID)


def queue_order(stages: tuple[Stage, ...]) -> list[str]:
    """The stages joined by a queue, each producer before its consumers (list order on ties)."""
    names = [s.name for s in stages]
    after = {n: {c.name for c in stages for q in s.puts if q in c.gets and c is not s}
             for n, s in zip(names, stages)}
    linked = {n for n in names if after[n]} | {c for n in names for c in after[n]}
    todo = [n for n in names if n in linked]
    order = []
    while todo:
        ready = next(n for n in todo if not any(n in after[m] for m in todo))
        order.append(ready)
        todo.remove(ready)
    return order


def test_the_sample_has_a_pipeline_listed_out_of_queue_order(report):
    _, entry = pipeline_entry(report)
    assert entry.pipeline is True and entry.bottleneck == "model_stage"
    stages = {s.name: s for s in entry.stages}
    assert [len(stages[n].tids) for n in QUEUE_ORDER] == [1, 2, 1, 2]
    assert stages["model_stage"].busy_share == 0.98
    assert queue_order(entry.stages) == QUEUE_ORDER
    assert [s.name for s in entry.stages if s.name in QUEUE_ORDER] != QUEUE_ORDER
    assert any(HOSTILE_QUEUE in e.resource for e in entry.edges)
    assert all(f.predicted_gain is not None and f.gain_basis for f in report.findings)
    assert any(fix.stage for f in report.findings for fix in f.fixes)
    assert any(not e.pipeline for e in report.structure)


_BOXES_JS = """els => els.map(b => {
  const bar = b.querySelector('.stage-bar').getBoundingClientRect().width;
  return {
    name: b.querySelector('.stage-name').textContent, stage: b.dataset.stage,
    bottleneck: b.dataset.bottleneck, cls: b.classList.contains('bottleneck'),
    tag: b.querySelector('.bottleneck-tag') ? b.querySelector('.bottleneck-tag').textContent : null,
    threads: b.querySelector('.stage-threads').textContent, busy: b.querySelector('.stage-busy-pct').textContent,
    fill: b.querySelector('.stage-bar .share-fill').getBoundingClientRect().width / bar,
    x: b.getBoundingClientRect().left, border: getComputedStyle(b).borderTopColor,
  };
})"""


def test_the_diagram_draws_one_box_per_stage_in_queue_order_with_the_bottleneck(report, sample_page):
    page = sample_page.page
    index, entry = pipeline_entry(report)
    block = f"#structure-{index}"
    assert page.is_visible("#structure")
    assert page.get_attribute(block, "data-pid") == str(PIPELINE_PID)
    assert page.get_attribute(block, "data-pipeline") == "true"
    boxes = shown(page.eval_on_selector_all(f"{block} .pipeline .stage-box", _BOXES_JS))
    assert [b.name for b in boxes] == queue_order(entry.stages) == QUEUE_ORDER
    assert [b.stage for b in boxes] == QUEUE_ORDER
    xs = [b.x for b in boxes]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)  # left to right
    stages = {s.name: s for s in entry.stages}
    for box in boxes:
        stage = stages[box.name]
        n = len(stage.tids)
        assert box.threads == f"{n} thread{'s' if n != 1 else ''}"
        assert box.busy == f"busy {fmt_pct(stage.busy_share)}"
        assert abs(box.fill - stage.busy_share) < 0.02, box  # the bar is drawn to scale
    # the bottleneck, and only it, is highlighted
    neck = [b for b in boxes if b.bottleneck == "true"]
    assert [b.name for b in neck] == [entry.bottleneck]
    assert neck[0].cls and neck[0].tag == "bottleneck"
    assert all(not b.cls and b.tag is None for b in boxes if b not in neck)
    assert len({b.border for b in boxes if b not in neck}) == 1
    assert neck[0].border != boxes[0].border
    # arrows between the boxes, labelled with the queue between them
    arrows = page.eval_on_selector_all(f"{block} .pipeline .stage-arrow .queue-name",
                                       "els => els.map(e => e.textContent)")
    assert arrows == ["intake", "decoded", "scored"]
    # stages no queue joins to another stay out of the diagram (they are in the table)
    assert "PluginHost.serve" not in [b.name for b in boxes]
    assert "model_stage" in page.text_content(f"{block} .structure-summary")
    # no diagram for processes without a pipeline
    for i, other in enumerate(report.structure):
        if not other.pipeline:
            assert page.locator(f"#structure-{i} .pipeline").count() == 0
            assert page.get_attribute(f"#structure-{i}", "data-pipeline") == "false"
    sample_page.assert_clean()


_STAGE_ROWS_JS = """els => els.map(tr => ({
  name: tr.querySelector('.stage-cell-name').textContent, stage: tr.dataset.stage,
  bottleneck: tr.dataset.bottleneck,
  cells: Array.from(tr.cells).map(td => td.textContent),
  pcts: Array.from(tr.querySelectorAll('.share-pct')).map(e => e.textContent),
  role: tr.querySelector('.stage-role').textContent,
}))"""


def test_the_stage_tables_match_the_report(report, sample_page):
    page = sample_page.page
    structure = report.structure
    assert page.locator("#structure-body .structure").count() == len(structure)
    for i, entry in enumerate(structure):
        rows = shown(page.eval_on_selector_all(f"#structure-{i} tr.stage-row", _STAGE_ROWS_JS))
        assert [r.name for r in rows] == [s.name for s in entry.stages]  # the report's order
        for row, stage in zip(rows, entry.stages):
            assert row.stage == stage.name
            assert row.role == ROLE_LABELS.get(stage.role, stage.role)
            assert row.cells[2] == str(len(stage.tids))
            assert row.pcts == [fmt_pct(share) for share in (
                stage.busy_share, stage.blocked_put_share, stage.starved_share, stage.result_wait_share)]
            assert row.cells[7] == (", ".join(stage.gets) or "\u2014")
            assert row.cells[8] == (", ".join(stage.puts) or "\u2014")
            assert row.cells[0].startswith(stage.name)
            assert f"{stage.file.rsplit('/', 1)[-1]}:{stage.line}" in row.cells[0]
            assert row.bottleneck == ("true" if stage.name == entry.bottleneck else "false")
        title = page.text_content(f"#structure-{i} .structure-title")
        assert title.startswith(f"Process {entry.pid}")
    # sorting a stage table by busy share, then the rows are still the report's stages
    index, entry = pipeline_entry(report)
    page.locator(f"#structure-{index} table.stages thead .sort-btn", has_text="Busy").click()
    names = page.eval_on_selector_all(f"#structure-{index} tr.stage-row", "els => els.map(e => e.dataset.stage)")
    assert names == [s.name for s in sorted(entry.stages, key=lambda s: -s.busy_share)]
    sample_page.assert_clean()


def edge_text(edge: Edge) -> str:
    holder = edge.holder if edge.holder else "unknown"
    return f"{edge.waiter} \u2014{EDGE_WORDS[edge.kind]} {edge.resource}\u2192 {holder}"


def test_wait_for_edges_render_as_text(report, sample_page):
    page = sample_page.page
    index, entry = pipeline_entry(report)
    rows = shown(page.eval_on_selector_all(
        f"#structure-{index} tr.edge-row",
        "els => els.map(tr => ({text: tr.querySelector('.edge-text').textContent, kind: tr.dataset.kind,"
        " pct: tr.querySelector('.share-pct').textContent, onNeck: tr.dataset.onBottleneck}))"))
    assert len(rows) == len(entry.edges)
    for row, edge in zip(rows, entry.edges):
        assert row.text == edge_text(edge)
        assert row.kind == edge.kind
        assert row.pct == fmt_pct(edge.share)
        assert row.onNeck == ("true" if edge.holder == entry.bottleneck else "false")
    texts = [r.text for r in rows]
    assert "decode_stage \u2014backpressure on queue decoded\u2192 model_stage" in texts
    assert "postprocess_stage \u2014starved on queue scored\u2192 model_stage" in texts
    assert f"PluginHost.serve \u2014starved on queue {HOSTILE_QUEUE}\u2192 unknown" in texts
    # processes whose threads wait on nobody say so
    for i, other in enumerate(report.structure):
        if not other.edges:
            assert page.locator(f"#structure-{i} tr.edge-row").count() == 0
            assert page.is_visible(f"#structure-{i} .edges-empty")
    sample_page.assert_clean()


_GAIN_JS = """d => ({
  line: d.querySelector('.f-gain-line') ? d.querySelector('.f-gain-line').textContent : null,
  basis: d.querySelector('.f-gain-basis') ? d.querySelector('.f-gain-basis').textContent : null,
  gain: d.querySelector('.f-gain') ? d.querySelector('.f-gain').dataset.gain : null,
  knob: d.querySelector('.f-knob') ? d.querySelector('.f-knob').textContent : null,
  tag: d.querySelector('summary .f-gain-tag') ? d.querySelector('summary .f-gain-tag').textContent : null,
  evidenceKeys: Array.from(d.querySelectorAll('table.evidence > tbody > tr')).map(tr => tr.dataset.key),
  visible: d.querySelector('.f-gain') ? d.querySelector('.f-gain').getBoundingClientRect().height > 0 : false,
})"""


def finding_gain(page, finding_id: str) -> SimpleNamespace:
    return shown(page.eval_on_selector(f'details.finding[data-finding-id="{finding_id}"]', _GAIN_JS))


def knob_text(fix: Fix) -> str:
    value = fix.value
    value = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
    text = f"Knob: {fix.knob} = {value}"
    return text + (f" for stage {fix.stage}" if fix.stage else "")


def test_findings_show_their_predicted_gain_basis_and_knob(report, sample_page):
    page = sample_page.page
    findings = report.findings
    top = findings[0]
    on_page = finding_gain(page, top.id)
    assert on_page.visible  # the top finding is open
    assert on_page.line == f"Predicted gain: \u00d7{top.predicted_gain:.2f} (estimate)"
    assert on_page.line == "Predicted gain: \u00d72.18 (estimate)"
    assert on_page.basis == top.gain_basis
    assert on_page.tag == "\u00d72.18 est."
    for f in findings:
        on_page = finding_gain(page, f.id)
        if f.severity == "ok":  # found nothing: one "also checked" line, no gain, no knob
            assert on_page.line is None and on_page.tag is None and on_page.knob is None
            continue
        assert on_page.line == f"Predicted gain: \u00d7{f.predicted_gain:.2f} (estimate)"
        assert float(on_page.gain) == f.predicted_gain
        assert on_page.basis == f.gain_basis
        fixes = f.fixes
        assert len(fixes) <= 1, fixes  # the sample's knobs are one each
        assert on_page.knob == (knob_text(fixes[0]) if fixes else None)
        assert "fix" not in on_page.evidenceKeys  # shown as the knob line instead
    stage = finding_gain(page, "stage_bound")
    assert stage.knob == "Knob: stage_threads = 2 for stage model_stage"
    # the verdict names the top finding's gain, as an estimate, with its basis
    verdict = page.text_content("#verdict-gain")
    assert "\u00d72.18" in verdict and "(estimate)" in verdict and top.gain_basis in verdict
    assert page.get_attribute("#verdict-gain", "data-finding-id") == top.id
    assert "estimate" in page.inner_text("#verdict")
    # right under the headline, above the findings
    assert page.evaluate("document.getElementById('verdict-gain').getBoundingClientRect().top"
                         " > document.getElementById('verdict-headline').getBoundingClientRect().top")
    sample_page.assert_clean()


def test_findings_keep_the_report_order_and_gains_may_be_missing(sample, report, open_report, tmp_path):
    # ranked by gain among critical findings: a lower score may come first; the page keeps it
    findings = tuple(reversed(report.findings))
    top = findings[0]
    assert top.score < findings[-1].score
    changed = {
        "gil_contention": lambda f: with_evidence(f, "fix", {"knob": "OPENBLAS_NUM_THREADS", "value": 1}),
        "worker_imbalance": lambda f: replace(f, predicted_gain=None, gain_basis=""),
        "preprocess_bound": lambda f: replace(f, predicted_gain=None),
        "event_loop_blocked": lambda f: with_evidence(f, "fix", {"knob": "queue_handler", "value": True}),
    }
    findings = tuple(changed.get(f.id, lambda same: same)(f) for f in findings)
    unestimated = finding(report, "preprocess_bound")
    data = with_report(sample, replace(report, findings=findings,
                                       verdict=replace(report.verdict, primary=top.id)))
    opened = open_report(render_page(data, tmp_path / "order.html"))
    page = opened.page
    ids = page.eval_on_selector_all("details.finding", "els => els.map(e => e.dataset.findingId)")
    assert ids == [f.id for f in findings]
    ranks = page.eval_on_selector_all("details.finding", "els => els.map(e => Number(e.dataset.rank))")
    assert ranks == list(range(1, len(findings) + 1))
    assert finding_gain(page, "gil_contention").knob == "Knob: OPENBLAS_NUM_THREADS = 1"
    assert finding_gain(page, "event_loop_blocked").knob == "Knob: queue_handler = true"
    none = finding_gain(page, "worker_imbalance")
    assert none.line is None and none.basis is None and none.tag is None
    partial = finding_gain(page, "preprocess_bound")
    assert partial.line == "Predicted gain: not estimated" and partial.basis == unestimated.gain_basis
    assert partial.tag is None
    # the verdict shows the gain of its own (top) finding
    assert page.get_attribute("#verdict-gain", "data-finding-id") == top.id
    assert f"\u00d7{top.predicted_gain:.2f}" in page.text_content("#verdict-gain")
    opened.assert_clean()


def test_no_verdict_gain_without_a_predicted_gain(sample, report, open_report, tmp_path):
    # a report from before gains were predicted: the keys are absent, not null
    for f in sample["report"]["findings"]:
        f.pop("predicted_gain")
        f.pop("gain_basis")
    opened = open_report(render_page(sample, tmp_path / "old.html"))
    page = opened.page
    assert page.locator("#verdict-gain, .f-gain, .f-gain-tag").count() == 0
    assert page.locator(".f-knob").count() == sum(1 for f in report.findings if f.value("fix") is not None)
    opened.assert_clean()


def renamed(names: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    return tuple(new if n == old else n for n in names)


def test_hostile_names_in_the_structure_stay_text(sample, report, open_report, tmp_path):
    index, entry = pipeline_entry(report)
    # a stage and a queue of the pipeline named like markup too
    stage_name, queue_name = "<svg onload=alert(2)>", "<img src=x onerror=alert(3)>"
    stages = tuple(replace(s, name=stage_name if s.name == "decode_stage" else s.name,
                           gets=renamed(s.gets, "decoded", queue_name),
                           puts=renamed(s.puts, "decoded", queue_name)) for s in entry.stages)
    edges = tuple(replace(e, waiter=stage_name if e.waiter == "decode_stage" else e.waiter,
                          holder=stage_name if e.holder == "decode_stage" else e.holder)
                  for e in entry.edges)
    structure = list(report.structure)
    structure[index] = replace(entry, stages=stages, edges=edges)
    data = with_report(sample, replace(report, structure=tuple(structure)))
    opened = open_report(render_page(data, tmp_path / "hostile.html"))
    page = opened.page
    boxes = page.eval_on_selector_all(f"#structure-{index} .stage-box .stage-name",
                                      "els => els.map(e => e.textContent)")
    assert boxes == ["client_loop", stage_name, "model_stage", "postprocess_stage"]
    arrows = page.eval_on_selector_all(f"#structure-{index} .queue-name", "els => els.map(e => e.textContent)")
    assert arrows == ["intake", queue_name, "scored"]
    text = page.inner_text("#structure")  # rendered, not hidden
    for name in (HOSTILE_QUEUE, stage_name, queue_name):
        assert name in text
    assert f"{stage_name} \u2014backpressure on queue decoded\u2192 model_stage" in text
    assert page.locator("svg, img").count() == 0
    assert page.evaluate("document.querySelectorAll('svg, img, [onload], [onerror]').length") == 0
    assert page.evaluate("document.scripts.length") == 2  # the data block and the page script
    page.wait_for_timeout(200)  # any injected handler would have fired by now
    assert opened.dialogs == []
    opened.assert_clean()


def test_structure_section_is_hidden_without_data_and_survives_odd_entries(sample, open_report, tmp_path):
    # pages fed what no report holds: the data is written by hand
    written = sample["report"]
    for variant, value in (("absent", None), ("empty", [])):
        if value is None:
            written.pop("structure", None)
        else:
            written["structure"] = value
        opened = open_report(render_page(sample, tmp_path / f"{variant}.html"))
        assert opened.page.is_hidden("#structure")
        assert opened.page.locator("#structure-body *").count() == 0
        opened.assert_clean()
    written["structure"] = [
        None, "not an entry", {"pid": 1, "stages": []}, {"stages": "many"},
        {"pid": 7, "pipeline": True, "bottleneck": "b", "stages": [  # a cycle of queues
            {"name": "a", "role": "stage", "tids": [1], "gets": ["q2"], "puts": ["q1"], "busy_share": 0.5},
            {"name": "b", "role": "batcher", "tids": "x", "gets": ["q1"], "puts": ["q2"], "busy_share": "lots"},
            None, {"name": "c", "role": "constructor", "gets": None, "puts": [None, 3]}],
         "edges": [None, {"waiter": "a", "kind": "__proto__", "resource": None, "holder": None, "share": None},
                   {"waiter": "b", "kind": "toString", "resource": "queue q2", "holder": "a", "share": 2}]},
    ]
    opened = open_report(render_page(sample, tmp_path / "odd.html"))
    page = opened.page
    assert page.is_visible("#structure")
    assert page.locator("#structure-body .structure").count() == 1
    boxes = page.eval_on_selector_all("#structure-0 .stage-box", "els => els.map(e => e.dataset.stage)")
    assert sorted(boxes) == ["a", "b"]
    assert page.locator("#structure-0 tr.stage-row").count() == 3
    assert page.locator("#structure-0 tr.edge-row").count() == 2
    assert page.get_attribute("#structure-0 .stage-box[data-stage='b']", "data-bottleneck") == "true"
    opened.assert_clean()


def test_a_real_report_shows_its_structure(open_report, tmp_path):
    html, report = analyze_recorded("lock_contention", tmp_path)
    structure = report.structure
    assert structure and report.findings[0].gain_basis
    opened = open_report(html)
    page = opened.page
    assert page.is_visible("#structure")
    for i, entry in enumerate(structure):
        names = page.eval_on_selector_all(f"#structure-{i} tr.stage-row", "els => els.map(e => e.dataset.stage)")
        assert names == [s.name for s in entry.stages]
        assert page.locator(f"#structure-{i} .pipeline").count() == (1 if entry.pipeline else 0)
    ids = page.eval_on_selector_all("details.finding", "els => els.map(e => e.dataset.findingId)")
    assert ids == [f.id for f in report.findings]  # diagnose's ranking, as it is
    top = report.findings[0]
    if top.predicted_gain is not None:
        assert f"\u00d7{top.predicted_gain:.2f}" in page.text_content("#verdict-gain")
    opened.assert_clean()


def test_without_javascript_the_fallback_names_gains_and_structure(sample, browser, tmp_path):
    html = render_page(sample, tmp_path / "nojs.html")
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    try:
        page = context.new_page()
        page.goto(html.resolve().as_uri(), wait_until="load")
        text = page.inner_text("body")
        assert "predicted gain \u00d72.18 (estimate)" in text
        assert "Service structure" in text
        assert f"process {PIPELINE_PID}: 6 thread groups, a pipeline; bottleneck: model_stage" in text
        assert page.locator("svg, img").count() == 0
    finally:
        context.close()
