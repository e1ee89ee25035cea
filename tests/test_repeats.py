"""Repeats of a level: the Student-t interval, the spread and its finding, and bench --repeats."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.rules.diagnose import diagnose
from servelab.metrics.repeats import T_975, interval, repeat_stats
from servelab.metrics.summary import Distribution, LevelSummary
from servelab.store.results import RunResult
from test_fault_suite import bench, fault_server


def test_the_interval_is_students_t():
    ci = interval([10.0, 12.0, 14.0])  # s = 2, n = 3, t(0.975, 2) = 4.303
    assert ci.mean == 12.0 and ci.half_width == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert interval([5.0]).half_width == 0.0 and T_975[0] == 12.706


@given(st.lists(st.floats(0.1, 1e6), min_size=2, max_size=40))
def test_an_interval_holds_its_mean_and_shrinks_with_agreement(values):
    ci = interval(values)
    assert ci.low <= ci.mean <= ci.high and ci.overlaps(ci)
    assert interval([ci.mean] * len(values)).half_width == pytest.approx(0.0, abs=1e-6 * ci.mean)


def _level(c: int, tok_s: float, ttft: float) -> LevelSummary:
    d = Distribution(n=8, mean=ttft, p50=ttft, p90=ttft, p95=ttft, p99=ttft * 2, min=ttft, max=ttft * 2)
    return LevelSummary(concurrency=c, ok=8, failed_requests=0, incomplete=0, output_throughput_tok_s=tok_s, ttft_ms=d, tpot_ms=d)


def test_repeats_that_disagree_are_an_unstable_measurement(tmp_path):
    stable = [_level(4, 1000, 50), _level(4, 1010, 51), _level(4, 995, 50)]
    shaky = [_level(8, 1500, 60), _level(8, 1800, 61)]  # 18 % apart in tok/s
    (s4, s8) = repeat_stats([*stable, *shaky, _level(16, 2000, 70)])  # c=16 ran once: no repeats
    assert (s4.runs, s4.unstable, s8.unstable) == (3, False, True)
    run = RunResult.model_validate(json.loads((__import__("pathlib").Path(__file__).parent / "fixtures" / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text()))
    run.levels = [*stable, *shaky]
    (finding,) = [f for f in diagnose(run) if f.kind == "unstable_measurement"]
    assert finding.evidence["concurrency"] == 8 and finding.evidence["runs"] == 2


def test_bench_repeats_each_level_as_separate_phases(tmp_path):
    with fault_server() as url:
        res = bench(url, tmp_path / "run", "--repeats", "3", concurrency=2, requests=6)
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["load"]["concurrency"] == [2, 2, 2] and len(run["levels"]) == 3
    spans = [tuple(lv["record_span"]) for lv in run["levels"]]
    assert len(set(spans)) == 3  # three phases, each with its own records
    assert "repeats: mean ± 95 % confidence interval" in " ".join(res.output.split())
