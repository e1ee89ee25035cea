"""Issue 53's kept-back set (validation/kept_back.py, validation/kept-back-h200/): measured after predict was frozen and
never fitted on. These tests hold what the replay showed where it met the issue's goals, so that a change to predict
that loses it fails here; where it missed them (validation/RESULTS-predict.md says where), they hold nothing."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import kept_back  # noqa: E402

MODELS = ("deepseek-v2-8l", "glm-4.7-flash", "gpt-oss-120b-12l", "mistral-small-24b")


@pytest.fixture(scope="module")
def results():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main()


def test_every_kept_back_level_is_cold_and_complete():
    """No prefix-cache hit and no Triton JIT line inside any window, no failed request: the truth rules."""
    for model in MODELS:
        for lv in json.loads((kept_back.DATA / f"{model}-bursts.json").read_text())["levels"]:
            assert (lv["prefix_cache_hits"], lv["jit_lines"], lv["failed"]) == (0, [], 0), (model, lv["concurrency"])
        for name in ("calibrate-run", "stagger-run"):
            run = json.loads((kept_back.DATA / f"{model}-{name}.json").read_text())
            assert run["status"] == "complete"
            for lv in run["levels"]:
                assert lv["server"]["prefix_cache_hit_rate"] == 0.0 and not lv["jit_kernels"], (model, name, lv["concurrency"])
                assert lv["failed_requests"] == 0 and set(lv["error_kinds"]) <= {"cancelled"}, (model, name, lv["concurrency"])  # cancelled: cut by the window's end
    assert "Intel(R) Xeon(R) Processor" in (kept_back.DATA / "host.txt").read_text()


def test_the_replay_scores_every_model_at_every_level(results):
    assert sorted(results) == list(MODELS)
    for r in results.values():
        assert [(x["kind"], x["c"]) for x in r["rows"]] == [(k, c) for k in ("burst", "design") for c in (1, 16, 64)] + [("stagger", 4), ("stagger", 32)]
        assert [(x["kind"], x["c"]) for x in r["after"]] == [("burst", 1), ("burst", 16), ("burst", 64), ("stagger", 4), ("stagger", 32)]


def test_the_dense_model_and_the_cut_deepseek_v2_meet_the_held_out_goals(results):
    for model in ("mistral-small-24b", "deepseek-v2-8l"):
        s = results[model]["held"]
        assert s["tok_median"] <= 8.0 and s["tok_worst"] <= 20.0 and s["single"] <= 10.0 and s["inside_tok"] >= 90.0, model
    assert results["mistral-small-24b"]["held"]["burst_ttft_median"] <= 25.0


def test_after_calibrate_bursts_within_fifteen_and_other_levels_within_ten_percent(results):
    for model in ("mistral-small-24b", "deepseek-v2-8l", "gpt-oss-120b-12l"):
        for row in results[model]["after"]:
            assert abs(row["e_tok"]) <= (15.0 if row["kind"] == "burst" else 10.0), (model, row["kind"], row["c"])


def test_the_pooled_tok_s_median_is_within_the_goal_and_the_band_holds_most_tok_s_points(results):
    pooled = kept_back.summary([row for r in results.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 8.0
    assert pooled["inside_tok"] >= 90.0 and pooled["inside_ttft"] >= 70.0
