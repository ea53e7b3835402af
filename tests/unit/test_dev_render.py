"""reports/dev_render.py, the template developer's renderer, renders the sample data with the
production renderer (it fell behind once when the renderer gained the report model)."""

from pathlib import Path

from diagnose._reports import dev_render

SAMPLE = Path(__file__).resolve().parents[2] / "reports" / "dev_sample_data.json"


def test_dev_render_writes_the_sample_page_with_its_verdict(tmp_path):
    out = tmp_path / "page.html"
    assert dev_render.main([str(SAMPLE), str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype html>")
    assert 'id="verdict"' in page


def test_dev_render_without_two_paths_prints_its_usage(capsys):
    assert dev_render.main([]) == 2
    assert "dev_render.py" in capsys.readouterr().err
