"""Issue 53's held-out check on architectures no calibration had seen (validation/predict_arch.py,
validation/arch-h200-x4/): the MLA class's band covers its held-out points, the shipped MLA layer
times are the fit on every MLA run, and calibrate's prior keeps a short design off its range edges."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import predict_arch  # noqa: E402

from servelab.plan.band import band_for  # noqa: E402
from servelab.plan.calibration import BW_RANGE, COMPUTE_RANGE, calibration  # noqa: E402
from servelab.plan.fit import PRIOR_WIDTH, fit, fit_mla, prior_widths  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402


@pytest.fixture(scope="module")
def results():
    with contextlib.redirect_stdout(io.StringIO()):
        return predict_arch.main()


def test_the_mla_band_covers_ninety_percent_of_the_held_out_points(results):
    band = band_for(load_model(str(ROOT / "validation/configs/deepseek-v3-8l")), "fp8-block")
    tok = [v for m, r in results.items() if m in predict_arch.MLA for v in r["held"]["tok_s"]]
    ttft = [v for m, r in results.items() if m in predict_arch.MLA for v in r["held"]["ttft"]]
    assert band.points > len(tok) >= 10  # and the kept-back sets' MLA points (validation/bands.py)
    assert sum(v <= 100 * band.tok_s for v in tok) >= math.ceil(0.9 * len(tok))
    assert sum(v <= 100 * band.ttft for v in ttft) >= math.ceil(0.9 * len(ttft))


def test_held_out_by_model_the_mla_models_and_the_new_dense_family_are_within_ten_percent_median(results):
    import statistics

    for model in ("kimi-k2-6l", "deepseek-v3-8l", "phi-4", "gpt-oss-20b"):  # gpt-oss-20b's bursts 19 % median without the MoE kernel's rate (MOE_RATE)
        assert statistics.median(results[model]["held"]["tok_s"]) <= 10.0, model
    # DeepSeek-V2-Lite: 12.8 % median, its worst 17.7 % (26.5 without the MoE kernel's rate); its steady state at 4 and 16 streams
    # is predicted 10–11 % fast (its steps that carry prompts: RESULTS-predict.md). With the host's floor under a burst's steps
    # without CUDA graphs (Engine.eager_host_s) its TTFT median went 46 → 31 % and its tok/s median 10.5 → 12.8 %: its lone
    # prompts' steps now take their measured time, and its single-stream decode (25.7 % slow, the MLA layer time fitted on the
    # cut models) weighs more in its 1–16-stream bursts
    held = results["deepseek-v2-lite"]["held"]
    assert statistics.median(held["tok_s"]) <= 13.0 and max(held["tok_s"]) <= 20.0 and statistics.median(held["ttft"]) <= 35.0
    assert max(results["phi-4"]["held"]["tok_s"]) <= 15.0 and max(results["phi-4"]["held"]["single"]) <= 2.0


def test_the_shipped_mla_layer_times_are_the_fit_on_every_mla_run():
    whole = fit_mla([m for name in predict_arch.MLA if predict_arch.present(name) for m in predict_arch.steady(name)], predict_arch.shipped())
    shipped = calibration("vllm-0.25-h100-bf16")
    assert (whole.mla_layer_us, whole.mla_eager_layer_ms) == (shipped.mla_layer_us, shipped.mla_eager_layer_ms)


def test_the_prior_keeps_a_three_level_design_off_the_range_edges():
    """DeepSeek-V2-Lite's steady state at the design's 1, 16 and 64 streams: alone, the fit sits on an
    edge of a range; with the shipped calibration as its prior (and calibrate's σ on an H200) it does not, and every interval
    holds its value."""
    from servelab.plan.hardware import load_hardware

    rows = [m for m in predict_arch.steady("deepseek-v2-lite") if m.concurrency in predict_arch.DESIGN]
    prior = calibration("vllm-0.25-h100-bf16")
    alone, pulled = fit(rows, "alone", "t"), fit(rows, "pulled", "t", prior, prior_widths(load_hardware("h200"), prior))  # as calibrate fits it on an H200
    assert alone.bw_efficiency in BW_RANGE or alone.compute_efficiency in COMPUTE_RANGE or alone.eager_step_ms == 0.0
    assert pulled.bw_efficiency not in BW_RANGE and pulled.compute_efficiency not in COMPUTE_RANGE
    for key, (lo, hi) in pulled.uncertainty.items():
        assert lo <= getattr(pulled, key) <= hi, key


def test_calibrate_pulls_the_efficiencies_harder_on_the_gpu_the_prior_was_measured_on():
    """fit.prior_widths: on Hopper (H100, H200: the GPUs vllm-0.25-h100-bf16 was measured and held out on) the efficiencies' σ
    is 0.08 (η_bw) and 0.1 (η_c); on a GB10 or a Blackwell card the prior's efficiencies are another GPU's (vllm-dgx-spark's
    0.61 / 0.47 against 0.86 / 0.74) and stay wide, 0.15 and 0.3. A calibration fitted on a GB10 (calibrate's on a Spark:
    ``Calibration.gpu``), or off CUDA (its hardware's name), is narrow there and wide on Hopper, as tune's refit with it as the prior fits."""
    from servelab.plan.hardware import load_hardware

    shipped = calibration("vllm-0.25-h100-bf16")
    narrow = {**PRIOR_WIDTH, "bw_efficiency": 0.08, "compute_efficiency": 0.1}
    for name in ("h100-sxm", "h200"):
        widths = prior_widths(load_hardware(name), shipped)
        assert (widths["bw_efficiency"], widths["compute_efficiency"]) == (0.08, 0.1) and widths["eager_scale"] == PRIOR_WIDTH["eager_scale"]
    for name in ("dgx-spark", "b200"):
        assert prior_widths(load_hardware(name), shipped) == PRIOR_WIDTH
    for name in ("dgx-spark", "ryzen-ai-max-395"):
        mine = shipped.model_copy(update={"gpu": load_hardware(name).generation})  # as calibrate writes it there
        assert prior_widths(load_hardware(name), mine) == narrow and prior_widths(load_hardware("h100-sxm"), mine) == PRIOR_WIDTH
    assert load_hardware("ryzen-ai-max-395").generation == load_hardware("ryzen-ai-max-395").name and calibration("vllm-dgx-spark").gpu is None


def test_calibrate_scales_the_eager_times_and_then_predicts_the_servers_other_loads():
    """servelab calibrate --url on gpt-oss-20b (one H200, validation/calibrate-h200/server3/): its design (1, 16, 64 streams)
    with the shipped prior scales every time a step without CUDA graphs pays (t_eager and the MoE layer's) by one factor;
    the same server's steady state at 4 and 32 streams then within 10 %, and its bursts within 15 % (issue 53's goals)."""
    from servelab.cli.predict import read_run
    from servelab.plan.fit import measured_levels
    from servelab.plan.hardware import load_hardware
    from servelab.plan.limits import limits_for
    from servelab.plan.predict import predict
    from servelab.plan.terms import terms
    from servelab.plan.quant import get_format

    server, spec = ROOT / "validation/calibrate-h200/server3", load_model(str(ROOT / "validation/configs/gpt-oss-20b"))
    fmt, hw, prior = get_format("bf16"), load_hardware("h200"), calibration("vllm-0.25-h100-bf16")
    cal = fit(measured_levels(read_run(server / "gpt-oss-20b-calibrate-run.json"), spec, fmt, hw), "mine", "t", prior, prior_widths(hw, prior))
    scale = cal.moe_eager_layer_ms / prior.moe_eager_layer_ms
    assert scale < 0.9 and cal.eager_step_ms == pytest.approx(scale * prior.eager_step_ms, abs=0.002)
    assert cal.bw_efficiency not in BW_RANGE
    for lv in measured_levels(read_run(server / "gpt-oss-20b-stagger-run.json"), spec, fmt, hw):
        got = predict(lv.terms, cal, concurrency=lv.concurrency, output_tokens=lv.output_tokens)
        assert abs(got.aggregate_tok_s / lv.tok_s - 1) <= 0.10, lv.concurrency
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=128)
    assert max(limits.capture_sizes) == 1024  # vLLM raises gpt-oss's largest capture size (its boot log: 1024)
    for lv in json.loads((server / "gpt-oss-20b-bursts.json").read_text())["levels"]:
        assert lv["total_input_tokens"] == 512 * lv["completed"]  # /v1/completions: no chat template
        t = terms(spec, fmt, hw, concurrency=lv["concurrency"], input_tokens=512, output_tokens=128, limits=limits, mode="burst")
        got = predict(t, cal, concurrency=lv["concurrency"], output_tokens=128)
        assert abs(got.aggregate_tok_s / lv["output_throughput"] - 1) <= 0.15, lv["concurrency"]
