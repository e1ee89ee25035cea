"""SLOs: the grammar (any string is objectives or one line showing the grammar), goodput and the
level checks on records with known latencies, and a bench against the fault server whose slowed
requests are the ones that miss."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.errors import ServelabError
from servelab.metrics.slo import GRAMMAR, evaluate, parse_slo
from servelab.values.records import RequestRecord
from test_fault_suite import bench, fault_server


@given(metric=st.sampled_from(["ttft", "tpot", "itl", "e2e"]), pct=st.sampled_from(["50", "90", "95", "99", "99.9", "75.5"]),
       value=st.integers(1, 100_000), unit=st.sampled_from(["ms", "s"]))  # fmt: skip
def test_an_objective_reads_as_written(metric, pct, value, unit):
    (obj,) = parse_slo(f"{metric}_p{pct}={value}{unit}")
    assert (obj.metric, obj.percentile, obj.target_ms) == (metric, float(pct), value * (1000 if unit == "s" else 1))
    assert obj.key == f"{metric}_p{float(pct):g}"


@given(st.text(max_size=40))
def test_any_other_string_is_one_line_with_the_grammar(text):
    try:
        objectives = parse_slo(text)
    except ServelabError as exc:
        assert GRAMMAR in str(exc) or "given twice" in str(exc)
        assert "\n" not in str(exc).replace(text, "")
    else:
        assert objectives


@pytest.mark.parametrize("text", ["ttft_p99=0ms", "ttft_p40=2s", "ttft_p100=2s", "ttft_p99=2", "ttft_p99=2x", "ttft=2s", "ttft_p99=2s,ttft_p99=3s", ""])
def test_bad_objectives_are_refused(text):
    with pytest.raises(ServelabError, match="--slo"):
        parse_slo(text)


def _record(i: int, ttft_s: float, tokens: int, gap_s: float, status: str = "ok") -> RequestRecord:
    chunks = [ttft_s + k * gap_s for k in range(tokens)]
    return RequestRecord(index=i, concurrency=1, phase="measured", max_tokens=tokens, queued=0.0, start=0.0, first_token=ttft_s,
                         end=chunks[-1], chunk_times=chunks, output_tokens=tokens, status=status)  # fmt: skip


def test_goodput_counts_the_requests_within_every_objective():
    """Four successful requests (two fast, one slow to start, one slow to decode) and one failed: 2 of
    5 finished requests meet TTFT ≤ 100 ms and TPOT ≤ 20 ms."""
    records = [_record(0, 0.05, 11, 0.010), _record(1, 0.08, 11, 0.015), _record(2, 0.50, 11, 0.010), _record(3, 0.05, 11, 0.030),
               _record(4, 0.05, 11, 0.010, status="failed")]  # fmt: skip
    res = evaluate(parse_slo("ttft_p50=100ms,tpot_p50=20ms"), records, request_rps=8.0, output_tok_s=88.0)
    assert res.good_requests == 2 and res.attainment == pytest.approx(2 / 5)
    assert res.goodput_rps == pytest.approx(8.0 * 2 / 4) and res.goodput_tok_s == pytest.approx(88.0 * 22 / 44)
    ttft, tpot = res.checks
    assert ttft.measured_ms == pytest.approx(65.0) and ttft.passed  # p50 of 50, 80, 500, 50 ms
    assert tpot.measured_ms == pytest.approx(12.5) and tpot.passed  # p50 of 10, 15, 10, 30 ms
    assert not evaluate(parse_slo("ttft_p99=100ms"), records, 8.0, 88.0).passed


def test_a_bench_with_slos_reports_goodput_from_the_requests_that_met_them(tmp_path):
    """Every third request's headers come 300 ms late: exactly those miss TTFT ≤ 150 ms."""
    with fault_server("--slow", "3:1", "--slow-s", "0.3") as url:  # requests 1, 4, 7 …: the calibration and a third of the rest
        res = bench(url, tmp_path / "run", "--slo", "ttft_p90=150ms,e2e_p99=5s", concurrency=1, requests=12)
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [o["metric"] for o in run["load"]["slo"]] == ["ttft", "e2e"]
    slo = run["levels"][0]["slo"]
    assert slo["good_requests"] == 8 and slo["attainment"] == pytest.approx(8 / 12)
    assert slo["goodput_rps"] == pytest.approx(run["levels"][0]["request_throughput_rps"] * 8 / 12)
    assert [c["passed"] for c in slo["checks"]] == [False, True]
    assert "goodput req/s" in " ".join(res.output.split())


def test_goodput_reaches_the_database_the_export_and_the_leaderboard(tmp_path, monkeypatch):
    import csv

    from fastapi.testclient import TestClient

    from servelab.store.database import Store
    from servelab.report.ui import make_app
    from typer.testing import CliRunner

    from servelab.cli import app

    db = tmp_path / "runs.db"
    monkeypatch.setenv("SERVELAB_DB", str(db))
    with fault_server("--slow", "3:1", "--slow-s", "0.3") as url:
        assert bench(url, tmp_path / "run", "--slo", "ttft_p90=150ms", concurrency=1, requests=12).exit_code == 0
    (run,) = Store(f"sqlite:///{db}").runs()
    (level,) = run.levels
    assert level.slo_attainment == pytest.approx(8 / 12) and level.goodput_rps > 0
    res = CliRunner().invoke(app, ["export", "--output", str(tmp_path / "x.csv")])
    assert res.exit_code == 0
    (row,) = list(csv.DictReader((tmp_path / "x.csv").open()))
    assert float(row["goodput_rps"]) == pytest.approx(level.goodput_rps)
    page = TestClient(make_app(Store(f"sqlite:///{db}"))).get("/", params={"sort": "goodput_rps"})
    assert page.status_code == 200 and "goodput req/s" in page.text


def test_a_database_of_the_first_revision_is_upgraded(tmp_path):
    import sqlite3

    from alembic import command
    from alembic.config import Config
    from importlib.resources import files

    from servelab.store.database import Store

    from sqlalchemy import create_engine

    path = tmp_path / "old.db"
    cfg = Config()
    cfg.set_main_option("script_location", str(files("servelab") / "migrations"))
    with create_engine(f"sqlite:///{path}").begin() as conn:  # a database as servelab before revision 0002 left it
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    assert "goodput_rps" not in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(levels)")}
    Store(f"sqlite:///{path}").runs()  # opening it upgrades it
    assert "goodput_rps" in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(levels)")}
