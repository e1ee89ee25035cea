"""Issue 53's kept-back sets (validation/kept_back.py, validation/kept-back-h200/ and kept-back2-h200/): measured after
predict was frozen and never fitted on. These tests hold what the replay showed where it met the issue's goals, so that a change to predict
that loses it fails here; where it missed them (validation/RESULTS-predict.md says where), they hold nothing."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import bands  # noqa: E402
import host_band  # noqa: E402
import kept_back  # noqa: E402
from servelab.engines.vllm_host import HOST_QUEUE  # noqa: E402
from servelab.plan.cohorts import HOST_SHARE  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402

MODELS = ("deepseek-v2-8l", "glm-4.7-flash", "gpt-oss-120b-12l", "mistral-small-24b")
DATA2 = kept_back.DATA.parent / "kept-back2-h200"  # the second set: chosen before the fused-MoE kernel's rate was measured, opened after predict was frozen with it
MODELS2 = ("granite-3.3-8b", "moonlight-16b-a3b", "qwen1.5-moe-a2.7b", "qwen3-235b-a22b-12l")
DATA3 = kept_back.DATA.parent / "kept-back3-h200"  # the third: configs committed before the host's floor was modelled, opened after predict was frozen with it (cd7a670)
MODELS3 = ("glm-4.5-air-16l", "granite-3.1-3b-a800m", "olmoe-1b-7b", "phi-3.5-moe")
DATA4 = kept_back.DATA.parent / "kept-back4-h200"  # the fourth: configs committed before the host's time per step was modelled, opened after predict was frozen with its first form (2fe8e8f)
MODELS4 = ("ernie-4.5-21b-a3b", "granite-3.0-1b-a400m", "kimi-k2-4l", "llama-3.2-1b")
DATA5 = kept_back.DATA.parent / "kept-back5-h200"  # the fifth: configs committed before the host-bound steady state was modelled, opened after predict was frozen with it (56a97d5)
MODELS5 = ("gemma-3-1b", "glm-4-9b", "minimax-m2.5-8l", "qwen3-0.6b")
DATA6 = kept_back.DATA.parent / "kept-back6-h100"  # the sixth (an H100): configs committed before predict was frozen with the host-bound burst's queue, opened after (ca8afdb)
MODELS6 = ("qwen2.5-0.5b", "smollm2-1.7b")
DATA7 = kept_back.DATA.parent / "kept-back7-h100"  # the seventh (an H100): configs committed (4adb0a2) before predict was frozen with the steady state's floor and one queue, measured and opened after (d525186)
MODELS7 = ("qwen3-1.7b", "qwen3-30b-a3b-16l")
DATA8 = kept_back.DATA.parent / "kept-back8-h100"  # the eighth (an H100, one job on its host): configs committed (bc249df) before the host's scale, opened after the band was taken from every held-out point (eda5322)
MODELS8 = ("llama-3.2-3b", "mistral-7b-v0.3")
DATA9 = kept_back.DATA.parent / "kept-back9-h100"  # the ninth (an H100, one job on its host): configs committed (2b704ef) before it was measured, opened after calibrate's efficiencies' prior on Hopper was committed (2e7720a)
MODELS9 = ("deepseek-v3-5l", "gemma-2-9b")
DATA10 = kept_back.DATA.parent / "kept-back10-h100"  # the tenth (an H100, one job on its host): configs committed (ecf1031) before the band was held out by model (7e4baed), opened blind after (f1b4a5b)
MODELS10 = ("mixtral-8x22b-8l", "olmo-2-13b")
DATA11 = kept_back.DATA.parent / "kept-back11-h100"  # the eleventh (a further H100 host, one job on it): configs committed (b61de0c) before it was measured, opened blind at 5d976b3
MODELS11 = ("aya-expanse-8b", "dots-llm1-8l")
DATA12 = kept_back.DATA.parent / "kept-back12-h100"  # the twelfth (a further H100 host, one job on it): configs committed (2d31473) before it was measured, opened blind at 4a20434
MODELS12 = ("afmoe", "flex-olmo-16l")
DATA13 = kept_back.DATA.parent / "kept-back13-h100"  # the thirteenth (a further H100 host, one job on it): configs committed (df0d602) before it was measured, opened blind at df0d602
MODELS13 = ("laguna-24l", "minitron-8b")
DATA14 = kept_back.DATA.parent / "kept-back14-h100"  # the fourteenth (a further H100 host, one job on it): configs committed (74a6cbc) before it was measured, opened blind at c80af28
MODELS14 = ("axk1-4l", "hy-v3-8l")
DATA15 = kept_back.DATA.parent / "kept-back15-h100"  # the fifteenth (a further H100 host, one job on it): the second set's Moonlight again, chosen (1b1e7a2) before it was measured, opened blind at ac47d6c
MODELS15 = ("moonlight-16b-a3b",)
JIT = {("hy-v3-8l", 16)}  # a burst with a Triton JIT compile inside its window (fused_moe_kernel, a shape the warm-up missed): shown, not scored
NO_DESIGN = {"hy-v3-8l"}  # served without calibrate's design: servelab read it as not fitting (expert_hidden_dim unread) when it was measured
PARTIAL = {("kept-back6-h100", "qwen2.5-0.5b", "stagger-run"), ("kept-back12-h100", "flex-olmo-16l", "repeats3-stagger-run"), ("kept-back13-h100", "laguna-24l", "stagger-run"),
           ("kept-back13-h100", "minitron-8b", "stagger-run"), ("kept-back15-h100", "moonlight-16b-a3b", "stagger-run")}  # stopped by the device call's limit in its last level (cut_short: not scored)
STOPPED = {("kept-back11-h100", "dots-llm1-8l", "repeats3-stagger-run")}  # stopped by the device call's limit between two levels (none cut short)
HITS = {("granite-3.3-8b", 64), ("olmoe-1b-7b", 64), ("granite-3.1-3b-a800m", 64), ("granite-3.0-1b-a400m", 64), ("smollm2-1.7b", 64), ("olmo-2-13b", 64),
        ("flex-olmo-16l", 64), ("laguna-24l", 64)}  # vllm bench serve's random prompts repeated 512 tokens once (0.8 %)


@pytest.fixture(scope="module")
def results():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main()


@pytest.fixture(scope="module")
def results2():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA2)


@pytest.fixture(scope="module")
def results3():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA3)


@pytest.fixture(scope="module")
def results4():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA4)


@pytest.mark.parametrize(("data", "models"), [(kept_back.DATA, MODELS), (DATA2, MODELS2), (DATA3, MODELS3), (DATA4, MODELS4), (DATA5, MODELS5), (DATA6, MODELS6), (DATA7, MODELS7),
                                                   (DATA8, MODELS8), (DATA9, MODELS9), (DATA10, MODELS10), (DATA11, MODELS11), (DATA12, MODELS12), (DATA13, MODELS13),
                                                   (DATA14, MODELS14), (DATA15, MODELS15)])  # fmt: skip
def test_every_kept_back_level_is_cold_and_complete(data, models):
    """No prefix-cache hit (but 512 of ~66,800 prompt tokens in seven 64-stream bursts, ``HITS``: vllm bench serve's random
    prompts, one seed a level, repeated 512 tokens once; 0.8 %) and no Triton JIT line inside any window (but one burst, ``JIT``,
    which the replay shows and does not score), no failed request: the truth rules."""
    for model in models:
        for lv in json.loads((data / f"{model}-bursts.json").read_text())["levels"]:
            hits = 512 if (model, lv["concurrency"]) in HITS else 0
            assert (lv["prefix_cache_hits"], bool(lv["jit_lines"]), lv["failed"]) == (hits, (model, lv["concurrency"]) in JIT, 0), (model, lv["concurrency"])
        for name in ("calibrate-run", "stagger-run", "repeats3-stagger-run"):
            if (name.startswith("repeats") or model in NO_DESIGN) and not (data / f"{model}-{name}.json").exists():
                continue  # the truth rule's repeats: MoE servers of the fourth, fifth and ninth to twelfth sets only (Kimi-K2's did not finish, MiniMax-M2.5's came back cut)
            run = json.loads((data / f"{model}-{name}.json").read_text())
            assert run["status"] == ("partial" if (data.name, model, name) in PARTIAL | STOPPED else "complete")
            for lv in run["levels"]:
                assert lv["cut_short"] == ((data.name, model, name) in PARTIAL and lv is run["levels"][-1]), (model, name, lv["concurrency"])
                assert lv["server"]["prefix_cache_hit_rate"] == 0.0 and not lv["jit_kernels"], (model, name, lv["concurrency"])
                assert lv["failed_requests"] == 0 and set(lv["error_kinds"]) <= {"cancelled"}, (model, name, lv["concurrency"])  # cancelled: cut by the window's end
    assert "Intel(R) Xeon(R) Processor" in (data / "host.txt").read_text()


@pytest.mark.parametrize(("fixture", "models"), [("results", MODELS), ("results2", MODELS2), ("results3", MODELS3)])
def test_the_replay_scores_every_model_at_every_level(fixture, models, request):
    results = request.getfixturevalue(fixture)
    assert sorted(results) == list(models)
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
    assert pooled["inside_tok"] >= 90.0 and pooled["inside_ttft"] >= 80.0


@pytest.mark.parametrize("fixture", ["results", "results2"])
def test_the_hosts_floor_puts_both_sets_burst_ttft_within_fifteen_percent(fixture, request):
    """The host's time to launch a step without CUDA graphs under a burst's steps (Engine.eager_host_s; fitted on both sets'
    and every other server's lone prompts, validation/eager_host.py, so no longer blind here): pooled burst TTFT median
    22.5 → 13.4 % (the first set) and 24.3 → 10.0 % (the second)."""
    pooled = kept_back.summary([row for r in request.getfixturevalue(fixture).values() for row in r["rows"]])
    assert pooled["burst_ttft_median"] <= 15.0


def test_the_second_set_where_it_met_the_goals(results2):
    """The cut Qwen3-235B-A22B meets every held-out goal; after calibrate, the cut Qwen3-235B-A22B's and Granite's bursts are within
    15 % and their other levels within 10 %, Moonlight's bursts within 15 %. Its pooled burst TTFT median is within 25 % (34.4 %
    with the predict before the fused-MoE kernel's rate, MOE_RATE: validation/RESULTS-predict.md)."""
    s = results2["qwen3-235b-a22b-12l"]["held"]
    assert s["tok_median"] <= 8.0 and s["tok_worst"] <= 20.0 and s["single"] <= 10.0 and s["burst_ttft_median"] <= 25.0
    assert s["inside_tok"] >= 90.0 and s["inside_ttft"] >= 90.0
    for model, kinds in (("qwen3-235b-a22b-12l", ("burst", "stagger")), ("granite-3.3-8b", ("burst", "stagger")), ("moonlight-16b-a3b", ("burst",))):
        for row in results2[model]["after"]:
            if row["kind"] in kinds:
                assert abs(row["e_tok"]) <= (15.0 if row["kind"] == "burst" else 10.0), (model, row["kind"], row["c"])
    assert kept_back.summary([row for r in results2.values() for row in r["rows"]])["burst_ttft_median"] <= 25.0


def test_the_third_set_where_it_met_the_goals(results3):
    """Blind (predict frozen at cd7a670 before the data was opened): Phi-3.5-MoE, a classic wide MoE in BF16, meets every
    held-out goal; the pooled burst TTFT median is within 15 % (13.2 %). The two ~1 B-active MoE models miss (their steady state
    runs in waves; validation/RESULTS-predict.md): nothing held for them."""
    s = results3["phi-3.5-moe"]["held"]
    assert s["tok_median"] <= 8.0 and s["tok_worst"] <= 20.0 and s["single"] <= 10.0 and s["burst_ttft_median"] <= 25.0
    assert s["inside_tok"] >= 90.0 and s["inside_ttft"] >= 90.0
    assert kept_back.summary([row for r in results3.values() for row in r["rows"]])["burst_ttft_median"] <= 15.0


def test_the_fourth_set_is_scored_with_the_truth_rules_repeats_at_64_streams(results4):
    """The fourth set's 64 streams: the mean of three 60 s repeats (``long``) scored in place of the design's 30 s window, which
    is shown beside it, unscored, where the repeats ran (not Kimi-K2 cut to 4 layers: its second server did not come up within
    the device's call)."""
    assert sorted(results4) == list(MODELS4)
    for model, r in results4.items():
        long = [("long", 64)] if model != "kimi-k2-4l" else []
        levels = [("burst", c) for c in (1, 16, 64)] + [("design", c) for c in (1, 16, 64)] + [("stagger", c) for c in (4, 16, 32)] + long
        assert [(x["kind"], x["c"]) for x in r["rows"]] == levels, model
        assert [(x["kind"], x["c"]) for x in r["rows"] if not x["scored"]] == ([("design", 64)] if long else []), model


def test_the_fourth_set_where_it_met_the_goals(results4):
    """Blind (predict frozen at 2fe8e8f before the data was opened; validation/kept-back4-h200/blind-2fe8e8f.txt): Kimi-K2 cut
    to 4 layers in BF16 meets the tok/s, burst TTFT and band goals (its single stream is 15 % fast); ERNIE-4.5's shapes meet
    the worst, single-stream and burst TTFT goals (the band holds 67 % of its tok/s points since it is the truth the prediction is
    within ± b of, validation/bands.py: its steady state priced 15–19 % fast), and after calibrate its bursts are within
    15 % and its other concurrencies within 10 % (its 64-stream repeats, which calibrate's design window did not see, −13.6 %);
    Llama-3.2-1B's single stream is the host's time per step (1.90 ms measured and priced); the pooled burst TTFT median is
    within 25 % (16.7 %)."""
    kimi, ernie, llama = (results4[m]["held"] for m in ("kimi-k2-4l", "ernie-4.5-21b-a3b", "llama-3.2-1b"))
    assert kimi["tok_median"] <= 8.0 and kimi["tok_worst"] <= 20.0 and kimi["burst_ttft_median"] <= 25.0 and kimi["inside_tok"] == kimi["inside_ttft"] == 100.0
    assert ernie["tok_worst"] <= 20.0 and ernie["single"] <= 10.0 and ernie["burst_ttft_median"] <= 25.0 and ernie["inside_tok"] >= 66.0
    for row in results4["ernie-4.5-21b-a3b"]["after"]:
        if row["kind"] in ("burst", "stagger"):
            assert abs(row["e_tok"]) <= (15.0 if row["kind"] == "burst" else 10.0), (row["kind"], row["c"])
    assert llama["single"] <= 1.0
    assert kept_back.summary([row for r in results4.values() for row in r["rows"]])["burst_ttft_median"] <= 25.0


def test_the_hosts_queue_is_what_the_first_three_sets_fitted(results, results2, results3):
    """``HOST_QUEUE`` is validation/host_band.py's fit on the first three sets' 29 host-bound points (the host's time per step at
    least half the decode step's GPU time), which a change to predict that moves them must refit: κ the median one-sequence host
    steps a running stream waited over the 4 bursts (1.21; their 11 steady-state levels, all small MoE, would take 1.96: not
    shipped, the steady state takes the bursts')."""
    fitted = [r for res in (results, results2, results3) for got in res.values() for r in got["rows"] if r["scored"] and r["host_share"] >= HOST_SHARE]
    kappa, kappa_burst, levels, bursts = host_band.fit(fitted)
    assert (len(fitted), levels, bursts) == (29, 11, 4) and kappa == pytest.approx(1.96, abs=0.01) and kappa_burst == pytest.approx(HOST_QUEUE, abs=0.005)


@pytest.fixture(scope="module")
def results5():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA5)


def test_the_fifth_set_as_it_was_checked_blind(results5):
    """The fifth set, replayed: MiniMax-M2.5's cut meets the tok/s median and band goals; Qwen3-0.6B's points mostly fall inside
    the host's band; pooled, the band holds 69 % of the tok/s points and 67 % of the TTFT points (goal 90: not met; blind, at
    56a97d5, before the host-bound regime was made a ramp: 72 % and 69 %, validation/kept-back5-h200/blind-56a97d5.txt), so that
    a change that loses ground fails here."""
    assert sorted(results5) == list(MODELS5)
    minimax = results5["minimax-m2.5-8l"]["held"]
    assert minimax["tok_median"] <= 8.0 and minimax["inside_tok"] == minimax["inside_ttft"] == 100.0
    assert results5["qwen3-0.6b"]["held"]["inside_tok"] >= 85.0
    pooled = kept_back.summary([row for r in results5.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 12.6 and pooled["inside_tok"] >= 69.0 and pooled["inside_ttft"] >= 66.0


@pytest.fixture(scope="module")
def results6():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA6)


def test_the_sixth_set_as_it_was_checked_blind(results6):
    """The sixth set (an H100 host), replayed: as frozen (ca8afdb, validation/kept-back6-h100/blind-ca8afdb.txt) pooled tok/s
    median 8.5 %, burst TTFT mean median 8.7 % (the goal's 25 %: met; 42.2 % with the predict before the burst's queue,
    0ceea54), 82 % of the points inside the band on tok/s and on TTFT; SmolLM2-1.7B meets the tok/s worst and single-stream
    goals, and after ``calibrate`` both servers' bursts are within 15 %: so that a change that loses ground fails here. Since
    the host-bound steady state's floor (d525186): inside the band on tok/s 94 %, SmolLM2's worst 12.0 → 13.1 % (its 32 streams)."""
    assert sorted(results6) == list(MODELS6)
    pooled = kept_back.summary([row for r in results6.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 8.6 and pooled["burst_ttft_median"] <= 8.8 and pooled["inside_tok"] >= 94.0 and pooled["inside_ttft"] >= 82.0
    smol = results6["smollm2-1.7b"]["held"]
    assert smol["tok_worst"] <= 13.1 and smol["single"] <= 3.2
    for r in results6.values():
        assert all(abs(row["e_tok"]) <= 15.0 for row in r["after"] if row["kind"] == "burst")


@pytest.fixture(scope="module")
def results7():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA7)


def test_the_seventh_set_as_it_was_checked_blind(results7):
    """The seventh set (an H100 host), replayed: as frozen (d525186, validation/kept-back7-h100/blind-d525186.txt) pooled tok/s
    median 11.5 %, worst 22.9 %, burst TTFT mean median 40.3 %, 89 % of the points inside the band on tok/s and on TTFT
    (the predict before, f7b26be: 9.0 %, 24.8 %, 40.3 %, 89 % and 78 %); with the band of every held-out point
    (validation/bands.py), 94 % and 61 % (Qwen3-1.7B's TTFT priced 2.3–3.8 × long: no ± 57 % of it); Qwen3-30B-A3B cut meets the tok/s median and
    single-stream goals, and after ``calibrate`` both servers' bursts are within 9 %: so that a change that loses ground fails here."""
    assert sorted(results7) == list(MODELS7)
    pooled = kept_back.summary([row for r in results7.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 11.6 and pooled["tok_worst"] <= 23.0 and pooled["burst_ttft_median"] <= 40.4
    assert pooled["inside_tok"] >= 94.0 and pooled["inside_ttft"] >= 61.0
    moe = results7["qwen3-30b-a3b-16l"]["held"]
    assert moe["tok_median"] <= 7.6 and moe["single"] <= 8.8
    for r in results7.values():
        assert all(abs(row["e_tok"]) <= 9.0 for row in r["after"] if row["kind"] == "burst")


def test_calibrate_pins_the_seventh_sets_faster_host(results7, tmp_path):
    """This H100's host launched and queued about twice as fast as the machines predict's host terms were measured on
    (validation/RESULTS-predict.md, "A host that calibrate pins"): ``servelab calibrate`` on Qwen3-1.7B's design run fits a host
    scale near 0.6, its interval clear of 1, and that server's other steady-state levels come within 7 % on tok/s and 17 % on
    TTFT (without the host's scale: 14.0 % and 279 % worst, the 4 to 32 streams' TTFT priced 2.3 to 3.8 × the measured; 5 % on
    TTFT before the efficiencies' σ was narrowed on Hopper, 2e7720a: its 32 streams' TTFT now −16 %)."""
    own = kept_back.cc.calibrated(DATA7 / "qwen3-1.7b-calibrate-run.json", "qwen3-1.7b", tmp_path / "own.yaml", "h100-sxm")
    (fitted,) = yaml.safe_load(Path(own).read_text()).values()
    assert 0.5 <= fitted["host_scale"] <= 0.7 and fitted["uncertainty"]["host_scale"][1] < 1.0
    others = [row for row in results7["qwen3-1.7b"]["after"] if row["kind"] != "burst"]
    assert len(others) == 3 and all(abs(row["e_tok"]) <= 7.0 for row in others)
    assert max(abs(row["e_ttft"]) for row in others) <= 17.0


def test_calibrate_leaves_the_host_scale_where_no_design_level_is_host_bound(tmp_path):
    """DeepSeek-V2-Lite on an H200 (validation/calibrate-h200/server1/): no design level beyond one stream is host-bound, so the
    levels cannot tell the host's speed from the MLA steady state's own misfit; fitted anyway, the scale went to 1.9 and the
    server's bursts 12–22 % slow. It stays 1, without an interval."""
    run = kept_back.cc.ROOT / "validation" / "calibrate-h200" / "server1" / "deepseek-v2-lite-calibrate-run.json"
    (fitted,) = yaml.safe_load(Path(kept_back.cc.calibrated(run, "deepseek-v2-lite", tmp_path / "own.yaml", "h200")).read_text()).values()
    assert fitted["host_scale"] == 1.0 and "host_scale" not in fitted["uncertainty"] and "bw_efficiency" in fitted["uncertainty"]


def test_calibrate_keeps_the_gpus_efficiencies_where_the_steady_state_cannot_tell_them(results3, results4, tmp_path):
    """GLM-4.5-Air cut to 16 layers (the third set) and Kimi-K2 cut to 4 (the fourth), MoE models on H200s where the host binds no
    design level: their 64-stream steady state ran slower than predict prices its steps with prompts, which the wide prior on
    η_c (σ 0.3) took for slow matrix products (GLM: η_c 0.74 → 0.27) and then priced their bursts' prefill 22 and 21 % slow. With
    the efficiencies' σ on the prior's own GPU generation (fit.prior_widths: 0.08 and 0.1 on Hopper) η_c stays above 0.4, their
    bursts come within 10 % and their other steady-state levels within 8 % (validation/RESULTS-predict.md, "The efficiencies are
    the GPU's")."""
    own = kept_back.cc.calibrated(DATA3 / "glm-4.5-air-16l-calibrate-run.json", "glm-4.5-air-16l", tmp_path / "glm.yaml", "h200")
    (fitted,) = yaml.safe_load(Path(own).read_text()).values()
    assert fitted["compute_efficiency"] >= 0.4
    for res, model in ((results3, "glm-4.5-air-16l"), (results4, "kimi-k2-4l")):
        for row in res[model]["after"]:
            assert abs(row["e_tok"]) <= (10.0 if row["kind"] == "burst" else 8.0), (model, row["kind"], row["c"])


@pytest.fixture(scope="module")
def results8():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA8)


def test_the_eighth_set_as_it_was_checked_blind(results8):
    """The eighth set (two dense models on an H100 host, one job on it), replayed: as opened (eda5322,
    validation/kept-back8-h100/blind-eda5322.txt) pooled tok/s median 5.5 %, worst 14.9 %, single stream 5.0 %, burst TTFT mean
    median 19.7 %: the first set to meet those four goals; inside the band 94 % on tok/s and 61 % on TTFT (Llama-3.2-3B's steady-state
    TTFT priced 1.8–4.4 × long: this host queued faster); after ``calibrate`` both servers' bursts are within 5 % and their other
    levels within 4.5 % (Llama-3.2-3B's host scale 0.79, its TTFT within 15 %; Mistral-7B's 16 streams 3.9 → 4.1 % with the
    efficiencies' σ on Hopper, fit.prior_widths): so that a change that loses ground fails here."""
    assert sorted(results8) == list(MODELS8)
    pooled = kept_back.summary([row for r in results8.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 5.6 and pooled["tok_worst"] <= 15.0 and pooled["single"] <= 5.1 and pooled["burst_ttft_median"] <= 19.8
    assert pooled["inside_tok"] >= 94.0 and pooled["inside_ttft"] >= 61.0
    for r in results8.values():
        assert all(abs(row["e_tok"]) <= (5.0 if row["kind"] == "burst" else 4.5) for row in r["after"])
    assert max(abs(row["e_ttft"]) for row in results8["llama-3.2-3b"]["after"]) <= 15.0


@pytest.fixture(scope="module")
def results9():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA9)


def test_the_ninth_set_as_it_was_checked_blind(results9):
    """The ninth set (DeepSeek-V3 cut to 5 layers and Gemma-2-9B on a fourth H100 host, one job on it), replayed: as opened
    (2e7720a, validation/kept-back9-h100/blind-2e7720a.txt) the DeepSeek-V3 cut meets every held-out goal (tok/s median 2.7 %,
    worst 6.7 %, single stream 1.3 %, burst TTFT mean median 21.0 %, inside the band 100 % and 100 %; its 64 streams scored as the
    truth rule's three 60 s repeats); pooled over both, tok/s median 2.8 %, worst 18.2 %, single stream 3.6 %, burst TTFT 20.9 %;
    the band holds 78 % of the tok/s points and 83 % of the TTFT ones (Gemma-2-9B's steady state at 16–64 streams priced 9–18 %
    fast, outside the dense ± 9 %); after ``calibrate`` both servers' bursts and other levels are within 8.9 % (with the servers' cohorts
    measured, ``Calibration.mixed_share``: Gemma-2-9B's bursts 8.3 → 8.9 %, its other levels 9.3 → 8.9 %)."""
    assert sorted(results9) == list(MODELS9)
    deepseek = results9["deepseek-v3-5l"]["held"]
    assert deepseek["tok_median"] <= 2.8 and deepseek["tok_worst"] <= 6.8 and deepseek["single"] <= 1.4 and deepseek["burst_ttft_median"] <= 21.1
    assert deepseek["inside_tok"] == deepseek["inside_ttft"] == 100.0
    assert [(x["kind"], x["c"]) for x in results9["deepseek-v3-5l"]["rows"] if not x["scored"]] == [("design", 64)]  # the repeats stand for it
    pooled = kept_back.summary([row for r in results9.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 2.9 and pooled["tok_worst"] <= 18.3 and pooled["single"] <= 3.7 and pooled["burst_ttft_median"] <= 21.0
    assert pooled["inside_tok"] >= 77.0 and pooled["inside_ttft"] >= 83.0
    for r in results9.values():
        assert all(abs(row["e_tok"]) <= 9.1 for row in r["after"])


@pytest.fixture(scope="module")
def results10():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA10)


def test_the_tenth_set_as_it_was_checked_blind(results10):
    """The tenth set (Mixtral-8x22B cut to 8 layers and OLMo-2-13B on a further H100 host, one job on it), replayed: as opened
    (f1b4a5b, validation/kept-back10-h100/blind-f1b4a5b.txt), the first blind check of the band held out by model, both models
    meet every held-out goal (pooled tok/s median 4.1 %, worst 8.4 %; single stream 5.2 % and 6.5 %; burst TTFT mean median 12.8 %
    and 4.5 %) and every point, tok/s and TTFT, lies inside its band; Mixtral's 64 streams are scored as the truth rule's three
    60 s repeats; after ``calibrate`` both servers' bursts are within 4 % and their other levels within 4.3 % (with the servers'
    cohorts measured, ``Calibration.mixed_share`` 0.47 and 0.46: OLMo-2-13B's bursts 2.1 → 3.6 %)."""
    assert sorted(results10) == list(MODELS10)
    # per model: tok/s median and worst, single stream, burst TTFT median (as opened), then after calibrate: bursts, other levels
    expected = {"mixtral-8x22b-8l": (4.2, 8.5, 5.3, 12.9, 4.1, 4.5), "olmo-2-13b": (4.3, 5.9, 6.6, 4.6, 4.1, 1.6)}
    for model, (median, worst, single, burst_ttft, bursts, others) in expected.items():
        held = results10[model]["held"]
        assert held["tok_median"] <= median and held["tok_worst"] <= worst and held["single"] <= single and held["burst_ttft_median"] <= burst_ttft, model
        assert held["inside_tok"] == held["inside_ttft"] == 100.0, model
        assert all(abs(row["e_tok"]) <= (bursts if row["kind"] == "burst" else others) for row in results10[model]["after"]), model
    assert [(x["kind"], x["c"]) for x in results10["mixtral-8x22b-8l"]["rows"] if not x["scored"]] == [("design", 64)]  # the repeats stand for it
    pooled = kept_back.summary([row for r in results10.values() for row in r["rows"]])
    assert pooled["tok_median"] <= 4.2 and pooled["tok_worst"] <= 8.5 and pooled["burst_ttft_median"] <= 7.3


@pytest.fixture(scope="module")
def results11():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA11)


def test_the_eleventh_set_as_it_was_checked_blind_and_its_void_truth(results11):
    """The eleventh set (Aya-Expanse-8B's shapes and dots.llm1 cut to 8 layers, both read as a generic decoder, on a further
    H100 host), replayed: as opened (5d976b3, validation/kept-back11-h100/blind-5d976b3.txt) Aya meets every held-out goal (tok/s
    median 3.4 %, worst 6.3 %; single stream 7.6 %; burst TTFT mean median 11.1 %; every point inside its band; after
    ``calibrate`` within 3.3 / 3.6 %). dots.llm1 was priced 55 % slow from 16 streams up, against a void truth: vLLM 0.25 ran it
    on its Transformers backend and the routing simulator sent every token to experts 0-5 (finding void_routing_simulation, in
    both of its boot logs), so none of its points is scored, and without that rule its tok/s points would miss the band."""
    assert sorted(results11) == list(MODELS11)
    aya = results11["aya-expanse-8b"]["held"]
    assert aya["tok_median"] <= 3.5 and aya["tok_worst"] <= 6.4 and aya["single"] <= 7.7 and aya["burst_ttft_median"] <= 11.2
    assert aya["inside_tok"] == aya["inside_ttft"] == 100.0
    assert all(abs(row["e_tok"]) <= (3.4 if row["kind"] == "burst" else 3.7) for row in results11["aya-expanse-8b"]["after"])
    assert kept_back.void("dots-llm1-8l", DATA11) and not kept_back.void("aya-expanse-8b", DATA11)
    dots = results11["dots-llm1-8l"]
    assert dots["held"] is None and "after" not in dots and not any(row["scored"] for row in dots["rows"])
    assert sum(row["in_tok"] for row in dots["rows"]) == 3 and min(row["e_tok"] for row in dots["rows"]) < -60  # as opened: 3 of its 10 rows inside on tok/s
    assert all(not row["void"] for got in results11.values() for row in got["rows"] if row["scored"])


@pytest.fixture(scope="module")
def results12():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA12)


def test_the_twelfth_set_after_it_was_checked_blind(results12):
    """The twelfth set (AFMoE in vLLM's AfmoeConfig shapes and FlexOlmo-7x7B's shapes cut to 16 layers, MoE model_types read as a
    generic decoder, native in vLLM 0.25; a further H100 host), replayed. As opened (4a20434, validation/kept-back12-h100/blind-4a20434.txt)
    AFMoE had 8 of 9 points inside and FlexOlmo 7 of 9: FlexOlmo's 32 and 64 streams priced 20 % fast, its steps ~10 ms longer
    than at 16 streams, where vLLM's default fused-MoE tiles read its 11,008-wide experts' gate-up matrices again per tile
    (servelab.engines.vllm_moe, modelled after opening). Now FlexOlmo's tok/s are within 3.0 % median, 17.7 % worst (its single
    stream, which the routing simulator's draws with replacement make faster than a router's distinct experts), every point inside;
    AFMoE's 64 streams stay priced 36 % fast (its steps with a prompt, without CUDA graphs, ~50 ms, rode one prompt a step where
    predict assumes two), its other points within 8 %. After ``calibrate``, which measures that (``Calibration.mixed_share`` 0.46),
    AFMoE's bursts are within 5.4 % and its other levels within 10.2 % (its 64-stream repeats +7.1 %; 1.2 % and 17.3 % before,
    its 64 streams +15.6 %)."""
    assert sorted(results12) == list(MODELS12)
    # per model: tok/s median and worst, single stream, burst TTFT median, inside on tok/s (%), then after calibrate: bursts, other levels
    expected = {"afmoe": (4.3, 36.4, 3.3, 15.6, 88, 5.4, 10.2), "flex-olmo-16l": (3.0, 17.7, 23.7, 10.7, 100, 11.6, 6.4)}
    for model, (median, worst, single, burst_ttft, inside, bursts, others) in expected.items():
        held = results12[model]["held"]
        assert held["tok_median"] <= median + 0.05 and held["tok_worst"] <= worst + 0.05 and held["single"] <= single + 0.05, model
        assert held["burst_ttft_median"] <= burst_ttft + 0.05 and held["inside_tok"] >= inside and held["inside_ttft"] == 100.0, model
        assert all(abs(row["e_tok"]) <= (bursts if row["kind"] == "burst" else others) + 0.05 for row in results12[model]["after"]), model
    long = next(row for row in results12["afmoe"]["rows"] if row["kind"] == "long")
    assert long["e_tok"] > 30 and not long["in_tok"]  # still missed: AFMoE's 64 streams
    after = next(row for row in results12["afmoe"]["after"] if row["kind"] == "long")
    assert abs(after["e_tok"]) < 7.5  # after calibrate, with its cohorts measured (+15.6 % without them)
    flex = [row for row in results12["flex-olmo-16l"]["rows"] if row["scored"] and row["c"] >= 32]
    assert len(flex) == 3 and all(abs(row["e_tok"]) < 8 for row in flex)  # 32 and 64 streams, priced 20 % fast as opened
    assert not any(kept_back.void(m, DATA12) for m in MODELS12)


def test_every_class_band_holds_ninety_percent_of_its_points_held_out_by_model(results, results2, results3, results4, results5, results6, results7, results8, results9, results10, results11, results12, results13, results14, results15):
    """servelab/data/bands.yaml's dense, MoE, MLA and host bands are validation/bands.py's: the least quantile of the class's
    held-out errors (the cold tables, the MLA models held out by model, and the fifteen kept-back sets' points, each under its
    model's class or, where the host binds it, the host's) that, each model held out in turn, covers ≥ 90 % of the held-out
    model's points, rounded up to a whole %, so that a change to predict that moves them must refit them. The dense band was
    6 % / 20 % from the cold tables alone: the kept-back sets' dense points fell inside it 61 % / 48 % of the time; the eighth
    and ninth sets, checked blind against the 90th percentile of the first seven's (94 % / 61 % and 78 % / 83 % inside), were
    then added (dense 9 / 24 → 11 / 28 %); the 90th percentile of every point covered, held out by model, only 86.9 % of the
    dense tok/s points (then the 93rd: 15 %); the tenth, checked blind against that band (100 % / 100 % inside), was added too
    (dense 14 / 28 %), and the eleventh's Aya-Expanse-8B (9 of 9 inside; its dots.llm1 a void truth, not scored): the dense
    tok/s errors have a gap from 10.6 to 13.4 %, and its nine points moved the 93rd percentile across it (dense 11 / 28 %); the
    twelfth's AFMoE and FlexOlmo (15 of 18 inside on tok/s as opened, FlexOlmo then priced with the default fused-MoE tiles) joined the
    MoE class (19 → 18 % on tok/s); the thirteenth's Laguna (MoE, its one and four streams host-bound) and Minitron-8B's shapes
    (dense, read as nemotron since it was opened) took the dense band to 14 / 30 % (Minitron's 16 streams priced 15-22 % fast) and
    MoE's TTFT band to 52 %; the fourteenth's A.X K1 cut (MLA) and HY V3 cut (MoE), 14 of 15 points inside as opened (the one outside a burst with a JIT
    compile in its window, unscored since), took the
    MLA tok/s band from 28 to 17 % (the held-out quantile from the 92nd to the 90th) and the host's to 25 / 80 %; the fifteenth's
    Moonlight, again and alone on its host (6 of 6 inside on tok/s, 4 of 6 on TTFT), moved none."""
    kept = [{**r, "model": m} for res in (results, results2, results3, results4, results5, results6, results7, results8, results9, results10, results11, results12, results13, results14, results15) for m, got in res.items() for r in got["rows"] if r["scored"]]
    shipped = yaml.safe_load((kept_back.cc.ROOT / "src" / "servelab" / "data" / "bands.yaml").read_text())
    out = bands.bands(kept)
    assert {name: b["models"] for name, b in out.items()} == {"dense": 13, "moe": 15, "mla": 7, "host": 24}
    # the README's figures: the kept-back points alone inside the shipped bands (%), and the dense and MoE bands without the
    # calibrations' own models (Qwen3-8B, Qwen3-30B-A3B; %)
    assert {name: (round(100 * b["kept_tok_s"]), round(100 * b["kept_ttft"])) for name, b in out.items()} == {"dense": (88, 87), "moe": (89, 94), "mla": (91, 85), "host": (92, 92)}
    assert [round(100 * out[name][f"own_{key}"], 1) for name in ("dense", "moe") for key in ("tok_s", "ttft")] == [10.6, 30.5, 16.5, 51.1]
    for name, b in out.items():
        assert shipped[name]["points"] == b["points"], name
        assert b["tok_s"] <= shipped[name]["tok_s"] < b["tok_s"] + 0.01 and b["ttft"] <= shipped[name]["ttft"] < b["ttft"] + 0.01, name
        assert b["cover_tok_s"] >= 0.9 and b["cover_ttft"] >= 0.9 and b["q_tok_s"] >= 0.9 and b["q_ttft"] >= 0.9, name
        assert f"{b['models']} models" in shipped[name]["evidence"], name


@pytest.fixture(scope="module")
def results13():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA13)


def test_the_thirteenth_set_after_it_was_checked_blind(results13):
    """The thirteenth set (Laguna in vLLM's LagunaConfig shapes cut to 24 layers: 256 experts of 512, top 8, a shared one; and
    Minitron-8B's shapes, nemotron; a further H100 host), replayed. As opened (df0d602, validation/kept-back13-h100/blind-df0d602.txt)
    its 15 points missed: tok/s median 16.5 %, worst 27.5 %. Minitron was read as a generic decoder with a gated MLP (10.42 B
    parameters) where its squared-ReLU MLP has two matrices (8.27 B): priced 13-20 % slow from 1 to 4 streams and in every burst.
    Read as nemotron now (servelab.plan.families), its bursts are within 1.5 % and its single stream 2.3 %; its 16-stream steady
    state stays priced 15-22 % fast (its steps with a prompt, without CUDA graphs, ~29 ms against ~16 priced). Laguna's single
    stream is priced 10-12 % short and its 64-stream steady state 27.5 % fast (its steps with a prompt 40-58 ms, about the host's
    floor with its 23 MoE layers' launches, which the steady state prices without them). After calibrate on its design, whose
    16 streams ran in waves (5.33 prompts a step) and are fitted with their own cohorts, Laguna's bursts are within 5 % and its
    other levels 4.2 % (29.3 / 22.0 % when that level was fitted as predict's cohorts)."""
    assert sorted(results13) == list(MODELS13)
    assert all(abs(row["e_tok"]) <= (5.1 if row["kind"] == "burst" else 4.3) for row in results13["laguna-24l"]["after"])
    # per model: tok/s median and worst, single stream, burst TTFT median, inside on tok/s (%)
    expected = {"laguna-24l": (16.5, 27.5, 10.5, 25.1, 85), "minitron-8b": (3.9, 21.6, 2.3, 16.6, 75)}
    for model, (median, worst, single, burst_ttft, inside) in expected.items():
        held = results13[model]["held"]
        assert held["tok_median"] <= median + 0.05 and held["tok_worst"] <= worst + 0.05 and held["single"] <= single + 0.05, model
        assert held["burst_ttft_median"] <= burst_ttft + 0.05 and held["inside_tok"] >= inside, model
    bursts = [row for row in results13["minitron-8b"]["rows"] if row["kind"] == "burst"]
    assert len(bursts) == 3 and all(abs(row["e_tok"]) < 2 for row in bursts)  # 17-18 % slow as opened
    long = next(row for row in results13["laguna-24l"]["rows"] if row["kind"] == "long")
    assert long["e_tok"] > 25 and not long["in_tok"]  # still missed: Laguna's 64 streams
    assert load_model(str(kept_back.cc.ROOT / "validation/configs/minitron-8b")).total_params == pytest.approx(8.27e9, rel=0.005)
    assert not any(kept_back.void(m, DATA13) for m in MODELS13)


@pytest.fixture(scope="module")
def results14():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA14)


def test_the_fourteenth_set_checked_blind(results14):
    """The fourteenth set (A.X K1 in vLLM's AXK1Config shapes cut to 4 layers: MLA, 192 experts of 2,048, top 8, a shared one; and
    HY V3 in vLLM's HYV3Config shapes cut to 8 layers: 192 experts of 1,536, top 8, a shared one; neither with a tuned fused-MoE
    config on the H100; a further H100 host), opened blind at c80af28 (validation/kept-back14-h100/blind-c80af28.txt) after servelab
    read HY V3's expert width from its config (expert_hidden_dim), before any of its measurements was looked at: 14 scored points
    (HY V3's 16-stream burst had a Triton JIT compile in its window: shown, not scored), tok/s median 3.9 %, worst 10.5 %, burst TTFT
    median 18.4 %, every point inside the band; after calibrate on its design, A.X K1's bursts within 7.3 % and its other steady-state
    levels 2.8 %. HY V3 was served without calibrate's design (servelab read it as not fitting when it was measured): no one-stream
    steady state, no after-calibrate check."""
    assert sorted(results14) == list(MODELS14)
    expected = {"axk1-4l": (3.7, 7.6, 1.9, 18.4), "hy-v3-8l": (5.8, 10.5, math.nan, 21.4)}  # tok/s median, worst, single stream, burst TTFT median (%)
    for model, (median, worst, single, burst_ttft) in expected.items():
        held = results14[model]["held"]
        assert held["tok_median"] <= median + 0.05 and held["tok_worst"] <= worst + 0.05 and held["inside_tok"] == held["inside_ttft"] == 100, model
        assert held["burst_ttft_median"] <= burst_ttft + 0.05 and (math.isnan(held["single"]) if math.isnan(single) else held["single"] <= single + 0.05), model
    jit = [row for row in results14["hy-v3-8l"]["rows"] if row["jit"]]
    assert [(row["kind"], row["c"], row["scored"]) for row in jit] == [("burst", 16, False)]
    after = results14["axk1-4l"]["after"]
    assert max(abs(r["e_tok"]) for r in after if r["kind"] == "burst") <= 7.35 and max(abs(r["e_tok"]) for r in after if r["kind"] != "burst") <= 2.85
    assert "after" not in results14["hy-v3-8l"] and not any(kept_back.void(m, DATA14) for m in MODELS14)


@pytest.fixture(scope="module")
def results15():
    with contextlib.redirect_stdout(io.StringIO()):
        return kept_back.main(DATA15)


def test_the_fifteenth_set_checked_blind(results15, results2):
    """The fifteenth set: the second set's Moonlight-16B-A3B (MLA, 64 experts of 1,408, top 6, 2 shared; no tuned fused-MoE config),
    whose held-out worst there (55.5 %, its design's 64 streams) was measured while three other servers shared the host's CPUs,
    measured again one job on a further H100 host by the same protocol (chosen at 1b1e7a2; the steady state at 4 streams cut by the
    device call's end, not scored) and opened blind at ac47d6c (validation/kept-back15-h100/blind-ac47d6c.txt): 6 points, tok/s
    median 7.2 %, worst 13.2 % (its 64 streams +13.2 % against +55.5 % on the shared H200 host, whose TPOT there was 24.6 ms against
    this H100's 17.1: by this one run, that worst was the shared host's), single stream 5.2 %, every point inside the tok/s band; its
    burst TTFT is priced short (median 28.3 %, above the goal's 25 %; 4 of 6 points inside the TTFT band). After calibrate on its
    design, its bursts within 7.3 %."""
    held = results15["moonlight-16b-a3b"]["held"]
    assert held["tok_median"] <= 7.25 and held["tok_worst"] <= 13.25 and held["single"] <= 5.25 and held["inside_tok"] == 100
    assert 28 <= held["burst_ttft_median"] <= 28.35 and round(held["inside_ttft"]) == 67  # still missed: its burst TTFT (1 and 64 streams priced short)
    design64 = {k: next(r["e_tok"] for r in res["moonlight-16b-a3b"]["rows"] if (r["kind"], r["c"]) == ("design", 64)) for k, res in (("shared", results2), ("alone", results15))}
    assert design64["shared"] > 50 and design64["alone"] < 13.25
    after = results15["moonlight-16b-a3b"]["after"]
    assert [r["kind"] for r in after] == ["burst"] * 3 and max(abs(r["e_tok"]) for r in after) <= 7.35
    assert not kept_back.void("moonlight-16b-a3b", DATA15)


def test_the_band_is_taken_from_every_kept_back_set():
    """Every kept-back folder under validation/ is among the band's held-out points (validation/bands.py ``SETS``), so that an
    eleventh set, once measured and checked blind, is not left out of the band by mistake."""
    assert {p.name for p in (kept_back.cc.ROOT / "validation").glob("kept-back*") if p.is_dir()} == set(bands.SETS)


def test_the_band_takes_the_quantile_that_covers_a_held_out_model():
    """bands.band on made-up errors: three models whose errors (1–10 %) the 90th percentile of the others' covers 90 % of, beside
    a fourth whose errors (5–14 %) sit above them, so that, held out by model, the 90th percentile of every point covers only
    87.5 % and the band takes the 91st; a model's cuts and runs go out together (bands.family)."""
    even = [(m, e / 100) for m in ("a", "b", "c") for e in range(1, 11)]
    assert bands.band(even) == (0.09, 0.9, 0.9)
    high = [*even, *[("d", e / 100) for e in range(5, 15)]]
    assert bands.held_out_cover(high, 0.9) == 0.875 and bands.band(high) == (0.11, 0.91, 0.9)
    assert {bands.family(m) for m in ("kimi-k2-6l", "kimi-k2-4l", "kimi-k2")} == {"kimi-k2"} and bands.family("mixtral-8x7b-repeats3") == "mixtral-8x7b"
    assert bands.family("deepseek-v3-5l-fp8") == "deepseek-v3" and bands.family("qwen3-30b-a3b-16l") == "qwen3-30b-a3b"
    apart = ("qwen3-8b", "qwen3-14b", "deepseek-v2", "deepseek-v2-lite", "glm-4-9b", "glm-4.5-air-16l", "mixtral-8x7b", "mixtral-8x22b-8l")
    assert len({bands.family(m) for m in apart}) == len(apart)  # other models stay apart
    # d against the others' 90th percentile (9 %): 5 of its 10 points; a, b and c, held out with d among the others, are covered only
    # at the 100th (14 %): the band's coverage with its level chosen without the held-out model is 35 of 40
    assert bands.inside(high, 0.9)["d"] == (5, 10) and bands.nested_cover(high) == 0.875
