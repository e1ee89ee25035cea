#!/usr/bin/env python3
"""Leave-one-model-out and leave-one-GPU-out errors of ``servelab predict`` on the cold runs of
validation/cold_gpu.py (issue 38): every prediction below comes from a calibration fitted without
that model or without that GPU.

- bursts: ``vllm bench serve --max-concurrency C --num-prompts 2C --request-rate inf``, the prefix
  cache reset and a seed per level (0 hits, but 0.7 % of the prompt tokens on Mixtral at 256), no
  JIT compile inside a level; predicted by the step-by-step scheduler (servelab/plan/burst.py);
  TTFT compared as mean and p99 (a burst's TTFT is bimodal);
- steady state: ``servelab bench`` (stagger), every prompt unique, 20 s per level; TTFT p50.
  Levels with a ``short_window`` finding (256 streams: 2.3 request durations) are listed, not scored.

Usage: ``python validation/predict_cold.py`` (no GPU; reads validation/cold-h100*/, cold-h200/ and the
runs of validation/predict_loo.py); tests/test_predict.py holds its summary to the bounds it reports.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "validation"))

from predict_loo import RUNS, SHORT, levels, moe_levels  # noqa: E402

from servelab.metrics.bootlog import parse_bootlog  # noqa: E402
from servelab.plan.calibration import Calibration  # noqa: E402
from servelab.plan.fit import Measured, fit, fit_moe  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.limits import limits_for  # noqa: E402
from servelab.plan.predict import predict  # noqa: E402
from servelab.plan.terms import terms  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402

V = ROOT / "validation"
MODELS = {  # name → (model reference, format)
    "qwen3-8b": ("qwen3-8b", "bf16"),
    "qwen3-14b": (str(V / "configs/qwen3-14b"), "bf16"),
    "qwen3-32b": (str(V / "configs/qwen3-32b"), "bf16"),
    "qwen3-30b-a3b": ("qwen3-30b-a3b", "fp8"),
    "mixtral-8x7b": (str(V / "configs/mixtral-8x7b"), "fp8"),
    "gemma-3-27b": (str(V / "configs/gemma-3-27b"), "bf16"),
    "llama-3.1-70b": (str(V / "configs/llama-3.1-70b"), "fp8"),
    "qwen3-32b-fp8": (str(V / "configs/qwen3-32b"), "fp8"),
    "qwen2-57b-a14b": (str(V / "configs/qwen2-57b-a14b"), "fp8"),
    "qwen3-30b-a3b-bf16": ("qwen3-30b-a3b", "bf16"),
    "mixtral-8x7b-capture2048": (str(V / "configs/mixtral-8x7b"), "fp8"),  # CUDA graphs captured up to 2,048 tokens (cold_gpu.py --capture-sizes)
    "qwen3-30b-a3b-capture2048": ("qwen3-30b-a3b", "fp8"),
    "qwen3-30b-a3b-max2048": ("qwen3-30b-a3b", "fp8"),  # vLLM's own sizes up to 2,048 (cold_gpu.py --max-capture-size)
    "qwen3-14b-max2048": (str(V / "configs/qwen3-14b"), "bf16"),
    "qwen3-30b-a3b-top2": (str(V / "configs/qwen3-30b-a3b-top2"), "fp8"),  # each token routed to 2 experts, not 8 (cold_gpu.py)
    "qwen3-30b-a3b-top4": (str(V / "configs/qwen3-30b-a3b-top4"), "fp8"),
    "mixtral-8x7b-repeats3": (str(V / "configs/mixtral-8x7b"), "fp8"),  # each level measured three times on one server (cold_gpu.py --repeats)
    "qwen3-30b-a3b-repeats2": ("qwen3-30b-a3b", "fp8"),
}
HARDWARE = {"cold-h100": "h100-sxm", "cold-h100-rerun": "h100-sxm", "cold-h100-machine4": "h100-sxm", "cold-h100-machine5": "h100-sxm", "cold-h200": "h200",
            "capture-h100": "h100-sxm", "capture-h100-machine7": "h100-sxm", "topk-h100": "h100-sxm",
            "repeats-h100": "h100-sxm"}  # fmt: skip  # -rerun, -machine4, -machine5, capture-*: other H100 machines


@dataclass(frozen=True)
class Burst:
    """One burst level of vllm bench serve: tok/s, TTFT mean and p99 (s), TPOT mean (s)."""

    concurrency: int
    terms: object
    output_tokens: int
    tok_s: float
    ttft_mean_s: float
    ttft_p99_s: float
    tpot_s: float


def bursts(folder: str, model: str) -> list[Burst]:
    """A cold run's burst levels with the model's terms (the server's limits from its boot log); none for a
    steady-state run alone (cold_gpu.py --stagger-only)."""
    if not (V / folder / f"{model}-bursts.json").exists():
        return []
    data = json.loads((V / folder / f"{model}-bursts.json").read_text())
    ref, quant = MODELS[model]
    spec, fmt, hw = load_model(ref), get_format(quant), load_hardware(HARDWARE[folder])
    boot = parse_bootlog((V / folder / f"{model}-boot.log").read_text())
    out = []
    for lv in data["levels"]:
        p, o = round(lv["total_input_tokens"] / lv["completed"]), data["output_tokens"]
        lim = limits_for(spec, fmt, hw, tp=1, input_tokens=p, output_tokens=o, max_num_seqs=boot.max_num_seqs,
                         max_num_batched_tokens=boot.max_num_batched_tokens, capture_sizes=boot.cudagraph_sizes)  # fmt: skip
        t = terms(spec, fmt, hw, concurrency=lv["concurrency"], input_tokens=p, output_tokens=o, limits=lim, mode="burst")
        out.append(Burst(lv["concurrency"], t, o, lv["output_throughput"], lv["mean_ttft_ms"] / 1e3, lv["p99_ttft_ms"] / 1e3, lv["mean_tpot_ms"] / 1e3))
    return out


def stagger(folder: str, model: str) -> list[Measured]:
    ref, quant = MODELS[model]
    return levels(V / folder / f"{model}-stagger-run.json", ref, quant, HARDWARE[folder])


def err(pred: float, meas: float) -> float:
    return 100 * (pred - meas) / meas


def score(title: str, cal: Calibration, burst: list[Burst], steady: list[Measured]) -> dict:
    """Print one held-out block's table; its errors (absolute %) by kind."""
    print(f"\n### {title}\n\ncalibration: η_bw {cal.bw_efficiency:.2f}, η_c {cal.compute_efficiency:.2f}, t_ℓ {cal.layer_overhead_us:.1f} µs per layer, "
          f"t_eager {cal.eager_step_ms:.2f} ms, MoE layer {cal.moe_layer_us:.1f} µs and {cal.moe_eager_layer_ms:.2f} ms without CUDA graphs\n\n| mode | c | tok/s meas / pred | err | TTFT ms meas / pred | err | TTFT p99 ms meas / pred | err | TPOT ms meas / pred | err |\n"
          "|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    errs: dict[str, list[float]] = {"tok_s": [], "ttft": [], "single": []}
    for b in burst:
        pt = predict(b.terms, cal, concurrency=b.concurrency, output_tokens=b.output_tokens)
        e = (err(pt.aggregate_tok_s, b.tok_s), err(pt.ttft_mean_s, b.ttft_mean_s), err(pt.ttft_p99_s, b.ttft_p99_s), err(pt.tpot_s, b.tpot_s))
        errs["tok_s"].append(abs(e[0]))
        errs["ttft"] += [abs(e[1]), abs(e[2])]
        print(f"| burst | {b.concurrency} | {b.tok_s:,.0f} / {pt.aggregate_tok_s:,.0f} | {e[0]:+.1f} % | {b.ttft_mean_s * 1e3:,.0f} / {pt.ttft_mean_s * 1e3:,.0f} (mean) | "
              f"{e[1]:+.1f} % | {b.ttft_p99_s * 1e3:,.0f} / {pt.ttft_p99_s * 1e3:,.0f} | {e[2]:+.1f} % | {b.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} (mean) | {e[3]:+.1f} % |")  # fmt: skip
    for m in steady:
        pt = predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens)
        e = (err(pt.aggregate_tok_s, m.tok_s), err(pt.ttft_s, m.ttft_s), err(pt.tpot_s, m.tpot_s))
        errs["tok_s"].append(abs(e[0]))
        errs["ttft"].append(abs(e[1]))
        if m.concurrency == 1:
            errs["single"].append(abs(e[2]))
        print(f"| stagger | {m.concurrency} | {m.tok_s:,.0f} / {pt.aggregate_tok_s:,.0f} | {e[0]:+.1f} % | {m.ttft_s * 1e3:,.0f} / {pt.ttft_s * 1e3:,.0f} (p50) | "
              f"{e[1]:+.1f} % | – | – | {m.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} (p50) | {e[2]:+.1f} % |")  # fmt: skip
    return errs


def summary(errs: dict[str, list[float]]) -> str:
    def stats(v: list[float]) -> str:
        return f"{statistics.median(v):.1f} % / {max(v):.1f} %" if v else "–"

    return f"{stats(errs['tok_s'])} | {stats(errs['ttft'])} | {stats(errs['single'])}"


def group(name: str, *, without: str | None = None) -> list[Measured]:
    """The steady-state levels of a shipped calibration's runs (validation/predict_loo.py), less the runs whose path holds ``without``."""
    return [m for g, path, model, quant, hw in RUNS if g == name and not (without and without in path.as_posix()) for m in levels(path, model, quant, hw)]


SHIPPED = "the shipped fit (dense: Qwen3-8B and Qwen3-14B; MoE layer times: Qwen3-30B-A3B fp8; all H100)"
BLOCKS = [  # (title, the dense runs left out of the fit, with the MoE layer times or not, the runs' folder, the model)
    ("leave one model out: Qwen3-14B bf16, H100; dense fit on Qwen3-8B (H100) only", "qwen3-14b", True, "cold-h100", "qwen3-14b"),
    (f"leave one model and GPU out: Qwen3-32B bf16, H200; {SHIPPED}", None, True, "cold-h200", "qwen3-32b"),
    (f"leave one model out: Mixtral-8x7B fp8 (8 experts of 14,336, top 2), H100; {SHIPPED}", None, True, "cold-h100", "mixtral-8x7b"),
    ("the same without the MoE layer times (the dense fit alone, and FP8's MoE constant), for comparison", None, False, "cold-h100", "mixtral-8x7b"),
    (f"leave one model out: Mixtral-8x7B fp8 again, on another H100 machine (same software, clocks); {SHIPPED}", None, True, "cold-h100-rerun",
     "mixtral-8x7b"),
    (f"leave one model out: Qwen2-57B-A14B fp8 (64 experts of 2,560, top 8, and a shared one), H100; {SHIPPED}", None, True, "cold-h100",
     "qwen2-57b-a14b"),
    (f"leave one model and GPU out: Gemma-3-27B bf16 (62 layers), H200; {SHIPPED}", None, True, "cold-h200", "gemma-3-27b"),
    (f"leave one model and GPU out: Llama-3.1-70B fp8 (80 layers), H200; {SHIPPED}", None, True, "cold-h200", "llama-3.1-70b"),
    (f"FP8's constants were measured on it (engines/vllm.py), not held out: Qwen3-32B fp8, H200; {SHIPPED}", None, True, "cold-h200", "qwen3-32b-fp8"),
    (f"leave one GPU out: Qwen3-8B bf16, H200; {SHIPPED}", None, True, "cold-h200", "qwen3-8b"),
    (f"leave one GPU out: Qwen3-30B-A3B fp8, H200; {SHIPPED}", None, True, "cold-h200", "qwen3-30b-a3b"),
    (f"not held out (the MoE layer times were fitted on its run on the first machine): Qwen3-30B-A3B fp8 again, H100, on a fourth machine; {SHIPPED}",
     None, True, "cold-h100-machine4", "qwen3-30b-a3b"),
    (f"FP8's MoE constant was measured on it and the MoE layer times fitted on its FP8 run (engines/vllm.py), not held out: Qwen3-30B-A3B bf16, "
     f"H100, on a fifth machine; {SHIPPED}", None, True, "cold-h100-machine5", "qwen3-30b-a3b-bf16"),
    (f"leave one model out: Mixtral-8x7B fp8 on a sixth H100 machine, vLLM's capture sizes (steady state); {SHIPPED}", None, True, "capture-h100",
     "mixtral-8x7b"),
    (f"leave one model out: Mixtral-8x7B fp8 with CUDA graphs up to 2,048 tokens, the sixth machine (steady state); {SHIPPED}", None, True,
     "capture-h100", "mixtral-8x7b-capture2048"),
    (f"not held out (the MoE layer times' model): Qwen3-30B-A3B fp8 on the sixth H100 machine, vLLM's capture sizes (steady state); {SHIPPED}",
     None, True, "capture-h100", "qwen3-30b-a3b"),
    (f"not held out (the MoE layer times' model): Qwen3-30B-A3B fp8 with CUDA graphs up to 2,048 tokens, the sixth machine (steady state); "
     f"{SHIPPED}", None, True, "capture-h100", "qwen3-30b-a3b-capture2048"),
    (f"not held out (the MoE layer times' model): Qwen3-30B-A3B fp8 on an eighth H100 machine, steady state; {SHIPPED}", None, True, "topk-h100",
     "qwen3-30b-a3b"),
    (f"leave one model out: Qwen3-30B-A3B fp8 routing each token to 4 of its experts, not 8, the eighth machine (steady state); {SHIPPED}", None,
     True, "topk-h100", "qwen3-30b-a3b-top4"),
    (f"leave one model out: Qwen3-30B-A3B fp8 routing each token to 2 of its experts, the eighth machine (steady state); {SHIPPED}", None, True,
     "topk-h100", "qwen3-30b-a3b-top2"),
    (f"leave one model out: Mixtral-8x7B fp8 on a ninth H100 machine, each level three times (steady state); {SHIPPED}", None, True,
     "repeats-h100", "mixtral-8x7b-repeats3"),
    (f"not held out (the MoE layer times' model): Qwen3-30B-A3B fp8 on the ninth machine, each level twice (steady state); {SHIPPED}", None,
     True, "repeats-h100", "qwen3-30b-a3b-repeats2"),
]  # fmt: skip
CAPTURE = [  # (folder, model, its run with larger graphs, in words): each served with vLLM's capture sizes, then up to 2,048 tokens, on one machine
    ("capture-h100", "mixtral-8x7b", "mixtral-8x7b-capture2048", "Mixtral-8x7B fp8 (its sizes and nine more)"),
    ("capture-h100", "qwen3-30b-a3b", "qwen3-30b-a3b-capture2048", "Qwen3-30B-A3B fp8 (its sizes and nine more)"),
    ("capture-h100-machine7", "qwen3-30b-a3b", "qwen3-30b-a3b-max2048", "Qwen3-30B-A3B fp8 (--max-cudagraph-capture-size 2048), a seventh machine"),
    ("capture-h100-machine7", "qwen3-14b", "qwen3-14b-max2048", "Qwen3-14B bf16, dense (--max-cudagraph-capture-size 2048), the seventh machine"),
]
DENSE = "vllm-0.25-h100-dense-bf16"
CLASSES = {"dense": ("Qwen3-14B", "Qwen3-32B bf16", "Gemma", "Llama", "Qwen3-8B"), "moe": ("Mixtral", "Qwen2-57B", "Qwen3-30B-A3B")}  # title → family class


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (0 < q ≤ 1; the nearest rank at or above it): the least of them that ≥ q of them are within."""
    ordered = sorted(values)
    return ordered[math.ceil(round(q * len(ordered), 9)) - 1]


def p90(values: list[float]) -> float:
    """The 90th percentile of ``values`` (:func:`quantile` at 0.9)."""
    return quantile(values, 0.9)


def class_points(results: dict[str, dict[str, list[float]]]) -> dict[str, tuple[list[tuple[str, float]], list[tuple[str, float]]]]:
    """Per family class (servelab.plan.band): the held-out points (the blocks that leave something out) as (the block's model, the
    absolute relative error as a fraction, |predicted ÷ measured − 1|), tok/s and TTFT (a burst's mean and p99, the steady state's
    p50), as two lists."""
    model = {title: name for title, _, _, _, name in BLOCKS}
    out = {}
    for name, marks in CLASSES.items():
        held = [(model[title], e) for title, e in results.items() if title.startswith("leave") and any(m in title.split(";")[0] for m in marks)]
        out[name] = tuple([(m, v / 100) for m, e in held for v in e[k]] for k in ("tok_s", "ttft"))
    return out


def bands(results: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float | int]]:
    """Per family class: these tables' held-out points and the errors (fractions) that ≥ 90 % of them fall within: their share of
    the shipped band, to which validation/bands.py adds the MLA models' and the kept-back sets' points."""
    out = {name: {"points": len(tok), "tok_s": p90([e for _, e in tok]), "ttft": p90([e for _, e in ttft])} for name, (tok, ttft) in class_points(results).items()}
    print("\n| family class | held-out points | tok/s error 90 % of them fall within | TTFT error, the same |\n|---|---|---|---|")
    for name, b in out.items():
        print(f"| {name} | {b['points']} | {b['tok_s']:.1%} | {b['ttft']:.1%} |")
    return out


def main() -> dict[str, dict[str, list[float]]]:
    fits, moe_runs = {}, moe_levels()
    for _, without, moe, _, _ in BLOCKS:
        if (without, moe) not in fits:
            dense = fit(group(DENSE, without=without), DENSE, "held out")
            fits[without, moe] = fit_moe(moe_runs, dense) if moe else dense
    blocks = {title: (fits[without, moe], bursts(folder, model), stagger(folder, model)) for title, without, moe, folder, model in BLOCKS}
    results = {title: score(title, *block) for title, block in blocks.items()}
    short = {run: sorted({m.concurrency for m in ms}) for run, ms in SHORT.items() if "cold-" in run}
    print(f"\nnot scored (short_window): {short}")
    print("\n| held out | tok/s median / worst | TTFT median / worst | single-stream TPOT median / worst |\n|---|---|---|---|")
    for title, errs in results.items():
        print(f"| {title.split(';')[0]} | {summary(errs)} |")
    every = {k: [v for title, e in results.items() if title.startswith("leave") for v in e[k]] for k in ("tok_s", "ttft", "single")}
    print(f"| all held out (the calibrations predict picks) | {summary(every)} |")
    bands(results)
    capture_gain(fits[None, True])
    power_cap(fits[None, True])
    return results


def power_cap(cal: Calibration) -> list[tuple[str, int, float, float, float]]:
    """The bursts whose SM clock was sampled (validation/clocks_gpu.py: Qwen3-8B bf16, 522/128 tokens), predicted with
    the board's power-capped clock (``Hardware.power_capped_clock``) and without it, printed; (GPU, streams, measured,
    predicted, predicted without the cap) tok/s per level."""
    rows = []
    print("\n### Bursts at the power cap: Qwen3-8B bf16, 522/128 tokens, the SM clock sampled every 100 ms (validation/clocks_gpu.py)\n\n"
          "| GPU | c | SM clock MHz, median (p10) | power W | tok/s measured / predicted / without the cap | TTFT mean ms measured / predicted / without |\n"
          "|---|---|---|---|---|---|")  # fmt: skip
    spec, fmt = load_model("qwen3-8b"), get_format("bf16")
    for path, profile in ((V / "cold-h200" / "qwen3-8b-clocks.json", "h200"), (V / "clocks-h100" / "qwen3-8b-clocks.json", "h100-sxm")):
        hw = load_hardware(profile)
        lim = limits_for(spec, fmt, hw, tp=1, input_tokens=522, output_tokens=128)
        for lv in json.loads(path.read_text()):
            c = lv["concurrency"]
            capped, free = (predict(terms(spec, fmt, h, concurrency=c, input_tokens=522, output_tokens=128, limits=lim, mode="burst"), cal,
                                    concurrency=c, output_tokens=128) for h in (hw, hw.model_copy(update={"power_capped_clock": 1.0})))  # fmt: skip
            print(f"| {hw.name} | {c} | {lv['sm_mhz_median']:,.0f} ({lv['sm_mhz_p10']:,.0f}) | {lv['power_w_median']:.0f} | {lv['tok_s']:,.0f} / "
                  f"{capped.aggregate_tok_s:,.0f} ({err(capped.aggregate_tok_s, lv['tok_s']):+.1f} %) / {free.aggregate_tok_s:,.0f} "
                  f"({err(free.aggregate_tok_s, lv['tok_s']):+.1f} %) | {lv['ttft_mean_ms']:,.0f} / {capped.ttft_mean_s * 1e3:,.0f} / {free.ttft_mean_s * 1e3:,.0f} |")  # fmt: skip
            rows.append((profile, c, lv["tok_s"], capped.aggregate_tok_s, free.aggregate_tok_s))
    return rows


def capture_gain(cal: Calibration) -> list[tuple[str, int, float, float]]:
    """What CUDA graphs captured up to 2,048 tokens gained (``CAPTURE``), measured and predicted: tok/s and TTFT p50 of the
    steady state at each level, printed; (model, streams, measured gain, predicted gain) in % per level."""
    gains = []
    print("\n### CUDA graphs up to 2,048 tokens against vLLM's capture sizes (largest 512), each pair on one H100 machine, steady state\n\n"
          "| model | c | tok/s measured: 512 → 2,048 | gain | predicted | gain | TTFT p50 ms measured: 512 → 2,048 | predicted |\n"
          "|---|---|---|---|---|---|---|---|")  # fmt: skip
    for folder, model, larger, name in CAPTURE:
        for a, b in zip(stagger(folder, model), stagger(folder, larger), strict=True):
            pa, pb = (predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens) for m in (a, b))
            print(f"| {name} | {a.concurrency} | {a.tok_s:,.0f} → {b.tok_s:,.0f} | {err(b.tok_s, a.tok_s):+.0f} % | {pa.aggregate_tok_s:,.0f} → "
                  f"{pb.aggregate_tok_s:,.0f} | {err(pb.aggregate_tok_s, pa.aggregate_tok_s):+.0f} % | {a.ttft_s * 1e3:.0f} → {b.ttft_s * 1e3:.0f} | "
                  f"{pa.ttft_s * 1e3:.0f} → {pb.ttft_s * 1e3:.0f} |")  # fmt: skip
            gains.append((name, a.concurrency, err(b.tok_s, a.tok_s), err(pb.aggregate_tok_s, pa.aggregate_tok_s)))
    return gains


if __name__ == "__main__":
    main()
