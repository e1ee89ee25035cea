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

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import Measured, error_summary, fit, leave_one_out, measured_levels  # noqa: E402
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


def levels(path: Path, model: str, quant: str, hw_name: str) -> list[Measured]:
    """The run's measured levels with the model's terms."""
    run = RunResult.model_validate_json(path.read_text())
    return measured_levels(run, load_model(model), get_format(quant), load_hardware(hw_name))


def err(pred: float, meas: float) -> float:
    return 100 * (pred - meas) / meas


def main() -> None:
    groups: dict[str, list[tuple[str, list]]] = {}
    for group, path, model, quant, hw in RUNS:
        groups.setdefault(group, []).append((path.relative_to(ROOT).as_posix(), levels(path, model, quant, hw)))
    for group, runs in groups.items():
        print(f"\n## {group}\n\n| run | c | measured tok/s | predicted | err | TPOT ms meas / pred | err | TTFT ms meas / pred | err |\n|---|---|---|---|---|---|---|---|---|")
        pairs = leave_one_out([lvs for _, lvs in runs], group)
        for i, lv, pt in pairs:
            print(f"| {runs[i][0]} ({lv.mode}) | {lv.concurrency} | {lv.tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, lv.tok_s):+.1f} % | "
                  f"{lv.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | {err(pt.tpot_s, lv.tpot_s):+.1f} % | {lv.ttft_s * 1e3:.1f} / {pt.ttft_s * 1e3:.1f} | "
                  f"{err(pt.ttft_s, lv.ttft_s):+.1f} % |")
        print(f"\n{group}, leave-one-out: {error_summary(pairs)}")
        whole = fit([lv for _, lvs in runs for lv in lvs], group, "all runs")
        print(f"fit on all: bw_efficiency {whole.bw_efficiency:.3f}, compute_efficiency {whole.compute_efficiency:.3f}, step_overhead_ms {whole.step_overhead_ms:.3f}")


if __name__ == "__main__":
    main()
