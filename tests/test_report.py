"""Plots and the self-contained HTML report: content, escaping of anything servers or models said."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from servelab.cli import app
from servelab.store.imports import read_results
from servelab.report import plots
from servelab.report.html import compare_page, run_page

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "runs" / "vllm-0.25-h100-qwen3-8b-run.json"
cli = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
EVIL = "<script>alert('x')</script>"


def evil_run(tmp_path: Path) -> Path:
    """The fixture run with a hostile model name, finding, note and boot-log warning."""
    doc = json.loads(RUN.read_text())
    doc["endpoint"]["model"] = EVIL
    doc["findings"] = [{"kind": "k", "severity": "warning", "message": f"server said {EVIL}", "evidence": {}}]
    doc["notes"] = [f"<img src=x onerror=alert(1)> {EVIL}"]
    d = tmp_path / "evil"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(doc))
    return d


def test_plots_are_png_with_the_ceiling_where_known():
    (run,) = read_results_from(RUN)
    for png in (plots.throughput([run]), plots.latency([run]), plots.pareto([run])):
        assert png.startswith(PNG) and len(png) > 5000
    assert plots._ceilings(run)  # the fixture ran with --hardware: its per-stream ceiling is drawn


def read_results_from(run_json: Path):
    tmp = Path(__import__("tempfile").mkdtemp()) / "r"
    tmp.mkdir()
    shutil.copy(run_json, tmp / "run.json")
    return read_results(tmp)


def test_distributions_from_records(llama, tmp_path):
    res = cli.invoke(app, ["bench", "--url", llama.url, "--concurrency", "1,2", "--requests", "4", "--output-tokens", "8",
                           "--input-tokens", "64", "--output", str(tmp_path / "b")])  # fmt: skip
    assert res.exit_code == 0, res.output
    (run,) = read_results(tmp_path / "b")
    from servelab.report.html import records_of

    png = plots.distributions(records_of(run))
    assert png is not None and png.startswith(PNG)
    page = run_page(run)
    assert page.count('src="data:image/png;base64,') == 4  # throughput, latency, distributions, Pareto


def test_report_escapes_what_servers_and_models_said(tmp_path):
    (run,) = read_results(evil_run(tmp_path))
    page = run_page(run)
    assert EVIL not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "server said &lt;script&gt;" in page


def test_report_is_self_contained(tmp_path):
    out = tmp_path / "report.html"
    res = cli.invoke(app, ["report", str(evil_run(tmp_path)), str(read_results_from(RUN)[0].origin), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "Comparison of 2 runs" in page and page.count("data:image/png;base64,") == 3
    external = re.findall(r'(?:src|href)="(https?:)?//', page)
    assert not external and "<script" not in page.replace("&lt;script", "")  # no network, no scripts


def test_report_of_a_missing_run_is_one_line(tmp_path):
    res = cli.invoke(app, ["report", "no-such-id", "--db", str(tmp_path / "db.sqlite")])
    assert res.exit_code == 2 and "no run 'no-such-id'" in res.output


def test_comparison_of_servelab_runs_has_the_delta_ledger(tmp_path):
    a = read_results_from(RUN)[0]
    doc = json.loads(RUN.read_text())
    doc["started_at"] = "2026-11-22T00:00:00+00:00"  # another run of the same server, 10 % faster at every level
    for lv in doc["levels"]:
        lv["output_throughput_tok_s"] *= 1.1
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "run.json").write_text(json.dumps(doc))
    page = compare_page([a, *read_results(tmp_path / "b")])
    assert "<h2>Ledger</h2>" in page and "(+10.0%) ★</b>" in page and "(base)" in page
    assert "Measured under different loads" not in page  # the same load: nothing to warn of
    doc["load"]["output_tokens"] //= 2
    (tmp_path / "b" / "run.json").write_text(json.dumps(doc))
    page = compare_page([a, *read_results(tmp_path / "b")])
    assert "Measured under different loads" in page and f"output tokens {doc['load']['output_tokens']}" in page


def test_compare_page_mixes_sources():
    runs = read_results_from(RUN) + read_results(FIXTURES / "imports" / "llama-benchy-0.4.0-gemma-270m.csv")
    page = compare_page(runs)
    assert "qwen3-8b" in page and "google/gemma-3-270m" in page and "per-user tok/s mean" in page
    assert "<h2>Ledger</h2>" not in page  # llama-benchy levels are not comparable level by level
