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
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servelab.rules.diagnose import diagnose  # noqa: E402
from servelab.plan.calibration import Calibration  # noqa: E402
from servelab.plan.fit import Measured, fit, fit_moe, measured_levels  # noqa: E402
from servelab.plan.holdout import error_summary, leave_one_out, predicted_ttft  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import Point, predict  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402
from servelab.store.results import RunResult  # noqa: E402

V = ROOT / "validation"
# (group, run.json, catalog model, format, hardware profile): closed-loop runs with exact output
# lengths, steady state (stagger) and burst (the fixture run, made before stagger, and the burst runs).
RUNS = [
    ("vllm-0.25-h100-dense-bf16", ROOT / "tests/fixtures/runs/vllm-0.25-h100-qwen3-8b-run.json", "qwen3-8b", "bf16", "h100-sxm"),
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100/stagger-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for i in (1, 2, 3)],
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100-512/stagger{c}-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for c in (64, 256) for i in (1, 2, 3)],
    *[("vllm-0.25-h100-dense-bf16", V / f"waves-h100/burst-{i}-run.json", "qwen3-8b", "bf16", "h100-sxm") for i in (1, 2, 3)],
    ("vllm-0.25-h100-dense-bf16", V / "predict-h100/dense-run.json", "qwen3-8b", "bf16", "h100-sxm"),
    ("vllm-0.25-h100-dense-bf16", V / "cold-h100/qwen3-14b-stagger-run.json", str(V / "configs/qwen3-14b"), "bf16", "h100-sxm"),
    *[("vllm-0.25-h100-hybrid-fp8", V / f"predict-h100/{name}-run.json", "nemotron-3-nano-30b-a3b", "fp8", "h100-sxm") for name in ("hybrid", "hybrid-1024")],
]
# The MoE layer times of the dense calibration (moe_layer_us, moe_eager_layer_ms: servelab.plan.fit.fit_moe, the dense fit held),
# fitted on a MoE model's cold steady-state run (validation/cold_gpu.py; uniform-random routing).
MOE_RUNS = [(V / "cold-h100/qwen3-30b-a3b-stagger-run.json", "qwen3-30b-a3b", "fp8", "h100-sxm")]
# Held out of every fit: predicted with the calibration fitted on all of the named group's runs.
HELD_OUT = [
    ("vllm-0.25-h100-dense-bf16", V / "predict-h100/ngram-run.json", "qwen3-8b", "bf16", "h100-sxm"),  # n-gram, 3 draft tokens
]
# Another model or GPU than the group's runs: predicted with the group's fit on all (no run of its own in any fit).
OTHER = [
    ("vllm-0.25-h100-hybrid-fp8", V / "hybrid-h200-bench/qwen3-next-80b-a3b-fp8-run.json", "qwen3-next-80b-a3b", "fp8", "h200"),  # GDN, not Mamba-2; H200
]


def levels(path: Path, model: str, quant: str, hw_name: str) -> list[Measured]:
    """The run's measured levels with the model's terms, less those with a ``short_window`` finding
    (a --duration window under 3 request durations: latencies of the early requests only), which
    ``SHORT`` collects. A stagger level summarised before output throughput counted the ramp's
    tokens in the window and left the drain out (no ``window_output_tokens``; servelab ≤ 2026-11-23
    morning) takes Little's law instead, c · O ÷ mean E2E of its finished requests: the steady
    state the fixed window measures (validation/predict-h100/dense-eager-run.json at 64 streams:
    2,808 in the window vs 2,824 tok/s by Little's law)."""
    run = RunResult.model_validate_json(path.read_text())
    short = {f.evidence["concurrency"] for f in diagnose(run) if f.kind == "short_window"}
    by_c = {lv.concurrency: lv for lv in run.levels}
    out = []
    for m in measured_levels(run, load_model(model), get_format(quant), load_hardware(hw_name)):
        lv = by_c[m.concurrency]
        if lv.ramp_requests and not lv.window_output_tokens:
            m = replace(m, tok_s=m.concurrency * m.output_tokens / (lv.e2e_ms.mean / 1e3))
        (SHORT.setdefault(path.relative_to(ROOT).as_posix(), []) if m.concurrency in short else out).append(m)
    return out


SHORT: dict[str, list[Measured]] = {}  # run → its levels with a short_window finding (levels)


def err(pred: float, meas: float) -> float:
    return 100 * (pred - meas) / meas


LOO_HEAD = ("| run | c | measured tok/s | predicted | err | TPOT ms meas / pred | err | TTFT ms meas / pred (p50; bursts: mean) | err |\n"
            "|---|---|---|---|---|---|---|---|---|")


def loo_row(run: str, lv: Measured, pt: Point) -> str:
    """One level of a leave-one-out table: measured against predicted tok/s, TPOT and TTFT."""
    ttft = predicted_ttft(lv, pt)
    return (f"| {run} ({lv.terms.mode}) | {lv.concurrency} | {lv.tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, lv.tok_s):+.1f} % | "
            f"{lv.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | {err(pt.tpot_s, lv.tpot_s):+.1f} % | {lv.ttft_s * 1e3:.1f} / {ttft * 1e3:.1f} | "
            f"{err(ttft, lv.ttft_s):+.1f} % |")  # fmt: skip


def moe_levels() -> list[Measured]:
    """The steady-state levels of ``MOE_RUNS``."""
    return [m for path, model, quant, hw in MOE_RUNS for m in levels(path, model, quant, hw)]


def print_moe(dense: Calibration) -> None:
    """The MoE layer times: each level of ``MOE_RUNS`` predicted with them fitted on the others (the dense fit held), then fitted on all."""
    lvs = moe_levels()
    print(f"\n## vllm-0.25-h100-bf16's MoE layer times (the dense fit held)\n\n{LOO_HEAD}")
    pairs = []
    for n, lv in enumerate(lvs):
        pt = predict(lv.terms, fit_moe(lvs[:n] + lvs[n + 1 :], dense), concurrency=lv.concurrency, output_tokens=lv.output_tokens)
        pairs.append((0, lv, pt))
        print(loo_row(MOE_RUNS[0][0].relative_to(ROOT).as_posix(), lv, pt))
    whole = fit_moe(lvs, dense)
    print(f"\nleave-one-level-out: {error_summary(pairs)}\nfit on all: moe_layer_us {whole.moe_layer_us:.2f}, moe_eager_layer_ms {whole.moe_eager_layer_ms:.3f}")


def main() -> None:
    groups: dict[str, list[tuple[str, list]]] = {}
    for group, path, model, quant, hw in RUNS:
        groups.setdefault(group, []).append((path.relative_to(ROOT).as_posix(), levels(path, model, quant, hw)))
    for group, runs in groups.items():
        print(f"\n## {group}\n\n{LOO_HEAD}")
        pairs = leave_one_out([lvs for _, lvs in runs], group)
        for i, lv, pt in pairs:
            print(loo_row(runs[i][0], lv, pt))
        print(f"\n{group}, leave-one-out: {error_summary(pairs)}")
        whole = fit([lv for _, lvs in runs for lv in lvs], group, "all runs")
        print(f"fit on all: bw_efficiency {whole.bw_efficiency:.3f}, compute_efficiency {whole.compute_efficiency:.3f}, layer_overhead_us {whole.layer_overhead_us:.2f}, eager_step_ms {whole.eager_step_ms:.3f}")
        if group == "vllm-0.25-h100-dense-bf16":
            print_moe(whole)
        for g, path, model, quant, hw in HELD_OUT:
            if g != group:
                continue
            spec = levels(path, model, quant, hw)
            base = [lv for _, lvs in runs for lv in lvs]
            held, bare = [], []
            for n, lv in enumerate(spec):
                cal = fit(base + spec[:n] + spec[n + 1 :], group, "all runs and the run's other levels")
                held.append((0, lv, predict(lv.terms, cal, concurrency=lv.concurrency, output_tokens=lv.output_tokens, acceptance=lv.acceptance)))
                bare.append((0, lv, predict(lv.terms, whole, concurrency=lv.concurrency, output_tokens=lv.output_tokens, acceptance=lv.acceptance)))
            print(f"\nheld out, {path.relative_to(ROOT).as_posix()}: each level with the drafting time per step fitted on its other levels "
                  f"(and without it: the fit on all, 0 ms):\n\n| c | draft tokens, acceptance | measured tok/s | predicted | err | without drafting time | "
                  "TPOT ms meas / pred | TTFT ms meas / pred | predicted bottleneck |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
            for (_, lv, pt), (_, _, pb) in zip(held, bare):
                print(f"| {lv.concurrency} | {lv.terms.draft_tokens}, {lv.acceptance:.2f} | {lv.tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, lv.tok_s):+.1f} % | "
                      f"{pb.aggregate_tok_s:,.0f} ({err(pb.aggregate_tok_s, lv.tok_s):+.1f} %) | {lv.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | "
                      f"{lv.ttft_s * 1e3:.1f} / {pt.ttft_s * 1e3:.1f} | {pt.bottleneck} |")  # fmt: skip
            print(f"drafting time per step fitted on all its levels: {fit(base + spec, group, 'all').draft_overhead_ms:.2f} ms")
            print(f"\nheld out: {error_summary(held)}")
        names = [name for name, _ in runs] + [path.relative_to(ROOT).as_posix() for g, path, *_ in HELD_OUT if g == group]
        short = [(name, m) for name in names for m in SHORT.get(name, [])]
        if short:
            print("\nnot in the errors above (short_window: a window under 3 request durations), predicted with the fit on all:\n\n"
                  "| run | c | measured tok/s | predicted | err | TPOT ms meas / pred | TTFT ms meas / pred |\n|---|---|---|---|---|---|---|")  # fmt: skip
            for name, m in short:
                pt = predict(m.terms, whole, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance)
                print(f"| {name} | {m.concurrency} | {m.tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, m.tok_s):+.1f} % | "
                      f"{m.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | {m.ttft_s * 1e3:.1f} / {pt.ttft_s * 1e3:.1f} |")  # fmt: skip
        for g, path, model, quant, hw in OTHER:
            if g != group:
                continue
            other = [(0, m, predict(m.terms, whole, concurrency=m.concurrency, output_tokens=m.output_tokens)) for m in levels(path, model, quant, hw)]
            print(f"\nanother model, {path.relative_to(ROOT).as_posix()} ({model}, {hw}), predicted with the fit on all:\n\n"
                  "| c | measured tok/s | predicted | err | TPOT ms meas / pred | TTFT ms meas / pred |\n|---|---|---|---|---|---|")  # fmt: skip
            for _, m, pt in other:
                print(f"| {m.concurrency} | {m.tok_s:,.0f} | {pt.aggregate_tok_s:,.0f} | {err(pt.aggregate_tok_s, m.tok_s):+.1f} % | "
                      f"{m.tpot_s * 1e3:.2f} / {pt.tpot_s * 1e3:.2f} | {m.ttft_s * 1e3:.1f} / {pt.ttft_s * 1e3:.1f} |")  # fmt: skip
            print(f"\n{error_summary(other)}")


if __name__ == "__main__":
    main()
