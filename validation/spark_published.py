#!/usr/bin/env python3
"""``servelab predict`` against published DGX Spark measurements of gpt-oss-120b (MXFP4), and the MoE
routing γ (``servelab.plan.roofline``) fitted on them.

Source (kubis.ai, "GPT-OSS-120B: Topology Benchmark on DGX Spark", 2026-03-22,
https://kubis.ai/blog/dgx_series/benchmarks/gpt-oss-120b-topology-benchmark): vLLM (vllm-node-mxfp4
0.1.dev12777), ``--enforce-eager --kv-cache-dtype fp8 --mxfp4-layers moe,qkv,o,lm_head``, max_model_len
4,096, llama-benchy pp1024 tg128 (the streams of a level start together: ``--closed-loop burst``),
decode throughput (tg, all streams) per concurrency, on one Spark and on two over ConnectX-7 at TP=2.

γ is fitted on the one-Spark curve (the shipped dense calibration otherwise, grid 0.30–1.00), then the
TP=2 curve is predicted with it, held out. Prints both tables and the errors.

Usage: ``python validation/spark_published.py`` (no GPU).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from servelab.plan.calibration import calibration  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import limits_for, predict, terms  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402

SOLO = {1: 57.5, 2: 78.4, 4: 107.9, 8: 153.5, 16: 218.5, 32: 318.7}  # decode tok/s, one Spark (c=64: 315.2, at its KV limit)
TP2 = {1: 69.0, 2: 104.1, 4: 155.3, 8: 231.0, 16: 342.1, 32: 471.7}  # two Sparks, TP=2
INPUT, OUTPUT = 1024, 128


def decode_curve(routing: float, tp: int, levels) -> dict[int, float]:
    """Predicted decode tok/s of all streams (c ÷ TPOT) at each level, burst."""
    spec, fmt, hw = load_model("gpt-oss-120b"), get_format("mxfp4"), load_hardware("dgx-spark")
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=INPUT, output_tokens=OUTPUT)
    cal = calibration("vllm-0.25-h100-bf16")
    out = {}
    for c in levels:
        t = terms(spec, fmt, hw, concurrency=c, input_tokens=INPUT, output_tokens=OUTPUT, limits=limits, tp=tp, routing=routing, mode="burst")
        out[c] = c / predict(t, cal, concurrency=c, output_tokens=OUTPUT).tpot_s
    return out


def errors(pred: dict[int, float], meas: dict[int, float]) -> list[float]:
    return [pred[c] / meas[c] - 1 for c in meas]


def fit_routing() -> float:
    """γ minimising the squared relative error on the one-Spark curve (steps of 0.05)."""
    grid = [round(0.3 + 0.05 * i, 2) for i in range(15)]
    return min(grid, key=lambda g: sum(e * e for e in errors(decode_curve(g, 1, SOLO), SOLO)))


def main() -> None:
    gamma = fit_routing()
    for label, tp, meas in (("one Spark (fitted)", 1, SOLO), ("two Sparks, TP=2 (held out)", 2, TP2)):
        uniform, fitted = decode_curve(1.0, tp, meas), decode_curve(gamma, tp, meas)
        print(f"\n{label}\n\n| streams | measured tok/s | uniform routing | routing γ {gamma:g} |\n|---|---|---|---|")
        for c in meas:
            print(f"| {c} | {meas[c]:,.1f} | {uniform[c]:,.0f} ({100 * (uniform[c] / meas[c] - 1):+.0f} %) | {fitted[c]:,.0f} ({100 * (fitted[c] / meas[c] - 1):+.0f} %) |")
        for name, pred in (("uniform", uniform), (f"γ {gamma:g}", fitted)):
            errs = [abs(e) for e in errors(pred, meas)]
            print(f"{name}: median {100 * statistics.median(errs):.0f} %, worst {100 * max(errs):.0f} %")


if __name__ == "__main__":
    main()
