"""The tuning ledger (``servelab compare``): Δ% against a baseline, best per column, inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.metrics.summary import Distribution, LevelSummary
from servelab.report.ledger import METRICS, Entry, build, collect, default_baseline, ledger_markdown, load_differences
from servelab.store.results import EndpointInfo, LoadSpec, RecipeInfo, RunResult, VariantStatus

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "vllm-0.25-h100-qwen3-8b-run.json"
cli = CliRunner()


def level(c: int, tput: float, ttft: float, failed: int = 0) -> LevelSummary:
    return LevelSummary(concurrency=c, ok=8, failed_requests=failed, incomplete=0, output_throughput_tok_s=tput, ttft_ms=Distribution(n=8, p50=ttft))


def run(name: str, *levels: LevelSummary) -> RunResult:
    load = LoadSpec(concurrency=[lv.concurrency for lv in levels], warmup=None, input_tokens=256, output_tokens=128, prefix_cache="cold",
                    ignore_eos=True, seed=0, request_timeout_s=600)  # fmt: skip
    recipe = RecipeInfo(name="r", engine="vllm", sha256="0", variant=name, command=["vllm"])
    return RunResult(endpoint=EndpointInfo(url="http://x", engine="vllm", model="m"), load=load, status="complete", recipe=recipe, levels=list(levels))


def test_delta_and_best_follow_the_metric_direction():
    entries = [
        Entry("a", run("a", level(1, 100.0, 50.0), level(8, 400.0, 90.0)), "complete"),
        Entry("b", run("b", level(1, 110.0, 40.0), level(8, 380.0, 120.0, failed=2)), "complete"),
        Entry("c", None, "failed-to-start"),
    ]
    tput = build(entries, METRICS["output_tok_s"])
    assert tput.columns == ["c=1", "c=8"]
    (_, a), (_, b), (_, c) = tput.rows
    assert [x.delta_pct for x in b] == pytest.approx([10.0, -5.0])
    assert [x.best for x in a] == [False, True] and [x.best for x in b] == [True, False]
    assert b[1].failed and c.startswith("failed to start")
    ttft = build(entries, METRICS["ttft_p50"], baseline=1)
    (_, a), (_, b), _ = ttft.rows
    assert a[0].delta_pct == pytest.approx(25.0) and [x.best for x in b] == [True, False]  # lower is better
    md = ledger_markdown([tput])
    assert "| a     | 100.0 (base)" in md and "**110.0 (+10.0%)** ★" in md and "380.0 (-5.0%)†" in md
    assert default_baseline([Entry("c", None, "failed-to-start"), *entries[:1]]) == 1


def test_runs_measured_under_different_loads_are_named_with_each_difference(tmp_path):
    """Δ% between a 256/128-token run and a 512/64 one, or a burst and a staggered one, is not a tuning
    gain: compare names each difference under its tables (and in its Markdown); runs measured alike pass silently."""
    a, b, c = run("a", level(1, 100.0, 50.0)), run("b", level(1, 90.0, 80.0)), run("c", level(1, 101.0, 49.0))
    b.load = b.load.model_copy(update={"input_tokens": 512, "output_tokens": 64, "closed_loop": "stagger"})
    entries = [Entry("a", a, "complete"), Entry("b", b, "complete"), Entry("c", c, "complete"), Entry("d", None, "failed-to-start")]
    assert load_differences(entries, 0) == ["b: prompt tokens 512 (a: 256), output tokens 64 (a: 128), closed loop stagger (a: burst)"]
    assert load_differences(entries[::2], 0) == []
    md = ledger_markdown([build(entries, METRICS["output_tok_s"])], load_differences(entries, 0))
    assert "**Measured under different loads** (Δ% compares different work): b: prompt tokens 512 (a: 256)" in md
    for r, name in ((a, "a"), (b, "b")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(r.model_dump_json())
    res = cli.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert res.exit_code == 0 and "warning the runs were measured under different loads" in " ".join(res.output.split())


def test_open_loop_rates_are_their_own_columns():
    rate = level(0, 50.0, 30.0)
    rate.rate_rps = 2.0
    ledger = build([Entry("a", run("a", level(1, 10.0, 5.0), rate), "complete")], METRICS["output_tok_s"])
    assert ledger.columns == ["c=1", "2 req/s"]


def test_collect_reads_runs_sweeps_and_folders(tmp_path):
    for name in ("one", "two"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        shutil.copy(FIXTURE, tmp_path / "runs" / name / "run.json")
    failed = tmp_path / "sweep" / "v=1"
    failed.mkdir(parents=True)
    failed.joinpath("variant.json").write_text(VariantStatus(variant="v=1", status="failed-to-start", error="boom",
                                                             recipe=RecipeInfo(name="r", engine="vllm", sha256="0", variant="v=1", command=["x"])).model_dump_json())  # fmt: skip
    (tmp_path / "sweep" / "sweep.json").write_text('{"recipe": "r", "sha256": "0", "variants": ["v=1"], "directories": ["v=1"]}')
    entries = collect([tmp_path / "runs", tmp_path / "runs" / "one", tmp_path / "sweep"])
    assert [e.label for e in entries] == ["one #1", "two", "one #2", "v=1"]
    assert entries[0].run is not None and entries[-1].run is None


def test_compare_cli_prints_tables_and_writes_markdown(tmp_path):
    for name in ("base", "tuned"):
        (tmp_path / name).mkdir()
        shutil.copy(FIXTURE, tmp_path / name / "run.json")
    md = tmp_path / "ledger.md"
    res = cli.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "tuned"), "--metric", "output_tok_s,itl_p99",
                           "--baseline", "tuned", "--markdown", str(md)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "output throughput, tok/s" in res.output and "ITL p99, ms" in res.output
    assert md.read_text().count("###") == 2 and "Δ% vs tuned" in md.read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--metric", "speed"], "--metric 'speed' is not a ledger metric"),
    (["--baseline", "nope"], "--baseline 'nope' is not one of the runs: base"),
    (["--baseline", "2"], "--baseline '2' is not one of the runs"),
])  # fmt: skip
def test_compare_bad_options_are_one_line(tmp_path, args, message):
    (tmp_path / "base").mkdir()
    shutil.copy(FIXTURE, tmp_path / "base" / "run.json")
    res = cli.invoke(app, ["compare", str(tmp_path / "base"), *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_compare_names_a_path_that_is_not_a_run(tmp_path):
    res = cli.invoke(app, ["compare", str(tmp_path)])
    assert res.exit_code == 2 and f"{tmp_path}: not a run or sweep directory" in res.output
    (tmp_path / "run.json").write_text('{"levels": 3}')
    res = cli.invoke(app, ["compare", str(tmp_path)])
    assert res.exit_code == 2 and f"{tmp_path / 'run.json'}: not a servelab run.json" in " ".join(res.output.split())


def test_repeated_levels_are_means_and_overlapping_intervals_are_within_noise():
    """bench --repeats 3 on both sides: the cells are means ± their 95 % interval; a difference whose
    intervals overlap is marked "within noise", one whose intervals are apart is not."""
    base = run("a", level(8, 100.0, 50.0), level(8, 104.0, 50.0), level(8, 102.0, 50.0))
    noisy = run("b", level(8, 99.0, 50.0), level(8, 108.0, 50.0), level(8, 103.0, 50.0))
    apart = run("c", level(8, 150.0, 50.0), level(8, 151.0, 50.0), level(8, 152.0, 50.0))
    single = run("d", level(8, 90.0, 50.0))
    ledger = build([Entry(r.recipe.variant, r, "complete") for r in (base, noisy, apart, single)], METRICS["output_tok_s"])
    (_, b), (_, n), (_, c), (_, s) = ledger.rows
    assert b[0].value == pytest.approx(102.0) and b[0].interval is not None
    assert n[0].significant is False and c[0].significant is True and s[0].significant is None
    text = ledger_markdown([ledger])
    assert "within noise" in text and text.count("within noise") == 1
