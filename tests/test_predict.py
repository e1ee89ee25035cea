"""servelab predict: the model's effects (servelab/plan/predict.py), its calibration fit, its measured
error on the real vLLM runs in the repository (validation/predict_loo.py), and the CLI."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines import plan_engine
from servelab.engines.vllm_moe import MOE_RATE
from servelab.errors import ServelabError
from servelab.plan.band import band_for
from servelab.plan.calibration import Calibration, calibration
from servelab.plan.fit import Measured, fit, fit_moe, measured_levels, measured_share, prior_widths
from servelab.plan.holdout import leave_one_out
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.limits import limits_for
from servelab.plan.cohorts import MIXED_SHARE, cohorts, host_weight, recohorted, waved
from servelab.plan.predict import predict
from servelab.plan.terms import terms
from servelab.plan.quant import get_format
from servelab.plan.roofline import expert_flops

ROOT = Path(__file__).resolve().parent.parent
cli = CliRunner()


def _curve(model, quant, levels, *, cal=None, mode="stagger", **limits_kw):
    spec, fmt, hw = load_model(model), get_format(quant), load_hardware("h100-sxm")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=1024, output_tokens=256, **limits_kw)
    ts = [terms(spec, fmt, hw, concurrency=c, input_tokens=1024, output_tokens=256, limits=limits, mode=mode) for c in levels]
    cal = cal or calibration("vllm-0.25-h100-bf16")
    return ts, [predict(t, cal, concurrency=c, output_tokens=256) for t, c in zip(ts, levels)]


def test_the_curve_bends_where_the_scheduler_says():
    _, pts = _curve("qwen3-8b", "bf16", [1, 8, 64, 256, 512], max_num_seqs=256)
    per_stream = [1 / p.tpot_s for p in pts]
    assert per_stream == sorted(per_stream, reverse=True)  # more streams, slower each
    agg = [p.aggregate_tok_s for p in pts]
    assert agg[:4] == sorted(agg[:4]) and agg[4] == pytest.approx(agg[3], rel=0.05)  # flat above the slot cap
    assert pts[0].bottleneck == "bandwidth" and pts[3].bottleneck == "prefill" and pts[4].bottleneck == "slot cap / KV capacity"
    assert pts[4].running == 256 and pts[4].queue_s == pytest.approx(pts[4].e2e_s)  # 512 streams on 256 slots: a request's time in the queue


def test_a_token_budget_smaller_than_a_cohort_splits_it_into_more_mixed_steps():
    """cohorts(): where the budget holds every cohort, MIXED_SHARE of the steps carry k ÷ MIXED_SHARE
    prompts; a budget of ~4 prompts (2,048 tokens, 512-token prompts) puts them in more steps, each
    carrying fewer, the prompts per step unchanged; a budget below one prompt makes every step a mixed
    one. So the tune grid's max_num_batched_tokens 2,048 point is slower than its 8,192 point
    (vLLM 0.25 measured 1.4–4 × the streams at 8,192 within a TPOT objective: validation/RESULTS-tune.md)."""
    assert cohorts(0.0, 4.0) == (0.0, 1.0)
    assert cohorts(0.5, 1e6) == pytest.approx((MIXED_SHARE, 0.5 / MIXED_SHARE))
    share, m = cohorts(0.5, (2048 - 39) / 512)
    assert share > MIXED_SHARE * 1.05 and share * m == pytest.approx(0.5)
    assert cohorts(2.0, 0.5)[0] == 1.0 and cohorts(2.0, -3.0)[0] == 1.0
    spec, fmt, hw = load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h100-sxm")
    tpot = {}
    for budget in (2048, 8192):
        limits = limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=64, max_num_seqs=128, max_num_batched_tokens=budget)
        t = terms(spec, fmt, hw, concurrency=40, input_tokens=512, output_tokens=64, limits=limits)
        tpot[budget] = predict(t, calibration("vllm-0.25-h100-bf16"), concurrency=40, output_tokens=64).tpot_s
    assert tpot[2048] > tpot[8192] * 1.05


def test_calibrate_measures_the_servers_cohorts_and_predict_prices_them(tmp_path):
    """A server whose prompts rode about one a step at 64 streams (the twelfth kept-back set's AFMoE: 1.07 in its design's
    64-stream level, where predict's MIXED_SHARE assumes two): calibrate measures its share of steps with prompts (k ÷ 1.07 =
    0.46) and carries it; predict then prices about twice as many steps with prompts there, each with one, so the 64-stream
    steady state slower (measured 1,867 tok/s over three 60 s repeats; priced 2,000 with it, 2,158 by the calibration fitted
    without it), and a level below MIXED_SHARE's prompts a step none the different. Levels without the count (run files from
    before it), with a count no server can give (more than its running streams, infinite) or whose prompts bunched (dots.llm1's
    7.2 a step at 64 streams) leave it None, the share MIXED_SHARE."""
    from servelab.cli.predict import read_run

    run = ROOT / "validation/kept-back12-h100/afmoe-calibrate-run.json"
    out = tmp_path / "cal.yaml"
    res = cli.invoke(app, ["calibrate", str(run), "--hardware", "h100-sxm", "--model", str(ROOT / "validation/configs/afmoe"), "--out", str(out)])
    assert res.exit_code == 0 and "cohorts: s = 0.46, the share of the steady state's steps that carry prompts" in " ".join(res.output.split()), res.output
    cal = calibration(str(out))
    assert cal.mixed_share == pytest.approx(0.46)
    spec, fmt, hw = load_model(str(ROOT / "validation/configs/afmoe")), get_format("bf16"), load_hardware("h100-sxm")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=128)
    at = {c: terms(spec, fmt, hw, concurrency=c, input_tokens=512, output_tokens=128, limits=limits) for c in (16, 64)}
    t64 = recohorted(at[64], cal.mixed_share)
    assert t64.mixed_share == pytest.approx(0.492 / 1.07, rel=0.01) and recohorted(t64, cal.mixed_share) == t64  # ~1.07 prompts a step; idempotent
    plain = recohorted(at[64], MIXED_SHARE)  # the default share, priced again: the terms' own cohorts
    assert plain.mixed_share == at[64].mixed_share and plain.mixed_flops_s == pytest.approx(at[64].mixed_flops_s, rel=0.01)
    without = cal.model_copy(update={"mixed_share": None})
    tpot = {c: (predict(at[c], cal, concurrency=c, output_tokens=128).tpot_s, predict(at[c], without, concurrency=c, output_tokens=128).tpot_s) for c in at}
    assert tpot[64][0] > 1.05 * tpot[64][1] and tpot[16][0] == pytest.approx(tpot[16][1])
    rows = measured_levels(read_run(run), spec, fmt, hw)
    assert measured_share(rows) == pytest.approx(0.46)
    for count in (None, 5000.0, float("inf"), float("nan"), 7.2):
        odd = [dataclasses.replace(m, prompts_per_step=count) for m in rows]
        assert measured_share(odd) is None and fit(odd, "odd", "x", calibration(None, spec, fmt)).mixed_share is None, count


def test_calibrate_fits_a_level_whose_prompts_bunched_with_its_own_cohorts(tmp_path):
    """Laguna's shapes on the thirteenth kept-back set's host: its design's 16 streams ran in waves, 5.33 prompts a step where
    predict's cohorts carry one (k = 0.12 prompts a decode step), so its steps with prompts were a fifth as many, each riding a
    step without CUDA graphs once: 1,758 tok/s where the same server's later 16 streams, spread, measured 1,230. Fitted as
    predict's cohorts, that level pulled the prefill efficiency to its range's edge (0.1) and its leave-one-out to 43 % median;
    fitted with its own cohorts (k ÷ 5.33; the server's share, measured on its other levels, unchanged), η_c stays near its
    prior and the levels predict one another within 30 % (validation/RESULTS-predict.md, "A level's own cohorts")."""
    out, model = tmp_path / "cal.yaml", str(ROOT / "validation/configs/laguna-24l")
    res = cli.invoke(app, ["calibrate", str(ROOT / "validation/kept-back13-h100/laguna-24l-calibrate-run.json"), "--hardware", "h100-sxm", "--model", model, "--out", str(out)])
    assert res.exit_code == 0 and "edge of its range" not in res.output, res.output
    cal = calibration(str(out))
    assert cal.compute_efficiency > 0.6 and cal.mixed_share == pytest.approx(0.254)
    loo = re.search(r"aggregate output tok/s median ([\d.]+) %", " ".join(res.output.split()))
    assert loo and float(loo[1]) < 30, res.output


def test_calibrate_fits_the_share_of_the_hosts_floor_a_steady_step_with_prompts_takes(tmp_path):
    """Minitron-8B's shapes on the thirteenth kept-back set's host: its steps with prompts at 16 streams took ~29 ms without CUDA
    graphs (ITL p90), the host's floor for its 32 layers (22.4 ms) and more, where its GPU work prices ~15. calibrate, on its
    design (1, 16, 64 streams), fits the share of that floor such a step takes (Calibration.mixed_floor, 0 in the shipped
    calibrations): 1.0, and its 16-stream steady state, not in the design, then comes within 10 % (1,632 tok/s measured; 13.9 %
    fast with the share held at 0). One stream has no such step: its prediction does not move."""
    from servelab.cli.predict import read_run

    out, model = tmp_path / "cal.yaml", str(ROOT / "validation/configs/minitron-8b")
    res = cli.invoke(app, ["calibrate", str(ROOT / "validation/kept-back13-h100/minitron-8b-calibrate-run.json"), "--hardware", "h100-sxm", "--model", model, "--out", str(out)])
    assert res.exit_code == 0 and "mixed_floor 1," in res.output, res.output
    cal = calibration(str(out))
    spec, fmt, hw = load_model(model), get_format("bf16"), load_hardware("h100-sxm")
    level = next(lv for lv in read_run(ROOT / "validation/kept-back13-h100/minitron-8b-stagger-run.json").levels if lv.concurrency == 16)
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=128)
    at = {c: terms(spec, fmt, hw, concurrency=c, input_tokens=512, output_tokens=128, limits=limits) for c in (1, 16)}
    tok_s = {w: predict(at[16], cal.model_copy(update={"mixed_floor": w}), concurrency=16, output_tokens=128).aggregate_tok_s for w in (cal.mixed_floor, 0.0)}
    assert abs(tok_s[cal.mixed_floor] / level.output_throughput_tok_s - 1) < 0.10 < tok_s[0.0] / level.output_throughput_tok_s - 1
    one = [predict(at[1], cal.model_copy(update={"mixed_floor": w}), concurrency=1, output_tokens=128).tpot_s for w in (0.0, 1.0)]
    assert one[0] == one[1]


def test_a_step_pays_its_fixed_time_per_layer():
    """t₀ = L · t_ℓ: a model with twice the layers of the same width pays twice the fixed time per
    step (the 64-layer Qwen3-32B was 6 % fast at one stream with a constant t₀: validation/RESULTS-predict.md)."""
    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm")
    deep = dataclasses.replace(spec, layers=spec.layers * 2)
    cal = calibration("vllm-0.25-h100-bf16")
    steps = []
    for s in (spec, deep):
        limits = limits_for(s, fmt, hw, tp=1, input_tokens=512, output_tokens=128)
        t = terms(s, fmt, hw, concurrency=1, input_tokens=512, output_tokens=128, limits=limits)
        steps.append(predict(t, cal, concurrency=1, output_tokens=128).decode_step_s - (t.decode_bytes_s + t.kv_s) / cal.bw_efficiency)
    assert steps[0] == pytest.approx(len(spec.layers) * cal.layer_overhead_us / 1e6, rel=1e-6)
    assert steps[1] == pytest.approx(2 * steps[0], rel=1e-6)


def test_a_moe_layer_pays_its_own_times():
    """A MoE layer adds ``moe_layer_us`` to every step and ``moe_eager_layer_ms`` to a step without
    CUDA graphs (its router and dispatch kernels; fitted on Qwen3-30B-A3B, held out on Mixtral-8x7B
    at one stream: 16.9 % fast without them, 5.8 % with: validation/RESULTS-predict.md); a dense model pays neither."""
    spec, fmt, hw = load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h100-sxm")
    shipped = calibration("vllm-0.25-h100-bf16")
    bare = shipped.model_copy(update={"moe_layer_us": 0.0, "moe_eager_layer_ms": 0.0})

    def at(cal, spec, prompt):
        limits = limits_for(spec, fmt, hw, tp=1, input_tokens=prompt, output_tokens=128)
        t = terms(spec, fmt, hw, concurrency=1, input_tokens=prompt, output_tokens=128, limits=limits)
        return predict(t, cal, concurrency=1, output_tokens=128)

    n = spec.moe_layers
    assert n == 48
    assert at(shipped, spec, 512).decode_step_s - at(bare, spec, 512).decode_step_s == pytest.approx(n * shipped.moe_layer_us / 1e6, rel=1e-6)
    graphed, eager = (at(shipped, spec, p).ttft_s - at(bare, spec, p).ttft_s for p in (512, 1024))  # a 1,024-token prompt runs without graphs
    assert graphed == pytest.approx(n * shipped.moe_layer_us / 1e6, rel=1e-6)
    assert eager == pytest.approx(n * (shipped.moe_layer_us / 1e6 + shipped.moe_eager_layer_ms / 1e3), rel=1e-6)
    dense = load_model("qwen3-8b")
    assert at(shipped, dense, 512) == at(bare, dense, 512)


def test_a_fp8_moe_layer_pays_its_activation_quantization_in_every_step():
    """vLLM's fused-MoE op quantizes its activations itself in FP8 (``FP8_MOE_LAYER_S`` a MoE layer and
    ``FP8_MOE_READ_S`` per element each thread of its max reduction reads in turn, every step;
    engines/vllm.py), BF16 does not, dense FP8 layers do not: measured on Qwen3-30B-A3B in both formats
    on one H100, one stream's TPOT 4.62 ms in BF16 and 4.50 in FP8 (validation/eager-h100/format/), which
    the shipped calibration predicts within 5 % each, and their gap within 0.3 ms (0.95 ms without the
    term); Mixtral-8x7B (its reduction reads 72 elements a thread against Qwen3-30B-A3B's 11,
    validation/moe-kernel/) in BF16 and FP8 on an H200 within 5 % (+10 % and −8 % without the term and
    with a constant one)."""
    from servelab.engines.vllm import FP8_MOE_LAYER_S, FP8_MOE_READ_S

    spec, hw, cal = load_model("qwen3-30b-a3b"), load_hardware("h100-sxm"), calibration("vllm-0.25-h100-bf16")

    def at(model, quant, hw=hw, output_tokens=128):
        fmt = get_format(quant)
        limits = limits_for(model, fmt, hw, tp=1, input_tokens=512, output_tokens=output_tokens)
        t = terms(model, fmt, hw, concurrency=1, input_tokens=512, output_tokens=output_tokens, limits=limits)
        return t, predict(t, cal, concurrency=1, output_tokens=output_tokens)

    (t8, fp8), (t16, bf16) = at(spec, "fp8"), at(spec, "bf16")
    assert t8.moe_extra_s == pytest.approx(48 * (FP8_MOE_LAYER_S + (8 + 3) * FP8_MOE_READ_S)) and t16.moe_extra_s == 0.0
    assert at(load_model("qwen3-8b"), "fp8")[0].moe_extra_s == 0.0
    assert fp8.tpot_s == pytest.approx(4.50e-3, rel=0.05) and bf16.tpot_s == pytest.approx(4.62e-3, rel=0.05)
    assert abs(bf16.tpot_s - fp8.tpot_s) < 0.3e-3
    # Mixtral-8x7B on an H200 (validation/eager-h200/format/): 7.74 ms in BF16 (8.51 predicted without the term), 5.95 in FP8
    mixtral, h200 = load_model(str(ROOT / "validation" / "configs" / "mixtral-8x7b")), load_hardware("h200")
    (m8, mfp8), (_, mbf16) = at(mixtral, "fp8", h200, 16), at(mixtral, "bf16", h200, 16)
    assert m8.moe_extra_s == pytest.approx(32 * (FP8_MOE_LAYER_S + (16 + 56) * FP8_MOE_READ_S))
    assert mbf16.tpot_s == pytest.approx(7.74e-3, rel=0.05) and mfp8.tpot_s == pytest.approx(5.95e-3, rel=0.05)


def test_fit_moe_recovers_the_moe_layer_times_beside_the_dense_fit():
    """Dense and MoE levels together: the dense ones fit the efficiencies and times per layer, the
    MoE ones then the MoE layer times (servelab.plan.fit.fit_moe)."""
    truth = calibration("vllm-0.25-h100-bf16").model_copy(update={"moe_layer_us": 30.0, "moe_eager_layer_ms": 0.5, "draft_overhead_ms": 0.0})
    rows = []
    for model, quant in (("qwen3-8b", "bf16"), ("qwen3-30b-a3b", "fp8")):
        ts, pts = _curve(model, quant, [1, 4, 16, 64, 256], cal=truth)
        rows += [Measured(p.concurrency, t, 256, p.tpot_s, p.ttft_s, p.aggregate_tok_s) for t, p in zip(ts, pts)]
    got = fit(rows, "t", "synthetic")
    assert (got.bw_efficiency, got.compute_efficiency) == (pytest.approx(0.86, abs=0.011), pytest.approx(0.74, abs=0.011))
    assert got.moe_layer_us == pytest.approx(30.0, abs=1.0) and got.moe_eager_layer_ms == pytest.approx(0.5, abs=0.02)
    assert fit_moe(rows[5:], got) == got  # refitted from zero, not on top of its own
    with pytest.raises(ServelabError, match="steady-state levels of a MoE model"):
        fit_moe(rows[:5], got)


def test_vllm_fp8_gains_what_was_measured_not_the_datasheet():
    """vLLM's online FP8 (--quantization fp8), measured on Qwen3-32B in both formats on one H200: its
    prefill 1.45–1.7 × BF16's, not 2 ×, and a step without CUDA graphs 0.39 ms a layer dearer
    (engines/vllm.py ``FP8_GAIN``, ``FP8_EAGER_LAYER_S``); a MoE model's FP8 experts at the BF16 rate, its BF16 experts at
    the Triton fused-MoE kernel's measured 0.57 of it (engines/vllm_moe.py ``MOE_RATE``)."""
    hw = load_hardware("h200")
    dense, moe = load_model(str(ROOT / "validation" / "configs" / "qwen3-32b")), load_model("qwen3-30b-a3b")
    got = {}
    for name, spec in (("dense", dense), ("moe", moe)):
        for quant in ("bf16", "fp8"):
            fmt = get_format(quant)
            limits = limits_for(spec, fmt, hw, tp=1, input_tokens=522, output_tokens=128)
            got[name, quant] = terms(spec, fmt, hw, concurrency=1, input_tokens=522, output_tokens=128, limits=limits)
    # the same FLOPs in both formats, so their time ÷ peak is the rate's ratio
    assert got["dense", "fp8"].mixed_flops_s == pytest.approx(got["dense", "bf16"].mixed_flops_s / 1.5, rel=1e-6)
    routed = 2 * 523 * 48 * 8 * 3 * 2048 * 768  # one decode token and the prompt through 8 of Qwen3-30B-A3B's experts (3 × 2,048 × 768) in 48 layers
    assert expert_flops(moe, 523) == routed and MOE_RATE["bf16"] == 0.57
    slow = (1 / 0.57 - 1) * routed / hw.peak_flops("bf16")  # its experts' FLOPs at 0.57 of the rate
    assert got["moe", "bf16"].mixed_flops_s == pytest.approx(got["moe", "fp8"].mixed_flops_s + slow, rel=1e-6)
    fmt = get_format("bf16")  # at TP 2 each GPU computes half of it
    two = terms(moe, fmt, hw, concurrency=1, input_tokens=522, output_tokens=128, limits=limits_for(moe, fmt, hw, tp=2, input_tokens=522, output_tokens=128), tp=2)
    assert two.mixed_flops_s == pytest.approx(got["moe", "bf16"].mixed_flops_s / 2, rel=1e-6)
    assert got["dense", "fp8"].eager_extra_s == pytest.approx(64 * 0.4e-3) and got["dense", "bf16"].eager_extra_s == 0
    # a 522-token prompt (above the largest capture size, 512) pays it at one stream, a 512-token one does not (measured 69 and 44 ms)
    cal = calibration(None, dense, get_format("fp8"))
    limits = limits_for(dense, get_format("fp8"), hw, tp=1, input_tokens=522, output_tokens=128)
    ttft = {p: predict(terms(dense, get_format("fp8"), hw, concurrency=1, input_tokens=p, output_tokens=128, limits=limits), cal,
                       concurrency=1, output_tokens=128).ttft_s for p in (512, 522)}  # fmt: skip
    assert ttft[522] - ttft[512] > 0.02


def test_cuda_graph_padding_costs_a_moe_model_its_experts():
    """A batch of 5 runs the graph of 8, and its 3 padding tokens route to experts too: on a MoE
    model c=5 decodes no faster per stream than c=8 (measured on vLLM 0.25: 119 and 119 tok/s)."""
    _, pts = _curve("qwen3-30b-a3b", "fp8", [4, 5, 8], capture_sizes=[1, 2, 4, 8, 16])
    assert pts[1].padded_batch == 8 and pts[1].bottleneck == "CUDA-graph padding"
    assert pts[1].tpot_s > pts[0].tpot_s * 1.2 and pts[1].decode_step_s == pytest.approx(pts[2].decode_step_s, rel=0.05)
    _, captured = _curve("qwen3-30b-a3b", "fp8", [5], capture_sizes=[1, 2, 4, 5, 8, 16])
    assert captured[0].bottleneck != "CUDA-graph padding" and captured[0].tpot_s < pts[1].tpot_s


def test_padding_dip_on_a_spark_matches_the_published_one():
    """gpt-oss-120b MXFP4 on a DGX Spark with vLLM's default capture sizes: "a 17–25 % throughput dip"
    at 5 and 10 streams, closed by capturing them (https://dendro-logic.com/?p=19817; validation/RESULTS-predict.md)."""
    spec, fmt, hw = load_model("gpt-oss-120b"), get_format("mxfp4"), load_hardware("dgx-spark")
    cal = calibration("vllm-0.25-h100-bf16")

    def agg(c, sizes):
        limits = limits_for(spec, fmt, hw, tp=1, input_tokens=1024, output_tokens=128, capture_sizes=sizes)
        return predict(terms(spec, fmt, hw, concurrency=c, input_tokens=1024, output_tokens=128, limits=limits), cal, concurrency=c, output_tokens=128)

    for c in (5, 10):
        padded, captured = agg(c, [1, 2, 4, 8, 16, 24, 32]), agg(c, [1, 2, 4, 5, 8, 10, 16, 24, 32])
        assert padded.bottleneck == "CUDA-graph padding" and 0.17 <= 1 - padded.aggregate_tok_s / captured.aggregate_tok_s <= 0.25


def test_the_spark_calibration_meets_the_published_curve_and_the_held_out_seed():
    """gpt-oss-120b on a DGX Spark, llama-benchy's tg t/s (total) (validation/spark_published.py): with the
    shipped vllm-dgx-spark calibration, --quant mxfp4-all and γ 0.46 the fitted one-Spark curve is within
    8 % median and the seed's held-out table (issue 53, 2,048 / 128, 1–256 streams) within 10 % median and
    15 % worst. The published checkpoint's BF16 attention and LM head (--quant mxfp4) cannot reach the
    seed's one stream: its 5.0 GB a token at 273 GB/s is 54.6 tok/s at full bandwidth, the seed 58.3."""
    spec = importlib.util.spec_from_file_location("spark_published", ROOT / "validation" / "spark_published.py")
    sp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sp)
    cal = calibration("vllm-dgx-spark")
    curve = {name: [abs(e) for e in sp.errors(sp.tg_curve(cal.bw_efficiency, cal.compute_efficiency, 0.46, tp, p, meas), meas)]
             for name, (meas, tp, p) in sp.CURVES.items()}  # fmt: skip
    fitted, seed = curve["one Spark (kubis.ai, fitted)"], curve["one Spark, 2,048 / 128 (the seed, held out)"]
    assert statistics.median(fitted) <= 0.08 and statistics.median(seed) <= 0.10 and max(seed) <= 0.15
    for quant in ("mxfp4", "mxfp4-all"):
        res = cli.invoke(app, ["predict", "--model", "gpt-oss-120b", "--hardware", "dgx-spark", "--quant", quant, "--calibration", "vllm-dgx-spark",
                               "--routing", "0.46", "--closed-loop", "batch", "--concurrency", "1,4", "--input-tokens", "2048", "--output-tokens", "128", "--json"])  # fmt: skip
        assert res.exit_code == 0, res.output
        one = json.loads(res.output)["variants"][0]["points"][0]["tg_total_tok_s"]
        assert (one < 0.8 * 58.3) if quant == "mxfp4" else (one > 0.9 * 58.3)
    res = cli.invoke(app, ["predict", "--model", "gpt-oss-120b", "--hardware", "dgx-spark", "--quant", "mxfp4-all", "--closed-loop", "batch", "--concurrency", "4"])
    assert res.exit_code == 0 and "tg tok/s (total)" in res.output
    varied = cli.invoke(app, ["predict", "--model", "gpt-oss-120b", "--hardware", "dgx-spark", "--quant", "mxfp4-all", "--closed-loop", "batch", "--concurrency", "4",
                              "--vary", "max-num-batched-tokens=2048,8192"])  # fmt: skip
    assert varied.exit_code == 0 and re.search(r"· tg [\d,]+ total ·", varied.output), varied.output  # each variant's tg tok/s (total) beside its tok/s
    assert {"mlp", "lm_head"} <= set(get_format("mxfp4-all", load_model("qwen3-8b")).quantized)  # a dense model: every linear and the LM head
    res = cli.invoke(app, ["predict", "--model", "gpt-oss-120b", "--routing", "2"])
    assert res.exit_code == 2 and "--routing 2: give γ between 0.1 and 1" in res.output


def test_open_loop_rate_settles_where_littles_law_says_and_saturates_above_the_ceiling():
    """--rate λ: the requests in flight N solve N = λ · E2E(N); λ = c ÷ E2E(c) of a closed-loop level
    comes back to about c streams; above what the server completes at its cap the queue grows."""
    from servelab.plan.rate import at_rate

    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=1024, output_tokens=256, max_num_seqs=256)
    cal = calibration("vllm-0.25-h100-bf16")

    def point_at(c):
        return predict(terms(spec, fmt, hw, concurrency=c, input_tokens=1024, output_tokens=256, limits=limits), cal, concurrency=c, output_tokens=256)

    for c in (8, 64):
        closed = point_at(c)
        got = at_rate(point_at, c / closed.e2e_s, 256, 256)
        assert not got.saturated and abs(got.point.concurrency - c) <= 1
        assert got.point.aggregate_tok_s == pytest.approx(c / closed.e2e_s * 256)
    ceiling = 256 / point_at(256).e2e_s
    over = at_rate(point_at, 1.5 * ceiling, 256, 256)
    assert over.saturated and over.point.running == 256 and f"saturated above {ceiling:,.2f} req/s" in over.point.bottleneck
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--rate", f"1,{2 * ceiling:.0f}", "--max-num-seqs", "256"])
    assert res.exit_code == 0 and "req/s" in res.output and "in flight" in res.output and "grows" in res.output, res.output
    for bad, needle in ((["--rate", "0"], "--rate '0': give positive finite numbers"), (["--rate", "1", "--plot", "x.png"], "--plot draws closed-loop curves")):
        res = cli.invoke(app, ["predict", "--model", "qwen3-8b", *bad])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_burst_waves_wait_for_each_others_prefill():
    """A burst's first wave waits for every prompt before it, chunked under max_num_batched_tokens,
    then decodes with CUDA graphs: TTFT mean and p99 far above the steady state's, TPOT below it
    (measured on Qwen3-30B-A3B, H200: 4,111 tok/s bursting against 2,732 steady at 64 streams)."""
    _, steady = _curve("qwen3-8b", "bf16", [64])
    _, burst = _curve("qwen3-8b", "bf16", [64], mode="burst")
    assert burst[0].ttft_mean_s > 5 * steady[0].ttft_s and burst[0].ttft_p99_s > 2 * burst[0].ttft_mean_s and burst[0].tpot_s < steady[0].tpot_s
    spec, fmt, hw = load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h200")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=522, output_tokens=128)
    moe = {mode: predict(terms(spec, fmt, hw, concurrency=64, input_tokens=522, output_tokens=128, limits=limits, mode=mode), calibration(None, spec, fmt),
                         concurrency=64, output_tokens=128) for mode in ("stagger", "burst")}  # fmt: skip
    assert moe["burst"].aggregate_tok_s > 1.2 * moe["stagger"].aggregate_tok_s  # measured 4,111 against 2,732 tok/s (validation/cold-h200/)


def test_a_dense_bf16_burst_prefills_at_the_power_capped_clock():
    """A wave's prefill, step after step, runs at the board's power-capped clock: Qwen3-8B bf16 on an
    H200, 256 streams, 522/128 tokens, measured 6,485 tok/s (SM clock 1,545 of 1,980 MHz,
    validation/cold-h200/qwen3-8b-clocks.json): within 5 % with the cap, 13 % fast without it. FP8
    (its rate measured on bursts) and a MoE keep their clock; the steady state is not a wave."""
    h200 = load_hardware("h200")
    uncapped = h200.model_copy(update={"power_capped_clock": 1.0})

    def point(model: str, quant: str, hw, mode: str = "burst", p: int = 522, o: int = 128):
        spec, fmt = load_model(model), get_format(quant)
        t = terms(spec, fmt, hw, concurrency=256, input_tokens=p, output_tokens=o, limits=limits_for(spec, fmt, hw, tp=1, input_tokens=p, output_tokens=o), mode=mode)
        return predict(t, calibration(None, spec, fmt), concurrency=256, output_tokens=o)

    def tok_s(model: str, quant: str, hw, mode: str = "burst") -> float:
        return point(model, quant, hw, mode).aggregate_tok_s

    capped, free = tok_s("qwen3-8b", "bf16", h200), tok_s("qwen3-8b", "bf16", uncapped)
    assert abs(capped / 6485 - 1) < 0.05 and free / 6485 - 1 > 0.1
    long = {"p": 2048, "o": 8}  # a burst its prefill bounds: the label says the clock
    assert point("qwen3-8b", "bf16", h200, **long).bottleneck == "prefill (a wave's prompts, chunked under max_num_batched_tokens; at the power-capped clock)"
    assert point("qwen3-8b", "bf16", uncapped, **long).bottleneck == "prefill (a wave's prompts, chunked under max_num_batched_tokens)"
    assert tok_s("qwen3-8b", "bf16", h200, "stagger") == tok_s("qwen3-8b", "bf16", uncapped, "stagger")
    for model, quant in (("qwen3-32b", "fp8"), ("qwen3-30b-a3b", "bf16")):
        assert tok_s(model, quant, h200) == tok_s(model, quant, uncapped)


def test_fit_recovers_the_efficiencies_that_made_the_data():
    truth = Calibration(name="t", bw_efficiency=0.7, compute_efficiency=0.55, layer_overhead_us=33.0, eager_step_ms=20.0, source="synthetic")
    rows = []
    for mode in ("stagger", "burst"):
        ts, pts = _curve("qwen3-8b", "bf16", [1, 2, 8, 64, 256], cal=truth, mode=mode)
        rows += [Measured(p.concurrency, t, 256, p.tpot_s, p.ttft_s, p.aggregate_tok_s) for t, p in zip(ts, pts)]
    got = fit(rows, "t", "synthetic")
    assert (got.bw_efficiency, got.compute_efficiency) == (pytest.approx(0.7, abs=0.011), pytest.approx(0.55, abs=0.011))
    assert got.layer_overhead_us == pytest.approx(33.0, abs=3.0) and got.eager_step_ms == pytest.approx(20.0, abs=0.5) and got.draft_overhead_ms == 0
    # speculative levels beside them: the drafting time per step comes from those alone
    drafting = truth.model_copy(update={"draft_overhead_ms": 3.0})
    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=1024, output_tokens=256, draft_tokens=3)
    for c in (1, 8, 64):
        t = terms(spec, fmt, hw, concurrency=c, input_tokens=1024, output_tokens=256, limits=limits, draft_tokens=3)
        p = predict(t, drafting, concurrency=c, output_tokens=256, acceptance=0.8)
        rows.append(Measured(c, t, 256, p.tpot_s, p.ttft_s, p.aggregate_tok_s, acceptance=0.8))
    got = fit(rows, "t", "synthetic")
    assert got.bw_efficiency == pytest.approx(0.7, abs=0.011) and got.draft_overhead_ms == pytest.approx(3.0, abs=0.05)


@pytest.mark.parametrize("group", ["vllm-0.25-h100-bf16", "vllm-0.25-h100-hybrid-fp8"])
def test_stated_error_holds_on_the_real_runs(group):
    """Each shipped calibration's error, as validation/predict_loo.py measures it leave-one-run-out
    on the repository's real vLLM 0.25 H100 runs (dense, Mamba-2 hybrid MoE): issue 17's bounds
    (aggregate median ≤ 15 %, single-stream decode ≤ 10 %), and the shipped fit is the fit on all;
    the dense one's MoE layer times are those fitted on its MoE run (Qwen3-30B-A3B fp8, cold)."""
    spec = importlib.util.spec_from_file_location("predict_loo", ROOT / "validation" / "predict_loo.py")
    loo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loo)
    runs = [loo.levels(path, m, q, hw) for g, path, m, q, hw in loo.RUNS if g == group.replace("h100-bf16", "h100-dense-bf16")]
    pairs = leave_one_out(runs, "loo")
    agg = [abs(p.aggregate_tok_s / m.tok_s - 1) for _, m, p in pairs]
    single = [abs(m.tpot_s / p.tpot_s - 1) for _, m, p in pairs if m.concurrency == 1]
    assert statistics.median(agg) <= 0.15 and max(single) <= 0.10
    shipped = calibration(group)
    whole = fit([lv for lvs in runs for lv in lvs], "all", "test")
    assert (whole.bw_efficiency, whole.compute_efficiency) == (shipped.bw_efficiency, shipped.compute_efficiency)
    assert whole.eager_step_ms == pytest.approx(shipped.eager_step_ms, abs=0.01)
    moe = fit_moe(loo.moe_levels(), whole) if group == "vllm-0.25-h100-bf16" else whole
    assert (moe.moe_layer_us, moe.moe_eager_layer_ms) == (shipped.moe_layer_us, shipped.moe_eager_layer_ms)


def test_a_prompt_step_above_the_largest_capture_size_runs_without_graphs():
    """vLLM 0.25 runs a batch of more tokens than its largest capture size (512) without CUDA
    graphs: on the MoE (H100, fp8) TTFT at one stream was 27 ms for a 512-token prompt and 106 ms for
    1,024 (validation/predict-h100/moe-long-run.json, moe-1024-run.json); the model adds the
    calibrated t_eager (and a MoE layer's without CUDA graphs) to the second only, and names it where it dominates TPOT."""
    spec, fmt, hw = load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h100-sxm")
    cal = calibration(None, spec, fmt)
    assert cal.name == "vllm-0.25-h100-bf16" and cal.moe_eager_layer_ms > 0

    def at(c, prompt):
        limits = limits_for(spec, fmt, hw, tp=1, input_tokens=prompt, output_tokens=128)
        t = terms(spec, fmt, hw, concurrency=c, input_tokens=prompt, output_tokens=128, limits=limits)
        return t, predict(t, cal, concurrency=c, output_tokens=128)

    (t512, p512), (t1024, p1024) = at(1, 512), at(1, 1024)
    assert not t512.mixed_eager and t1024.mixed_eager
    assert p1024.ttft_s / p512.ttft_s > 2  # measured 3.9 ×, predicted 2.4 × (t_eager is fitted on TPOT and tok/s only)
    _, p32 = at(32, 512)
    assert p32.tpot_s > 1.3 * p32.decode_step_s  # measured: TPOT 26.9 ms on 13.9 ms decode steps (predicted 26.2 on 17.7)



def test_a_bursts_step_without_graphs_takes_at_least_the_hosts_launches():
    """A lone prompt of 522 tokens (above the largest capture size) on a narrow BF16 MLA MoE: vLLM 0.25's host launches its
    27 layers for 70 ms (``EAGER_HOST_*``: 0.7 ms a layer, 1.45 more a BF16 MoE layer, 0.5 more an MLA layer), far more than
    the step's GPU work and the calibration's times without graphs; measured TTFT 79 ms on Moonlight-16B-A3B (H200,
    validation/kept-back2-h200/; validation/eager_host.py). FP8 MoE layers add nothing (the calibration's times exceed it),
    formats and machines not measured (MXFP4; a B200, a DGX Spark) have no floor, and the steady state's steps take the layers'
    launches alone (the MoE and MLA extras never reach them)."""
    spec, fmt, hw = load_model(str(ROOT / "validation/configs/moonlight-16b-a3b")), get_format("bf16"), load_hardware("h200")
    engine = plan_engine()
    assert engine.eager_host_s(spec, "bf16", hw) == pytest.approx((27 * 0.7e-3, 27 * 0.7e-3 + 26 * 1.45e-3 + 27 * 0.5e-3))
    assert engine.eager_host_s(spec, "fp8", hw) == pytest.approx((27 * 0.7e-3, 27 * 1.2e-3)) and engine.eager_host_s(spec, "mxfp4", hw) == (0.0, 0.0)
    assert engine.eager_host_s(spec, "bf16", load_hardware("b200")) == engine.eager_host_s(spec, "bf16", load_hardware("dgx-spark")) == (0.0, 0.0)
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=522, output_tokens=128)
    t = terms(spec, fmt, hw, concurrency=1, input_tokens=522, output_tokens=128, limits=limits, mode="burst")
    cal = calibration("vllm-0.25-h100-bf16")
    got, without = predict(t, cal, concurrency=1, output_tokens=128), predict(dataclasses.replace(t, eager_host_s=0.0), cal, concurrency=1, output_tokens=128)
    assert got.ttft_mean_s == pytest.approx(t.eager_host_s + 0.005, rel=0.01) and got.ttft_mean_s > 1.5 * without.ttft_mean_s
    for c in (1, 16, 64):  # the burst's MoE and MLA extras never reach the steady state (RESULTS-predict.md, "One host's queue")
        steady = terms(spec, fmt, hw, concurrency=c, input_tokens=522, output_tokens=128, limits=limits)
        assert 0 < steady.eager_launch_s < steady.eager_host_s and predict(steady, cal, concurrency=c, output_tokens=128) == predict(dataclasses.replace(steady, eager_host_s=0.0), cal, concurrency=c, output_tokens=128)


def test_a_steady_states_step_with_prompts_without_graphs_takes_at_least_its_layers_launches():
    """servelab's steady-state prompts reach vLLM as 512 tokens: from two streams up a step with one carries the others' decode
    tokens too, above the largest capture size, so it runs without CUDA graphs and, where the host binds, takes at least the
    host's launches of its layers (16 × 0.7 ms on Llama-3.2-1B; its 4-stream ITL p99 measured 18.0 ms on vLLM 0.25, H200, the
    fourth kept-back set, where the GPU work prices a few ms). One stream's prompt rides a graph; at 64 streams the step's GPU
    work is above it; where the host does not bind (Qwen3-8B at 16 streams, its step with prompts priced 15 ms under its 36 layers'
    25 ms of launches: it measured 2,358 tok/s on an H200, which the floor would price 1,933) the cohorts' prompts share the step
    and it keeps its fitted time."""
    cal = calibration("vllm-0.25-h100-bf16")
    for c in (4, 16):
        t = _small_moe("llama-3.2-1b", c)
        got, without = predict(t, cal, concurrency=c, output_tokens=128), predict(dataclasses.replace(t, eager_launch_s=0.0), cal, concurrency=c, output_tokens=128)
        assert t.mixed_eager and t.eager_launch_s == pytest.approx(16 * 0.7e-3) and got.tpot_s > 1.04 * without.tpot_s
        mixed = got.decode_step_s + (got.tpot_s - got.decode_step_s) / waved(t).mixed_share  # the step with prompts as priced: the launches
        assert mixed == pytest.approx(16 * 0.7e-3, rel=0.05)
        assert got.ttft_s > without.ttft_s + 3e-3  # its own step with prompts, at least the launches (priced 6.8 ms beyond at 4 streams)
    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h200")
    qwen = terms(spec, fmt, hw, concurrency=16, input_tokens=512, output_tokens=128, limits=limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=128))
    got = predict(qwen, cal, concurrency=16, output_tokens=128)
    assert got.host_share < 0.5 and got.decode_step_s + (got.tpot_s - got.decode_step_s) / qwen.mixed_share < 0.7 * qwen.eager_launch_s
    for t, c in ((_small_moe("llama-3.2-1b", 1), 1), (_small_moe("llama-3.2-1b", 64), 64), (qwen, 16)):
        assert t.eager_launch_s > 0
        assert predict(t, cal, concurrency=c, output_tokens=128) == predict(dataclasses.replace(t, eager_launch_s=0.0), cal, concurrency=c, output_tokens=128), c


def test_a_fits_host_scale_is_pulled_toward_its_priors():
    """The host scale's prior is centred on the prior calibration's (1 in the shipped ones; a calibrate'd server's in tune's
    refit): on the sixth kept-back set's SmolLM2-1.7B design, whose levels pin it loosely (0.84–0.94), a prior of 2 fits it
    higher than a prior of 1 does, within that interval; a prior of 0.5, under which the host binds no level, is kept as it is."""
    from servelab.cli.predict import read_run

    spec, fmt, hw = load_model(str(ROOT / "validation/configs/smollm2-1.7b")), get_format("bf16"), load_hardware("h100-sxm")
    rows = measured_levels(read_run(ROOT / "validation/kept-back6-h100/smollm2-1.7b-calibrate-run.json"), spec, fmt, hw)
    got = {h: fit(rows, "x", "y", calibration(None, spec, fmt).model_copy(update={"host_scale": h}), prior_widths(hw, calibration(None, spec, fmt))) for h in (1.0, 2.0, 0.5)}
    low, high = got[1.0].uncertainty["host_scale"]
    assert low <= got[1.0].host_scale < got[2.0].host_scale <= high
    assert got[0.5].host_scale == 0.5 and "host_scale" not in got[0.5].uncertainty


def test_a_calibration_file_holds_its_host_scale_and_floors_share_within_the_grids_a_fit_searches(tmp_path):
    """``Calibration.host_scale`` and ``mixed_floor`` have the ranges their fits search (``fit.HOST_SCALES``, ``fit.MIXED_FLOORS``),
    so that a prior from a file is never snapped to a grid's end by tune's refit: a file outside them is refused in one line."""
    from servelab.plan.fit import HOST_SCALES, MIXED_FLOORS

    fields = Calibration.model_fields
    bounds = {key: [m.ge if hasattr(m, "ge") else m.le for m in fields[key].metadata] for key in ("host_scale", "mixed_floor")}
    assert bounds == {"host_scale": [HOST_SCALES[0], HOST_SCALES[-1]], "mixed_floor": [MIXED_FLOORS[0], MIXED_FLOORS[-1]]}
    shipped = calibration("vllm-0.25-h100-bf16").model_dump(exclude={"name"})
    for key, value in (("host_scale", 6.0), ("mixed_floor", 1.5)):
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump({"mine": {**shipped, key: value}}))
        res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--concurrency", "1", "--calibration", str(path)])
        assert res.exit_code == 2 and key in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_calibrate_prints_a_parameter_pinned_within_its_grids_step_as_one_value():
    """calibrate's printout of an interval: low–high, or, for a parameter fitted on a grid (the host scale, 6 % steps; the floor's
    share, 0.1) whose levels pin it within one step, the value and that step (not "0.595–0.595")."""
    from servelab.cli.calibrate import _interval

    assert _interval("host_scale", 0.595, 0.595) == "host_scale 0.595 (within the grid's step, 6 %)"
    assert _interval("mixed_floor", 0.5, 0.5) == "mixed_floor 0.5 (within the grid's step, 0.1)"
    assert _interval("mixed_floor", 0.0, 0.4) == "mixed_floor 0–0.4" and _interval("bw_efficiency", 0.86, 0.86) == "bw_efficiency 0.86–0.86"


def test_a_calibrations_host_scale_scales_the_hosts_floor_time_per_step_and_queue():
    """``Calibration.host_scale`` (``servelab calibrate`` fits it, ``Terms.on_host``): the host's floors, its time per step
    and so its queue scale with it, nothing else does, and 1 (every shipped calibration) leaves the terms as they are. A
    host-bound level (Llama-3.2-1B at 16 streams) then runs faster on a faster host, and a level the GPU binds (Qwen3-8B at one
    stream) does not move but for its host's share."""
    cal = calibration("vllm-0.25-h100-bf16")
    assert cal.host_scale == 1
    t = _small_moe("llama-3.2-1b", 16)
    fast = t.on_host(0.5)
    assert t.on_host(1.0) is t and fast.host_s(16) == pytest.approx(t.host_s(16) / 2)
    assert (fast.eager_launch_s, fast.eager_host_s, fast.step_host_s) == pytest.approx((t.eager_launch_s / 2, t.eager_host_s / 2, t.step_host_s / 2))
    assert dataclasses.replace(fast, eager_launch_s=t.eager_launch_s, eager_host_s=t.eager_host_s, step_host_s=t.step_host_s, step_host_seq_s=t.step_host_seq_s) == t
    got, on_fast = (predict(t, c, concurrency=16, output_tokens=128) for c in (cal, cal.model_copy(update={"host_scale": 0.5})))
    assert on_fast.aggregate_tok_s > 1.05 * got.aggregate_tok_s and on_fast.host_queue_s < 0.6 * got.host_queue_s and on_fast.ttft_s < got.ttft_s
    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h200")
    one = terms(spec, fmt, hw, concurrency=1, input_tokens=512, output_tokens=128, limits=limits_for(spec, fmt, hw, tp=1, input_tokens=512, output_tokens=128))
    slow, quick = (predict(one, c, concurrency=1, output_tokens=128) for c in (cal, cal.model_copy(update={"host_scale": 0.5})))
    assert quick.host_share == pytest.approx(slow.host_share / 2) and dataclasses.replace(quick, host_share=slow.host_share) == slow


def test_the_hosts_floor_is_the_fit_on_the_lone_prompts_and_its_held_out_error_is_said():
    """validation/eager_host.py: on the 25 servers it was fitted on, the lone step's extra is 143 ms off in all with the floor
    against 340 without; on the third to fifteenth kept-back sets' 29 servers, measured after, 318 against 385 (the seventh's, a
    faster host, 20 against 7; the eighth's 10.5 against 11.4; the ninth's 13.3 against 18.6; the tenth's 16.8 against 15.7,
    a wash; the eleventh's Aya-Expanse-8B 8.2 against 11.3, its dots.llm1 a void truth left out; the twelfth's AFMoE 19.6
    against 3.8, the floor over its lone prompt's 28 ms, and FlexOlmo 33.7 against 33.7; the thirteenth's Laguna 18.5 against
    25.8, its lone prompt's step 44 ms, and Minitron-8B 13.6 against 17.0; the fourteenth's A.X K1 cut 1.7 against 1.7; the fifteenth's Moonlight, alone on its host, 29.5 against 49.4,
    its lone prompt's step 70 ms where the floor prices 40; the third's alone 36 against 35;
    the README and docs/metrics.md say so); the grid's least-absolute-error point is the engine's constants."""
    import contextlib
    import io

    sys.path.insert(0, str(ROOT / "validation"))
    import eager_host

    with contextlib.redirect_stdout(io.StringIO()):
        totals = eager_host.main()
    (n, with_floor, without), (n3, with3, without3) = totals[False], totals[True]
    assert (n, round(with_floor * 1e3), round(without * 1e3)) == (25, 143, 340) and (n3, round(with3 * 1e3), round(without3 * 1e3)) == (29, 318, 385)
    best, _ = eager_host.fit([s for s in eager_host.servers() if not s["held_out"]])
    engine = sys.modules["servelab.engines.vllm"]
    assert best == {"layer": engine.EAGER_HOST_LAYER_S * 1e3, "moe_bf16": engine.EAGER_HOST_MOE_S["bf16"] * 1e3, "moe_fp8": engine.EAGER_HOST_MOE_S["fp8"] * 1e3,
                    "mla": engine.EAGER_HOST_MLA_S * 1e3}  # fmt: skip


def test_default_calibration_follows_the_architecture():
    fp8 = get_format("fp8")
    assert calibration(None, load_model("nemotron-3-nano-30b-a3b"), fp8).name == "vllm-0.25-h100-hybrid-fp8"
    assert calibration(None, load_model("qwen3-30b-a3b"), fp8).name == "vllm-0.25-h100-bf16"  # MoE layers: its moe_layer_us, moe_eager_layer_ms
    assert calibration(None, load_model("qwen3-30b-a3b"), get_format("bf16")).name == "vllm-0.25-h100-bf16"


def test_cli_predicts_with_its_calibration_and_refuses_bad_input():
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--concurrency", "1,64", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [p["concurrency"] for p in doc["variants"][0]["points"]] == [1, 64] and doc["calibration"]["name"] == "vllm-0.25-h100-bf16"
    assert "uniform MoE routing" in doc["assumptions"] and doc["assumptions"].endswith(plan_engine().pricing)  # vLLM's FP8 pricing, from its constants
    picked = {(m, q): json.loads(cli.invoke(app, ["predict", "--model", m, "--quant", q, "--concurrency", "1", "--json"]).output)["calibration"]["name"]
              for m, q in (("qwen3-30b-a3b", "fp8"), ("gpt-oss-20b", "mxfp4"), ("qwen3-8b", "fp8"))}  # fmt: skip
    assert picked == {("qwen3-30b-a3b", "fp8"): "vllm-0.25-h100-bf16", ("gpt-oss-20b", "mxfp4"): "vllm-0.25-h100-bf16", ("qwen3-8b", "fp8"): "vllm-0.25-h100-bf16"}
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--calibration", "nope"])
    assert res.exit_code == 2 and "--calibration 'nope' is not known" in res.output and "Traceback" not in res.output


def test_a_grid_cell_is_priced_as_a_batch_not_a_burst():
    """A level of one request a stream started together (servelab grid's cells: --closed-loop burst with --requests equal
    to the streams) is fitted and explained as predict's batch (1 request a stream), not as vllm bench serve's burst (2)."""
    from servelab.plan.fit import level_mode, measured_levels
    from servelab.store.results import RunResult

    run = RunResult.model_validate_json((ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json").read_text())
    grid = run.model_copy(update={"load": run.load.model_copy(update={"closed_loop": "burst", "requests": 8})})
    stagger = grid.model_copy(update={"load": grid.load.model_copy(update={"closed_loop": "stagger"})})
    assert [level_mode(grid, c) for c in (8, 16)] == ["batch", "burst"] and level_mode(stagger, 8) == "stagger"
    rows = {m.concurrency: m for m in measured_levels(grid, load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"))}
    assert rows[8].terms.mode == "batch" and rows[16].terms.mode == "burst" and rows[8].ttft_s == grid.levels[4].ttft_ms.mean / 1e3


def test_explain_puts_a_real_run_beside_the_prediction():
    """vLLM 0.25 on an H100 (the fixture run): every level as predicted within 15 %, the c=64 queue
    named with its cause; the Qwen3-Next hybrid on an H200 is put on the calibration, which was not
    fitted on such a model."""
    from servelab.rules.explain import explain
    from servelab.store.results import RunResult

    run = RunResult.model_validate_json((ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json").read_text())
    rows = explain(run, load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"), calibration("vllm-0.25-h100-bf16"))
    assert [r.concurrency for r in rows] == [1, 2, 4, 5, 8, 10, 16, 64]
    assert all(abs(r.tok_s_error) <= 0.15 and r.cause.startswith("as predicted") for r in rows)
    assert "server queueing (prefill_budget)" in rows[-1].cause and "CUDA-graph padding" in rows[3].cause
    hybrid = RunResult.model_validate_json((ROOT / "validation/hybrid-h200-bench/qwen3-next-80b-a3b-fp8-run.json").read_text())
    rows = explain(hybrid, load_model("qwen3-next-80b-a3b"), get_format("fp8"), load_hardware("h200"), calibration("vllm-0.25-h100-bf16"))
    assert all("calibration (vllm-0.25-h100-bf16) does not fit" in r.cause for r in rows)
    # the MoE at 128 streams on 64 slots (vLLM 0.25, H100): the queue is the slot cap, and 12 s were too short a window
    caps = RunResult.model_validate_json((ROOT / "validation/predict-h100/moe-caps-run.json").read_text())
    rows = explain(caps, load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h100-sxm"), calibration(None, load_model("qwen3-30b-a3b"), get_format("fp8")))
    assert "server queueing (slot_cap)" in rows[-1].cause and rows[-1].predicted.bottleneck == "slot cap / KV capacity"
    assert "window of under 3 request durations" in rows[-1].cause
    # the MoE measured cold (the MoE layer times' run): every level as predicted
    cold = RunResult.model_validate_json((ROOT / "validation/cold-h100/qwen3-30b-a3b-stagger-run.json").read_text())
    rows = explain(cold, load_model("qwen3-30b-a3b"), get_format("fp8"), load_hardware("h100-sxm"), calibration(None, load_model("qwen3-30b-a3b"), get_format("fp8")))
    assert [r.concurrency for r in rows] == [1, 4, 16, 64, 256] and all(r.cause.startswith("as predicted") for r in rows)
    # n-gram speculation: without the drafting time the gap is put on it
    ngram = RunResult.model_validate_json((ROOT / "validation/predict-h100/ngram-run.json").read_text())
    bare = calibration("vllm-0.25-h100-bf16").model_copy(update={"draft_overhead_ms": 0.0})
    rows = explain(ngram, load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"), bare)
    assert rows[0].cause.startswith("speculative decoding (3 draft tokens, acceptance 100%") and rows[0].tok_s_error > 0.3
    rows = explain(ngram, load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"), calibration("vllm-0.25-h100-bf16"))
    assert rows[0].cause.startswith("as predicted")
    res = cli.invoke(app, ["explain", str(ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json")])
    assert res.exit_code == 0 and "as predicted" in res.output, res.output
    res = cli.invoke(app, ["explain", str(ROOT / "README.md")])
    assert res.exit_code == 2 and "is not a servelab run" in res.output


def test_speculative_gain_follows_the_measured_ngram_run():
    """vLLM 0.25 on an H100, Qwen3-8B, 1,024 / 128 tokens: n-gram speculation (3 draft tokens, acceptance
    1.0) gave 352 vs 140 tok/s at 1 stream, 1,885 vs 895 at 8 and 3,794 vs 3,001 at 64
    (validation/predict-h100/): the gain falls with the batch, and predict follows it within 15 %."""
    measured = {1: 352 / 140, 8: 1885 / 895, 64: 3794 / 3001}
    args = ["predict", "--model", "qwen3-8b", "--concurrency", "1,8,64", "--input-tokens", "1024", "--output-tokens", "128", "--json",
            "--vary", "draft-tokens=0,3", "--acceptance", "1.0"]  # fmt: skip
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    base, spec = (v["points"] for v in json.loads(res.output)["variants"])
    gain = {p["concurrency"]: s["aggregate_tok_s"] / p["aggregate_tok_s"] for p, s in zip(base, spec)}
    assert gain[1] > gain[8] > gain[64] > 1
    assert all(gain[c] == pytest.approx(measured[c], rel=0.15) for c in measured), gain


def test_speculative_decoding_and_alternatives_compared():
    """K draft tokens at acceptance α: (1 − α^(K+1)) ÷ (1 − α) tokens per verify step of B·(1 + K)
    tokens; the gain shrinks as the batch grows (the verify step reads more experts and computes
    more). --vary prints every combination against the first."""
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--concurrency", "1,256", "--json", "--vary", "draft-tokens=0,2", "--vary", "quant=bf16,fp8"])
    assert res.exit_code == 0, res.output
    variants = {(v["settings"]["draft-tokens"], v["settings"]["quant"]): v["points"] for v in json.loads(res.output)["variants"]}
    assert set(variants) == {(0, "bf16"), (0, "fp8"), (2, "bf16"), (2, "fp8")}
    gain = [variants[(2, "bf16")][i]["aggregate_tok_s"] / variants[(0, "bf16")][i]["aggregate_tok_s"] for i in (0, 1)]
    # one stream gains, less than the 2.19 tokens per step (the drafter's 3.57 ms a step), 256 less (the verify step turns compute-bound)
    assert 1.3 < gain[0] < 2.19 and gain[1] < gain[0]
    assert variants[(0, "fp8")][0]["aggregate_tok_s"] > 1.5 * variants[(0, "bf16")][0]["aggregate_tok_s"]  # half the bytes per step
    table = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--concurrency", "1", "--vary", "max-num-seqs=64,256"])
    assert table.exit_code == 0 and "(+0%)" in table.output
    for bad, needle in ((["--vary", "gpus=2"], "--vary 'gpus=2'"), (["--vary", "tp=two"], "tp takes int values")):
        res = cli.invoke(app, ["predict", "--model", "qwen3-8b", *bad])
        assert res.exit_code == 2 and needle in res.output
    res = cli.invoke(app, ["predict", "--model", "qwen3-next-80b-a3b", "--hardware", "h200"])
    assert res.exit_code == 2 and "does not fit NVIDIA H200" in res.output
    # "NVFP4 + MTP-2 or FP8 without it?" on a Spark: FP8 does not fit, and the comparison says so instead of stopping
    args = ["predict", "--model", "qwen3.5-122b-a10b", "--hardware", "dgx-spark", "--concurrency", "1,8", "--vary", "quant=nvfp4,fp8", "--vary", "draft-tokens=2,0"]
    doc = json.loads(cli.invoke(app, [*args, "--json"]).output)
    assert [v["settings"]["quant"] for v in doc["variants"]] == ["nvfp4", "nvfp4"] and len(doc["not_fitting"]) == 2
    assert "in fp8 does not fit NVIDIA DGX Spark" in doc["not_fitting"][0]["why"]
    res = cli.invoke(app, args)
    assert res.exit_code == 0 and "quant fp8, tp 1, draft-tokens 0" in " ".join(res.output.split())


def test_calibrate_on_your_own_runs_then_predict_with_it(tmp_path):
    runs = [ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json", *sorted((ROOT / "validation/waves-h100-512").glob("stagger*-run.json"))]
    out = tmp_path / "cal.yaml"
    res = cli.invoke(app, ["calibrate", *map(str, runs), "--hardware", "h100-sxm", "--model", "qwen3-8b", "--name", "mine", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "leave-one-out: aggregate output tok/s median" in res.output
    cal = calibration(str(out))
    assert cal.name == "mine" and "stagger64-1-run.json" in cal.source and cal.error.startswith("leave-one-out")
    assert cal.gpu == "9.0"  # the --hardware's generation: a prior on it for tune's refit (fit.prior_widths)
    # without the burst runs these levels do not separate bandwidth from per-step overhead: said so
    assert (cal.bw_efficiency == 1.0) == ("sits at the edge of its range" in " ".join(res.output.split()))
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--concurrency", "1", "--calibration", str(out), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["calibration"]["name"] == "mine"
    # an MLA MoE's calibration shows the MoE and MLA layer times it carries (from the prior), as its file has them
    mla = cli.invoke(app, ["calibrate", str(ROOT / "validation/calibrate-h200/server1/deepseek-v2-lite-calibrate-run.json"), "--hardware", "h200",
                           "--model", str(ROOT / "validation/configs/deepseek-v2-lite")])  # fmt: skip
    shown = " ".join(mla.output.split())
    assert mla.exit_code == 0 and "moe_layer_us 8.23" in shown and "mla_layer_us 43.59" in shown and "mla_eager_layer_ms" not in shown, mla.output
    one = cli.invoke(app, ["calibrate", str(ROOT / "validation/waves-h100-512/stagger64-1-run.json"), "--hardware", "h100-sxm", "--model", "qwen3-8b"])
    assert one.exit_code == 2 and "at least 3 closed-loop levels" in one.output
    # a calibration's name is the user's text: shown as written, never read as Rich markup
    marked = cli.invoke(app, ["calibrate", *map(str, runs), "--hardware", "h100-sxm", "--model", "qwen3-8b", "--name", "[red]x[/red]", "--out", str(out)])
    assert marked.exit_code == 0 and "[red]x[/red]: bw_efficiency" in marked.output, marked.output
    for cmd in (["predict", "--model", "qwen3-8b", "--concurrency", "1"], ["explain", str(runs[0]), "--hardware", "h100-sxm", "--model", "qwen3-8b"]):
        shown = cli.invoke(app, [*cmd, "--calibration", str(out)])
        assert shown.exit_code == 0 and "[red]x[/red]" in "".join(shown.output.split()), shown.output
    (tmp_path / "bad.yaml").write_text("mine: [1, 2]\n")
    bad = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--calibration", str(tmp_path / "bad.yaml")])
    assert bad.exit_code == 2 and "not a calibration file" in bad.output
    # a file from before the per-layer step time: told what to do, on one line
    old = yaml.safe_load(out.read_text())
    for value in old.values():
        value["step_overhead_ms"] = value.pop("layer_overhead_us") * 36 / 1e3
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    stale = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--calibration", str(tmp_path / "old.yaml")])
    assert stale.exit_code == 2 and "run servelab calibrate --out on its runs again" in " ".join(stale.output.split())
    (tmp_path / "range.yaml").write_text(out.read_text().replace("bw_efficiency:", "bw_efficiency: 7 #", 1))
    ranged = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--calibration", str(tmp_path / "range.yaml")])
    assert ranged.exit_code == 2 and "bw_efficiency: Input should be less than or equal to 1.5" in " ".join(ranged.output.split())


def test_calibrate_from_the_runs_database(tmp_path):
    """Runs imported into the runs database (servelab import) calibrate by filter, without their files."""
    import shutil

    db = str(tmp_path / "runs.db")
    for i, path in enumerate([ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json", ROOT / "validation/predict-h100/dense-run.json",
                              ROOT / "validation/predict-h100/moe-run.json"]):  # fmt: skip
        (tmp_path / f"r{i}").mkdir()
        shutil.copy(path, tmp_path / f"r{i}" / "run.json")
        assert cli.invoke(app, ["import", str(tmp_path / f"r{i}"), "--db", db]).exit_code == 0
    res = cli.invoke(app, ["calibrate", "--stored", "model=qwen3-8b", "--stored", "engine=vllm", "--db", db, "--hardware", "h100-sxm", "--out", str(tmp_path / "c.yaml")])
    assert res.exit_code == 0, res.output
    cal = calibration(str(tmp_path / "c.yaml"))
    assert cal.source.count("stored run") == 2 and "leave-one-out" in cal.error  # the MoE run did not match the filter
    for bad, needle in ((["--stored", "gpu=h100"], "--stored 'gpu=h100': give KEY=TEXT"), ([], "calibrate needs runs")):
        res = cli.invoke(app, ["calibrate", *bad, "--db", db, "--hardware", "h100-sxm"])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_plot_draws_the_curves_and_measured_runs_over_them(tmp_path):
    out = tmp_path / "curve.png"
    res = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--concurrency", "1,64,256", "--plot", str(out),
                           "--overlay", str(ROOT / "validation/waves-h100/stagger-1-run.json"), "--vary", "quant=bf16,fp8"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_tensor_parallel_adds_two_all_reduces_per_layer():
    """TP 2 over two DGX Sparks (200 Gb/s): each decode step pays 2 all-reduces per layer, each the
    profile's latency plus 2·(tp−1)/tp of the BF16 activations over 25 GB/s."""
    spec, fmt, hw = load_model("qwen3.5-122b-a10b"), get_format("nvfp4"), load_hardware("dgx-spark")
    limits = limits_for(spec, fmt, hw, tp=2, input_tokens=1024, output_tokens=256)
    t = terms(spec, fmt, hw, concurrency=4, input_tokens=1024, output_tokens=256, limits=limits, tp=2)
    assert t.allreduce_s == pytest.approx(2 * len(spec.layers) * (30e-6 + 1 * t.padded * spec.hidden_size * 2 / 25e9))
    assert terms(spec, fmt, hw, concurrency=4, input_tokens=1024, output_tokens=256, limits=limits, tp=1).allreduce_s == 0
    pt = predict(t, calibration("vllm-0.25-h100-bf16"), concurrency=4, output_tokens=256)
    assert pt.decode_step_s > t.allreduce_s  # added to the step, not scaled by the efficiencies


def test_repeated_runs_that_disagree_are_an_unstable_measurement():
    """Three server starts on vLLM 0.25 (validation/waves-h100*): burst waves put TTFT p50 at
    1,034–2,812 ms (unstable), the steady state at 71–78 ms (stable); runs of different loads are refused."""
    from servelab.rules.explain import repeatability
    from servelab.store.results import RunResult

    def runs(pattern):
        return [RunResult.model_validate_json(p.read_text()) for p in sorted(ROOT.glob(pattern))]

    (burst,) = repeatability(runs("validation/waves-h100/burst-*-run.json"))
    assert burst.unstable and burst.ttft_spread > 1 and burst.tok_s_spread < 0.05
    (steady,) = repeatability(runs("validation/waves-h100-512/stagger64-*-run.json"))
    assert not steady.unstable and steady.runs == 3
    with pytest.raises(ServelabError, match="not of the same load"):
        repeatability(runs("validation/waves-h100-512/stagger*-1-run.json"))
    res = cli.invoke(app, ["explain", *map(str, sorted(ROOT.glob("validation/waves-h100/burst-*-run.json"))), "--hardware", "h100-sxm", "--model", "qwen3-8b"])
    assert res.exit_code == 0 and "unstable measurement" in res.output, res.output


def test_bench_with_a_hardware_profile_puts_the_prediction_beside_the_run(tmp_path, monkeypatch):
    """On the plan's engine (the fault server answers as vLLM) with --hardware, the bench's output
    ends with the explain table; the fault server streams far faster than any H100, which the table
    puts on the level's findings (a ceiling exceeded)."""
    from test_fault_suite import fault_server

    from servelab.cli import common

    monkeypatch.setattr(common.console, "width", 300)  # one line per row, whatever the terminal
    with fault_server() as url:
        res = cli.invoke(app, ["bench", "--url", url, "--concurrency", "2", "--requests", "6", "--warmup", "0", "--input-tokens", "64",
                               "--output-tokens", "64", "--hardware", "h100-sxm", "--model-config", "qwen3-8b", "--output", str(tmp_path / "run")],
                         )  # fmt: skip  # 64 tokens: 8 could reach the client in one read (no TPOT, no level to explain)
    assert res.exit_code == 0, res.output
    assert "measured vs servelab predict (NVIDIA H100 SXM5 80GB)" in res.output and "faster than the roofline" in res.output


def test_a_larger_largest_capture_size_puts_the_prompt_steps_in_graphs():
    """A MoE steady state whose steps with prompts run without CUDA graphs: predict names it, says
    how to compare a larger largest capture size, and --vary max-capture-size predicts the gain
    that was measured on one H100 (validation/capture-h100/: Qwen3-30B-A3B fp8, 512/128, 16 streams
    867 → 1,287 tok/s with graphs up to 2,048 tokens; predicted 861 → 1,395)."""
    args = ["predict", "--model", "qwen3-30b-a3b", "--quant", "fp8", "--input-tokens", "512", "--output-tokens", "128", "--concurrency", "4,16"]
    res = cli.invoke(app, args)
    assert res.exit_code == 0 and "--vary max-capture-size=512,2048" in res.output and "--max-cudagraph-capture-size 2048" in res.output
    doc = json.loads(cli.invoke(app, [*args, "--json", "--vary", "max-capture-size=512,2048"]).output)
    (default, larger) = ([p for p in v["points"]] for v in doc["variants"])
    assert default[1]["bottleneck"] == "prefill, in steps without CUDA graphs" and larger[1]["bottleneck"] != default[1]["bottleneck"]
    gain = larger[1]["aggregate_tok_s"] / default[1]["aggregate_tok_s"]
    assert 1.3 < gain < 1.7  # measured 1.48 (vLLM's sizes and nine more) and 1.61 (--max-cudagraph-capture-size 2048, another machine)
    served = json.loads(cli.invoke(app, [*args, "--json", "--max-capture-size", "2048"]).output)["variants"][0]
    assert [p["aggregate_tok_s"] for p in served["points"]] == [p["aggregate_tok_s"] for p in larger] and max(served["limits"]["capture_sizes"]) == 2048
    dense = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--input-tokens", "512", "--output-tokens", "128", "--concurrency", "4,16"])
    assert dense.exit_code == 0 and "max-capture-size" not in dense.output  # a dense bf16 step with a prompt hides its launches: no hint
    for bad, needle in ((["--vary", "max-capture-size=0,2048"], "max-capture-size takes values of 1 or more"),
                        (["--capture-sizes", "1,2,4", "--max-capture-size", "2048"], "--capture-sizes and --max-capture-size: give one")):  # fmt: skip
        res = cli.invoke(app, [*args, *bad])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_prefill_is_put_on_missing_graphs_only_for_the_prompt_steps_own_eager_time():
    """A decode batch above the largest capture size already runs without graphs: the prompts then
    add no eager time of their own, so their share of TPOT is plain prefill."""
    spec, fmt, hw = load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm")
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=1024, output_tokens=128, capture_sizes=[1, 2, 4, 8, 16, 32, 64, 128])
    t = terms(spec, fmt, hw, concurrency=256, input_tokens=1024, output_tokens=128, limits=limits)
    assert t.decode_eager and t.mixed_eager
    cal = calibration("vllm-0.25-h100-bf16").model_copy(update={"eager_step_ms": 60.0})
    assert predict(t, cal, concurrency=256, output_tokens=128).bottleneck == "prefill"


def test_cold_held_out_errors_hold():
    """validation/predict_cold.py's errors on cold runs no calibration was fitted on (issue 38):
    other dense model sizes (Qwen3-14B, Qwen3-32B, the 62-layer Gemma-3-27B, the 80-layer
    Llama-3.1-70B in FP8), another GPU (H200) for the dense and the MoE model, MoE models with wider
    experts (Mixtral-8x7B, Qwen2-57B-A14B), bursts (vllm bench serve) and the steady state; each bound held a little
    above what it measured, every one of the four figures checked, so that a model change that
    loses ground fails here. The token budget's cohort split (cohorts.cohorts, issue 52) and the MoE
    layer times refitted with it moved some MoE rows by 0.1–1.5 points either way; their bounds
    moved with them."""
    spec = importlib.util.spec_from_file_location("predict_cold", ROOT / "validation" / "predict_cold.py")
    cold = importlib.util.module_from_spec(spec)
    sys.modules["predict_cold"] = cold  # its dataclass looks its module up
    spec.loader.exec_module(cold)
    raw = cold.main()
    res = {title.split(":")[1].split(",")[0].strip(): errs for title, errs in raw.items() if not title.startswith("the same")}
    for name, held in cold.bands(raw).items():  # predict's band is validation/bands.py's over these tables' points and the kept-back sets' (tests/test_kept_back.py)
        shipped = band_for(load_model({"dense": "qwen3-8b", "moe": "qwen3-30b-a3b"}[name]), "fp8")
        assert shipped.family_class == name and shipped.points > held["points"] and held["tok_s"] <= shipped.tok_s
        assert held["ttft"] <= (shipped.ttft if name == "dense" else 0.64)  # the MoE tables' TTFT alone, their bursts' p99 among them, 63 %: wider than the pooled 55 %
    med = {name: (statistics.median(e["tok_s"]), max(e["tok_s"]), statistics.median(e["ttft"]), max(e["single"], default=0.0)) for name, e in res.items()}
    bounds = {  # tok/s median, worst, TTFT median, single-stream TPOT worst, all %
        "Qwen3-14B bf16": (4.5, 7, 11, 4.5),  # its bursts' TTFT mean 11-16 % high with the power-capped clock (RESULTS-predict.md)
        "Qwen3-32B bf16": (2.5, 4.5, 11, 2.5),  # another size and another GPU (H200)
        "Gemma-3-27B bf16 (62 layers)": (2, 4, 12, 1),
        "Llama-3.1-70B fp8 (80 layers)": (1.5, 5, 8, 1.5),
        "Qwen3-32B fp8": (2.5, 5, 8, 3),  # the FP8 constants were measured on it (engines/vllm.py)
        "Qwen3-8B bf16": (3.5, 7, 10, 5),  # on an H200
        "Qwen3-30B-A3B fp8": (5, 19, 27, 1.5),  # on an H200
        "Mixtral-8x7B fp8 (8 experts of 14": (7, 27.5, 34, 2),
        "Qwen2-57B-A14B fp8 (64 experts of 2": (2, 6, 23, 3.5),
        "Mixtral-8x7B fp8 again": (7.5, 16.5, 23, 1),  # the same server on another H100 machine: 17–19 % slower at 64 streams
        "Qwen3-30B-A3B fp8 again": (4.5, 15, 13, 1),  # the MoE fit's model on a fourth H100 machine (4–64 streams): 19 % slower at 16 in the steady state
        "Qwen3-30B-A3B bf16": (7, 21, 32, 3),  # FP8's MoE term measured on it (engines/vllm.py); a fifth H100 machine, its eager steps 3 × a sixth's
        "Mixtral-8x7B fp8 on a sixth H100 machine": (7.5, 10, 3, 1),  # steady state, 4–64 streams (capture-h100/): no single stream
        "Mixtral-8x7B fp8 with CUDA graphs up to 2": (2, 3, 1.5, 1),  # the same machine, graphs up to 2,048 tokens
        "Qwen3-30B-A3B fp8 on the sixth H100 machine": (5.5, 7.5, 7.5, 1),
        "Qwen3-30B-A3B fp8 with CUDA graphs up to 2": (9, 26, 18, 1),  # its prefill inside graphs 1.5 × predict's (validation/RESULTS-predict.md)
        "Qwen3-30B-A3B fp8 on an eighth H100 machine": (9, 13, 32, 1),
        "Qwen3-30B-A3B fp8 routing each token to 4 of its experts": (2, 3.5, 37, 1),  # the same layers, top 4 of 128 experts (topk-h100/)
        "Qwen3-30B-A3B fp8 routing each token to 2 of its experts": (17, 30, 39, 1),  # top 2: its 16 streams ran in synchronized waves
        "Mixtral-8x7B fp8 on a ninth H100 machine": (9, 13.5, 26, 1),  # three repeats a level (repeats-h100/): 64 streams 1,620-1,681 tok/s
        "Qwen3-30B-A3B fp8 on the ninth machine": (7.5, 11, 48, 1),
    }
    assert set(med) == set(bounds)
    over = {name: (got, bounds[name]) for name, got in med.items() if any(g >= b for g, b in zip(got, bounds[name], strict=True))}
    assert not over
    gains = cold.capture_gain(calibration("vllm-0.25-h100-bf16"))  # graphs up to 2,048 tokens, measured and predicted gain per level
    moe, dense = [g for g in gains if "fp8" in g[0]], [g for g in gains if "dense" in g[0]]
    assert len(moe) == 9 and all(measured > 5 and predicted > 5 for _, _, measured, predicted in moe)  # every MoE level gains, and predict says so
    assert len(dense) == 3 and all(abs(measured) < 3 and abs(predicted) < 4 for _, _, measured, predicted in dense)  # a dense model hardly does


def _small_moe(model: str, c: int, *, mode: str = "stagger", hw: str = "h200"):
    spec, fmt, h = load_model(str(ROOT / "validation/configs" / model)), get_format("bf16"), load_hardware(hw)
    limits = limits_for(spec, fmt, h, tp=1, input_tokens=512, output_tokens=128)
    return terms(spec, fmt, h, concurrency=c, input_tokens=512, output_tokens=128, limits=limits, mode=mode)


def test_no_step_is_faster_than_the_hosts_time_for_it():
    """OLMoE-1B-7B's one-stream step prices 1.48 ms of GPU work; vLLM 0.25 on the H200 hosts measured 1.82 ms (vllm bench
    serve) and 1.95 (servelab bench): the host's time per step (``STEP_HOST_S`` 1.9 ms, and ``STEP_HOST_SEQ_S`` 22 µs more
    for each other sequence; asynchronous scheduling overlaps it with the GPU's) is the floor, on Hopper only, in the steady
    state and under a burst's steps alike. Llama-3.2-1B's decode grew with the batch although its GPU work barely does
    (bursts, the fourth kept-back set: TPOT 2.36 ms at 16 streams, 3.90 at 64, where its GPU work prices 1.59 and 2.27; the
    per-sequence term was fitted there, not held out); a 40-layer
    model's step is above the floor and does not move."""
    cal = calibration("vllm-0.25-h100-bf16")
    t = _small_moe("olmoe-1b-7b", 1)
    assert plan_engine().step_host_s(load_hardware("h200")) == (t.step_host_s, t.step_host_seq_s, t.host_queue) == pytest.approx((1.9e-3, 22e-6, 1.21))
    assert plan_engine().step_host_s(load_hardware("dgx-spark")) == (0.0, 0.0, 0.0)
    got, without = predict(t, cal, concurrency=1, output_tokens=128), predict(dataclasses.replace(t, step_host_s=0.0), cal, concurrency=1, output_tokens=128)
    assert without.tpot_s < 1.6e-3 and got.tpot_s == pytest.approx(1.9e-3) and got.decode_step_s == pytest.approx(1.9e-3)
    assert got.bottleneck == "the host's time per step" and without.bottleneck != got.bottleneck
    burst = _small_moe("olmoe-1b-7b", 1, mode="burst")
    assert predict(burst, cal, concurrency=1, output_tokens=128).tpot_s == pytest.approx(1.9e-3, rel=0.01)
    for c, measured in ((16, 2.36e-3), (64, 3.90e-3)):  # the decode of a burst at c streams: 1.9 ms + 22 µs × (c − 1) at least
        llama = _small_moe("llama-3.2-1b", c, mode="burst")
        tpot = predict(llama, cal, concurrency=c, output_tokens=128).tpot_s
        assert tpot >= 1.9e-3 + 22e-6 * (c - 1) and abs(tpot / measured - 1) < 0.05
        assert predict(llama, cal, concurrency=c, output_tokens=128).bottleneck == "the host's time per step"
        assert predict(dataclasses.replace(llama, step_host_seq_s=0.0), cal, concurrency=c, output_tokens=128).tpot_s < 0.9 * measured
    steady = waved(_small_moe("llama-3.2-1b", 64))  # the steady state (in waves): the decode steps and the steps with prompts each floored, once
    raw = predict(dataclasses.replace(steady, step_host_s=0.0, step_host_seq_s=0.0), cal, concurrency=64, output_tokens=128)
    f, host = steady.mixed_share, 1.9e-3 + 22e-6 * 63
    mixed = raw.decode_step_s + (raw.tpot_s - raw.decode_step_s) / f
    assert mixed > host > raw.decode_step_s
    assert predict(steady, cal, concurrency=64, output_tokens=128).tpot_s == pytest.approx((1 - f) * host + f * mixed)
    big = _small_moe("mistral-small-24b", 1)
    floored = predict(big, cal, concurrency=1, output_tokens=128)
    assert floored.host_share < 0.5 and dataclasses.replace(floored, host_share=0.0) == predict(dataclasses.replace(big, step_host_s=0.0), cal, concurrency=1, output_tokens=128)


def test_a_host_bound_steady_state_rides_in_waves_and_waits_in_the_hosts_queue():
    """Where the host's time per step is at least half the decode step's GPU time (``HOST_SHARE``, fully from 0.55), the steady
    state's prompts ride in waves of one prompt for every ``WAVE`` 5.75 running streams (OLMoE-1B-7B and Granite-3.1-3B-A800M
    measured 3.1 and 5.0 a step at 16 streams, 9.9 and 10.1 at 64) and each request waits ``HOST_QUEUE`` · B · h₁ in the host's
    queue, as a burst's (docs/metrics.md); predict prices the waved terms. Not where the host does not bind (a 24 B dense model), nor on a
    GPU whose host was not measured."""
    cal = calibration("vllm-0.25-h100-bf16")
    small = _small_moe("llama-3.2-1b", 64)
    waves = waved(small)
    assert waves.mixed_share == pytest.approx(small.prompts_per_step / (64 / 5.75)) and small.mixed_share > 2 * waves.mixed_share
    got = predict(small, cal, concurrency=64, output_tokens=128)
    assert got.host_share >= 0.55 and got.host_queue_s == pytest.approx(1.21 * 64 * 1.9e-3)
    unwaved = predict(dataclasses.replace(small, step_host_s=0.0, step_host_seq_s=0.0, host_queue=0.0), cal, concurrency=64, output_tokens=128)
    waved_raw = predict(dataclasses.replace(waves, step_host_s=0.0, step_host_seq_s=0.0, host_queue=0.0), cal, concurrency=64, output_tokens=128)
    assert waved_raw.tpot_s < unwaved.tpot_s  # fewer steps carry prompts
    no_queue = predict(dataclasses.replace(small, host_queue=0.0), cal, concurrency=64, output_tokens=128)
    assert got.ttft_s == pytest.approx(no_queue.ttft_s + got.host_queue_s) and got.aggregate_tok_s < no_queue.aggregate_tok_s
    four = _small_moe("llama-3.2-1b", 4)
    assert waved(small, 0.0) is small and waved(four) is four  # 4 streams: no wave beyond m₀
    big = predict(_small_moe("mistral-small-24b", 64), cal, concurrency=64, output_tokens=128)
    assert big.host_share < 0.5 and big.host_queue_s == 0.0
    spark = _small_moe("llama-3.2-1b", 64, hw="dgx-spark")
    assert predict(spark, cal, concurrency=64, output_tokens=128).host_queue_s == 0.0


def test_a_host_bound_bursts_requests_wait_in_the_hosts_queue():
    """A host-bound burst's every request waits ``HOST_QUEUE`` · B · h₁ in the host's queue before it reaches the engine (vllm
    bench serve's mean TTFT of ~1 B models' 64-stream bursts: 200–400 ms, every request alike, where the engine's steps price
    80–250; docs/metrics.md): its TTFT mean and E2E grow by about that and its tok/s falls. Not a single stream's, nor a burst
    the host does not bind (a 24 B dense model), nor on a GPU whose host was not measured."""
    cal = calibration("vllm-0.25-h100-bf16")
    small = _small_moe("llama-3.2-1b", 64, mode="burst")
    got, without = predict(small, cal, concurrency=64, output_tokens=128), predict(dataclasses.replace(small, host_queue=0.0), cal, concurrency=64, output_tokens=128)
    assert got.host_share >= 0.55 and got.host_queue_s == pytest.approx(1.21 * 64 * 1.9e-3) and without.host_queue_s == 0.0
    assert got.ttft_mean_s == pytest.approx(without.ttft_mean_s + got.host_queue_s, rel=0.05) and got.e2e_s > without.e2e_s + 0.9 * got.host_queue_s
    assert got.aggregate_tok_s < 0.9 * without.aggregate_tok_s
    assert predict(_small_moe("llama-3.2-1b", 1, mode="burst"), cal, concurrency=1, output_tokens=128).host_queue_s == 0.0
    assert predict(_small_moe("mistral-small-24b", 64, mode="burst"), cal, concurrency=64, output_tokens=128).host_queue_s == 0.0
    assert predict(_small_moe("llama-3.2-1b", 64, mode="burst", hw="dgx-spark"), cal, concurrency=64, output_tokens=128).host_queue_s == 0.0


def test_the_host_bound_regime_keeps_the_curve_continuous():
    """The waves and the queue ramp in (``host_weight``: the host's share from 0.5 to 0.55, and out as a prompt a decode step
    nears, k from ½ to 1, where waves have no decode-only steps to form between) instead of switching, so that neighbouring
    levels stay neighbours (capacity and tune walk the curve): between adjacent stream counts, across the regime's edges, TTFT
    moves less than 10 % + 30 ms (it switched by 356 ms from 62 to 63 streams on GLM-4-9B before the ramp) and tok/s less than 6 %,
    in the steady state and in bursts (their TTFT mean)."""
    cal = calibration("vllm-0.25-h100-bf16")
    for model, mode in (("llama-3.2-1b", "stagger"), ("glm-4-9b", "stagger"), ("llama-3.2-1b", "burst"), ("glm-4-9b", "burst")):  # a burst's queue ramps too
        prev = None
        for c in range(48, 140):
            p = predict(_small_moe(model, c, mode=mode), cal, concurrency=c, output_tokens=128)
            if prev:
                assert abs(p.ttft_mean_s - prev.ttft_mean_s) < 0.1 * prev.ttft_mean_s + 0.03 and abs(p.aggregate_tok_s / prev.aggregate_tok_s - 1) < 0.06, (model, mode, c)
            prev = p
    assert host_weight(_small_moe("llama-3.2-1b", 140), 2.0) == 0.0 and host_weight(_small_moe("llama-3.2-1b", 64), 0.5) == 0.0
    assert host_weight(_small_moe("llama-3.2-1b", 64), 0.525) == pytest.approx(0.5)


def test_a_host_bound_point_carries_the_hosts_band():
    """predict --json gives a host-bound point the wider of its class's band and the host's (servelab/data/bands.yaml
    ``host``: 25 % on tok/s, 80 % on TTFT: the truth its prediction is within ± that of), and marks it; a point the host does not
    bind keeps its class's."""
    out = cli.invoke(app, ["predict", "--model", str(ROOT / "validation/configs/llama-3.2-1b"), "--hardware", "h200", "--concurrency", "1,64", "--json"])
    assert out.exit_code == 0, out.output
    points = json.loads(out.output)["variants"][0]["points"]
    for p in points:
        assert p["band"]["host_bound"] and p["band"]["aggregate_tok_s"] == pytest.approx([p["aggregate_tok_s"] / 1.25, p["aggregate_tok_s"] / 0.75])
        assert p["band"]["ttft_s"] == pytest.approx([p["ttft_s"] / 1.80, p["ttft_s"] / 0.20])
    out = cli.invoke(app, ["predict", "--model", str(ROOT / "validation/configs/mistral-small-24b"), "--hardware", "h200", "--concurrency", "64", "--json"])
    p = json.loads(out.output)["variants"][0]["points"][0]
    assert not p["band"]["host_bound"] and p["band"]["aggregate_tok_s"] == pytest.approx([p["aggregate_tok_s"] / 1.14, p["aggregate_tok_s"] / 0.86])


def test_explain_names_the_host_where_it_binds():
    """issue 53 (5): ``servelab explain`` on a host-bound server's run (the fifth kept-back set's Qwen3-0.6B) names the host's
    terms (its share of the step, the host's queue in ms) where a level's TTFT departs from the curve (4 streams: 24.6 ms measured,
    38.6 priced, its step with prompts at the host's launches), not where it agrees (16 and 32 streams, since the steady state's
    queue took the bursts' constant); a server the host does not bind (MiniMax-M2.5's cut at 16 and 32 streams) gets none."""
    from servelab.cli.predict import read_run
    from servelab.rules.explain import explain

    data = ROOT / "validation" / "kept-back5-h200"
    cal, hw, bf16 = calibration("vllm-0.25-h100-bf16"), load_hardware("h200"), get_format("bf16")
    rows = explain(read_run(data / "qwen3-0.6b-stagger-run.json"), load_model(str(ROOT / "validation/configs/qwen3-0.6b")), bf16, hw, cal)
    hosted = {r.concurrency: r.cause for r in rows if "the host binds" in r.cause}
    assert set(hosted) == {4} and all("in the host's queue" in cause for cause in hosted.values())
    rows = explain(read_run(data / "minimax-m2.5-8l-stagger-run.json"), load_model(str(ROOT / "validation/configs/minimax-m2.5-8l")), bf16, hw, cal)
    assert not [r for r in rows if r.concurrency >= 16 and "the host binds" in r.cause]
