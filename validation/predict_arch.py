#!/usr/bin/env python3
"""Issue 53: ``servelab predict`` on architectures no calibration had seen, measured cold on one
4 × H200 host (validation/arch_gpu.sh runs validation/cold_gpu.py, one model per GPU; the host's
CPU in arch-h200-x4/host.txt), each prediction kept apart from what it is checked against:

- **held out by model**: the shipped calibration (dense fit and MoE layer times, validation/predict_cold.py)
  with an MLA layer's times (``servelab.plan.fit.fit_mla``) fitted on the *other* MLA models' steady
  state; the dense and MoE models of other families with the shipped calibration alone;
- **calibrate on the server** (``servelab calibrate``'s fit with its prior: the held-out calibration
  above): fitted on the model's steady state at 1, 16 and 64 streams, then checked on its bursts and
  its steady state at other concurrencies;
- the MLA class's band (``servelab.plan.band``, data/bands.yaml): the tok/s and TTFT errors ≥ 90 %
  of the held-out points fall within.

Bursts: ``vllm bench serve --max-concurrency C --num-prompts 2C``, the prefix cache reset and a seed per
level (0 hits), no JIT line in any level; TTFT compared as mean and p99. Steady state: ``servelab bench``
(stagger, every prompt unique), 20 s per level, and at 64 streams three repeats of 60 s (their mean).

Usage: ``python validation/predict_arch.py`` (no GPU); tests/test_predict_arch.py holds its summary.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "validation"))

import predict_cold as pc  # noqa: E402

from servelab.plan.calibration import Calibration  # noqa: E402
from servelab.plan.fit import Measured, fit, fit_mla, fit_moe, prior_widths  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402

FOLDER = "arch-h200-x4"
V = pc.V
MLA = {"deepseek-v2-lite": "DeepSeek-V2-Lite bf16 (MLA, 64 experts of 1,408, top 6, 2 shared)",
       "kimi-k2-6l": "Kimi-K2 cut to 6 layers, block FP8 (MLA, 384 experts of 2,048, top 8, 1 shared)",
       "deepseek-v3-8l": "DeepSeek-V3 cut to 8 layers, block FP8 (MLA, 256 experts of 2,048, top 8, 1 shared)"}  # fmt: skip
OTHER = {"gpt-oss-20b": "gpt-oss-20b bf16 (sliding window 128 on half its layers, sinks; 32 experts of 2,880, top 4)",
         "phi-4": "Phi-4 bf16 (dense, a family no calibration has seen)"}  # fmt: skip
pc.MODELS.update({
    "deepseek-v2-lite": (str(V / "configs/deepseek-v2-lite"), "bf16"), "kimi-k2-6l": (str(V / "configs/kimi-k2-6l"), "fp8-block"),
    "deepseek-v3-8l": (str(V / "configs/deepseek-v3-8l"), "fp8-block"), "gpt-oss-20b": (str(V / "configs/gpt-oss-20b"), "bf16"),
    "phi-4": (str(V / "configs/phi-4"), "bf16"),
})  # fmt: skip
pc.MODELS.update({f"{name}-repeats3": pc.MODELS[name] for name in ("deepseek-v2-lite", "kimi-k2-6l", "deepseek-v3-8l", "gpt-oss-20b")})
pc.HARDWARE[FOLDER] = "h200"
DESIGN = (1, 16, 64)  # servelab calibrate --url's levels on these servers (servelab.plan.design)


def present(model: str) -> bool:
    return (V / FOLDER / f"{model}-stagger-run.json").exists() or (V / FOLDER / f"{model}-repeats3-stagger-run.json").exists()


def steady(model: str) -> list[Measured]:
    """The model's steady-state levels: 20 s windows, and the 60 s repeats (each kept: a fit weighs a load measured n times as one)."""
    rows = pc.stagger(FOLDER, model) if (V / FOLDER / f"{model}-stagger-run.json").exists() else []
    if (V / FOLDER / f"{model}-repeats3-stagger-run.json").exists():
        rows += pc.stagger(FOLDER, f"{model}-repeats3")
    return rows


def scored(rows: list[Measured]) -> list[Measured]:
    """One row per concurrency: the mean of its repeats (the truth rule for MoE steady state at ≥ 64 streams)."""
    out = []
    for c in sorted({m.concurrency for m in rows}):
        same = [m for m in rows if m.concurrency == c]
        out.append(replace(same[-1], tok_s=statistics.fmean(m.tok_s for m in same), tpot_s=statistics.fmean(m.tpot_s for m in same),
                           ttft_s=statistics.fmean(m.ttft_s for m in same)))  # fmt: skip
    return out


def shipped() -> Calibration:
    """predict_cold.py's fit with everything: the dense fit and the MoE layer times (the shipped calibration's)."""
    return fit_moe(pc.moe_levels(), fit(pc.group(pc.DENSE), pc.DENSE, "held out"))


def held_out(model: str, base: Calibration) -> Calibration:
    """``base`` with an MLA layer's times fitted on the other MLA models' steady state (none for a model of another class)."""
    others = [m for name in MLA if name != model and present(name) for m in steady(name)]
    return fit_mla(others, base) if model in MLA and others else base


def on_server(model: str, prior: Calibration) -> Calibration:
    """servelab calibrate's fit (with its prior, and its σ on this GPU) on the model's steady state at the design's levels."""
    return fit([m for m in steady(model) if m.concurrency in DESIGN], f"{model} on its server", "the design's levels", prior, prior_widths(load_hardware(pc.HARDWARE[FOLDER]), prior))


def main() -> dict[str, dict]:
    base = shipped()
    results: dict[str, dict] = {}
    for model, title in {**MLA, **OTHER}.items():
        if not present(model) and not (V / FOLDER / f"{model}-bursts.json").exists():
            print(f"\n({model}: no run in validation/{FOLDER})")
            continue
        cal = held_out(model, base)
        rows = steady(model)
        errs = pc.score(f"held out: {title}", cal, pc.bursts(FOLDER, model), scored(rows))
        checks = [m for m in scored(rows) if m.concurrency not in DESIGN]
        if not {m.concurrency for m in rows} >= set(DESIGN):
            results[model] = {"held": errs, "server": {"tok_s": [], "ttft": [], "single": []}, "mla": (cal.mla_layer_us, cal.mla_eager_layer_ms)}
            continue
        mine = on_server(model, cal)
        server = pc.score(f"calibrated on its own steady state at {', '.join(map(str, DESIGN))} streams (prior: the held-out calibration): {title}",
                          mine, pc.bursts(FOLDER, model), checks)  # fmt: skip
        results[model] = {"held": errs, "server": server, "mla": (cal.mla_layer_us, cal.mla_eager_layer_ms)}
    print("\n| model | held out: tok/s median / worst | TTFT median / worst | single-stream TPOT | calibrated on its server: bursts and other levels, tok/s median / worst |\n|---|---|---|---|---|")
    for model, r in results.items():
        print(f"| {model} | {pc.summary(r['held'])} | {pc.summary(r['server']).split(' | ')[0]} |")
    held = [v for model, r in results.items() if model in MLA for v in r["held"]["tok_s"]]
    ttft = [v for model, r in results.items() if model in MLA for v in r["held"]["ttft"]]
    if held:
        tok90, ttft90 = pc.p90(held), pc.p90(ttft)
        print(f"\nMLA class: {len(held)} held-out points; tok/s error 90 % of them fall within {tok90:.1f} %, TTFT {ttft90:.1f} %")
    whole = fit_mla([m for name in MLA if present(name) for m in steady(name)], base)
    print(f"\nMLA layer times fitted on every MLA model (the shipped calibration's): {whole.mla_layer_us} µs a step, {whole.mla_eager_layer_ms} ms without CUDA graphs")
    return results


if __name__ == "__main__":
    main()
