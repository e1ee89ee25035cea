#!/usr/bin/env python3
"""Leave-one-run-out validation of ``servelab predict`` (servelab/plan/predict.py) on the real vLLM runs
in this repository, and the fits that ship in src/servelab/data/calibration.yaml.

For each calibration group (engine × hardware × format family) every run is predicted with the
efficiencies fitted on the group's *other* runs (a group of one run: each level with the others);
prints per level the measured and predicted aggregate output tok/s, TPOT and TTFT p50 with the
errors, and per group the median and worst absolute errors, then the fit on all of the group's runs.

Usage: ``python validation/predict_loo.py`` (no GPU needed; reads the run.json files below).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import fit, limits_for, predict, terms  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402
from servelab.results import RunResult  # noqa: E402

V = ROOT / "validation"
# (group, run.json, catalog model, format, hardware profile): closed-loop runs with exact output
# lengths, steady state (stagger) and burst (the fixture run, made before stagger, and the burst runs).
RUNS = [
    ("vllm-0.25-h100-dense-bf16", ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json", "qwen3-8b", "bf16", "h100-sxm"),
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100/stagger-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for i in (1, 2, 3)],
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100-512/stagger{c}-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for c in (64, 256) for i in (1, 2, 3)],
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100/burst-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for i in (1, 2, 3)],
    ("vllm-0.25-h200-moe-fp8", V / "hybrid-h200-bench/qwen3-next-80b-a3b-fp8-run.json", "qwen3-next-80b-a3b", "fp8", "h200"),
]


def levels(path: Path, model: str, quant: str, hw_name: str):
    """(concurrency, terms, output tokens, mode, measured TPOT s, TTFT s, aggregate tok/s) per level of a run."""
    run = RunResult.model_validate_json(path.read_text())
    spec, fmt, hw = load_model(model), get_format(quant), load_hardware(hw_name)
    boot = run.boot
    p, o = run.load.input_tokens, run.load.output_tokens
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=p, output_tokens=o, max_num_seqs=boot.max_num_seqs if boot else None,
                        max_num_batched_tokens=boot.max_num_batched_tokens if boot else None, capture_sizes=boot.cudagraph_sizes if boot else None)  # fmt: skip
    out = []
    for lv in run.levels:
        t = terms(spec, fmt, hw, concurrency=lv.concurrency, input_tokens=p, output_tokens=o, limits=limits)
        out.append((lv.concurrency, t, o, run.load.closed_loop, lv.tpot_ms.p50 / 1e3, lv.ttft_ms.p50 / 1e3, lv.output_throughput_tok_s))
    return out


def err(pred: float, meas: float) -> float:
    return 100 * (pred - meas) / meas


def main() -> None:
    groups: dict[str, list[tuple[str, list]]] = {}
    for group, path, model, quant, hw in RUNS:
        groups.setdefault(group, []).append((path.relative_to(ROOT).as_posix(), levels(path, model, quant, hw)))
    for group, runs in groups.items():
        print(f"\n## {group}\n\n| run | c | measured tok/s | predicted | err | TPOT ms meas / pred | err | TTFT ms meas / pred | err |\n|---|---|---|---|---|---|---|---|---|")
        agg, single, ttft = [], [], []
        units = [(i, None) for i in range(len(runs))] if len(runs) > 1 else [(0, j) for j in range(len(runs[0][1]))]
        for i, j in units:
            train = [lv for k, (_, lvs) in enumerate(runs) for m, lv in enumerate(lvs) if (k != i if j is None else m != j)]
            cal = fit([(t, o, mode, tpot, tt) for _, t, o, mode, tpot, tt, _ in train], group, "leave-one-out")
            name, lvs = runs[i]
            for m, (c, t, o, mode, tpot, tt, tok_s) in enumerate(lvs):
                if j is not None and m != j:
                    continue
                pt = predict(t, cal, concurrency=c, output_tokens=o, mode=mode)
                agg.append(abs(err(pt.aggregate_tok_s, tok_s)))
                ttft.append(abs(err(pt.ttft_s, tt)))
                if c == 1:
                    single.append(abs(err(1 / pt.tpot_s, 1 / tpot)))
                print(f"| {name} ({mode}) | {c} | {tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, tok_s):+.1f} % | {tpot * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | "
                      f"{err(pt.tpot_s, tpot):+.1f} % | {tt * 1e3:.1f} / {pt.ttft_s * 1e3:.1f} | {err(pt.ttft_s, tt):+.1f} % |")
        print(f"\n{group}: aggregate tok/s |error| median {statistics.median(agg):.1f} %, worst {max(agg):.1f} % ({len(agg)} levels); "
              + (f"single-stream decode |error| median {statistics.median(single):.1f} %, worst {max(single):.1f} %; " if single else "")
              + f"TTFT p50 |error| median {statistics.median(ttft):.1f} %, worst {max(ttft):.1f} %")
        whole = fit([(t, o, mode, tpot, tt) for _, lvs in runs for _, t, o, mode, tpot, tt, _ in lvs], group, "all runs")
        print(f"fit on all: bw_efficiency {whole.bw_efficiency:.3f}, compute_efficiency {whole.compute_efficiency:.3f}, step_overhead_ms {whole.step_overhead_ms:.3f}")


if __name__ == "__main__":
    main()
