#!/usr/bin/env python3
"""``servelab predict`` against published DGX Spark measurements of gpt-oss-120b, and the DGX Spark
calibration (``vllm-dgx-spark`` in servelab/data/calibration.yaml) fitted on them.

Every figure here is llama-benchy's "tg t/s (total)": a batch of C requests started together, Σ (O − 1)
÷ (last token − first first-token) (``servelab predict --closed-loop batch``, ``Point.tg_total_tok_s``),
on eugr/spark-vllm-docker's ``--exp-mxfp4`` vLLM build with ``--mxfp4-layers moe,qkv,o,lm_head``
(``--quant mxfp4-all``), ``--kv-cache-dtype fp8``, ``gpu_memory_utilization`` 0.70, ``max_num_batched_tokens``
8,192 (its canonical recipe, anchors-serving-ops.md).

- **Fit** (kubis.ai, "GPT-OSS-120B: Topology Benchmark on DGX Spark", 2026-03-22,
  https://kubis.ai/blog/dgx_series/benchmarks/gpt-oss-120b-topology-benchmark): one Spark, image
  vllm-node-mxfp4 0.1.dev12777, ``--enforce-eager``, max_model_len 4,096, llama-benchy 0.3.5 pp1024 tg128,
  50 runs a level, 1–32 streams (its 64 is at its KV limit). Fitted on a grid: GB10's bandwidth
  efficiency η_bw and gpt-oss-120b's routing γ (``--routing``), which its decode-heavy levels identify.
  Its prompts (at most 32 × 1,024 tokens a batch) leave the compute efficiency free (a joint fit puts
  η_c anywhere in 0.6–0.95 at the same error), so η_c comes from another Spark measurement: the
  field report's Long-RAG TTFT (Qwen3.5-122B-A10B NVFP4, 7,500 tokens, 2.55 s warm; RESULTS-spark.md),
  which servelab predict meets at η_c 0.47 (1.65 s at the dense calibration's 0.74). The rest is
  vllm-0.25-h100-bf16's. Priced with CUDA graphs: the H100's costs without them (Triton fused-MoE
  launches, 0.7 ms a MoE layer) are not this build's FlashInfer CUTLASS MXFP4 path's, and kubis's one
  stream (57.5 tok/s) is the seed's (58.3, CUDA graphs) within 1.4 %.
- **Held out**: kubis.ai's two Sparks at TP=2 (same image and flags, ConnectX-7), and the seed's own
  table (issue 53, seed 004: one Spark, vLLM from source with the CUTLASS MXFP4 backend, llama-benchy
  2,048 / 128 tokens, ``--no-cache``, 3 runs, 1–256 streams).

Usage: ``python validation/spark_published.py`` (no GPU): prints the fit and the three tables.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from servelab.plan.calibration import calibration  # noqa: E402
from servelab.plan.checkpoint import weight_format  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.limits import limits_for  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import predict  # noqa: E402
from servelab.plan.terms import terms  # noqa: E402

SOLO = {1: 57.5, 2: 78.4, 4: 107.9, 8: 153.5, 16: 218.5, 32: 318.7}  # kubis.ai, one Spark, pp1024 tg128 (c=64: 315.2, at its KV limit)
TP2 = {1: 69.0, 2: 104.1, 4: 155.3, 8: 231.0, 16: 342.1, 32: 471.7}  # kubis.ai, two Sparks, TP=2
SEED = {1: 58.3, 4: 103.7, 16: 184.6, 64: 219.5, 256: 295.8}  # issue 53's seed 004, one Spark, 2,048 / 128
CURVES = {"one Spark (kubis.ai, fitted)": (SOLO, 1, 1024), "two Sparks, TP=2 (kubis.ai, held out)": (TP2, 2, 1024),
          "one Spark, 2,048 / 128 (the seed, held out)": (SEED, 1, 2048)}  # fmt: skip
OUTPUT, MBT, UTILIZATION, KV_BYTES = 128, 8192, 0.70, 1.0
COMPUTE = 0.47  # GB10's η_c: the field report's Long-RAG TTFT (module docstring)
GRID = {"bw": [round(0.40 + 0.01 * i, 2) for i in range(61)], "routing": [round(0.30 + 0.02 * i, 2) for i in range(36)]}


def tg_curve(bw: float, compute: float, routing: float, tp: int, input_tokens: int, levels) -> dict[int, float]:
    """Predicted tg t/s (total) of a batch of C requests at each level, with η_bw ``bw`` and η_c ``compute``."""
    spec, hw = load_model("gpt-oss-120b"), load_hardware("dgx-spark")
    fmt = weight_format("mxfp4-all", spec)
    cal = calibration("vllm-0.25-h100-bf16").model_copy(update={"bw_efficiency": bw, "compute_efficiency": compute})
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=input_tokens, output_tokens=OUTPUT, max_num_batched_tokens=MBT,
                        kv_dtype_bytes=KV_BYTES, gpu_memory_utilization=UTILIZATION)  # fmt: skip
    out = {}
    for c in levels:
        t = terms(spec, fmt, hw, concurrency=c, input_tokens=input_tokens, output_tokens=OUTPUT, limits=limits, tp=tp, routing=routing, mode="batch")
        out[c] = predict(t, cal, concurrency=c, output_tokens=OUTPUT).tg_total_tok_s
    return out


def errors(pred: dict[int, float], meas: dict[int, float]) -> list[float]:
    return [pred[c] / meas[c] - 1 for c in meas]


def fit() -> tuple[float, float, float]:
    """(η_bw, η_c, γ): η_bw and γ minimising the squared relative error on the one-Spark curve, over ``GRID``; η_c ``COMPUTE``."""
    def loss(p):
        return sum(e * e for e in errors(tg_curve(p[0], COMPUTE, p[1], 1, 1024, SOLO), SOLO))

    bw, routing = min(itertools.product(GRID["bw"], GRID["routing"]), key=loss)
    return bw, COMPUTE, routing


def main() -> None:
    bw, compute, routing = fit()
    print(f"fitted on the one-Spark curve: η_bw {bw}, routing γ {routing} (η_c {compute}: the Long-RAG TTFT)")
    for label, (meas, tp, input_tokens) in CURVES.items():
        pred = tg_curve(bw, compute, routing, tp, input_tokens, meas)
        errs = errors(pred, meas)
        print(f"\n{label}, {input_tokens:,} / {OUTPUT} tokens\n\n| streams | measured tg t/s | predicted | error |\n|---|---|---|---|")
        for c, e in zip(meas, errs):
            print(f"| {c} | {meas[c]:,.1f} | {pred[c]:,.1f} | {100 * e:+.1f} % |")
        print(f"median {100 * statistics.median(map(abs, errs)):.1f} %, worst {100 * max(map(abs, errs)):.1f} %")


if __name__ == "__main__":
    main()
