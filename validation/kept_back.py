#!/usr/bin/env python3
"""Issue 53's kept-back set, replayed: ``servelab predict`` as a user gets it (the shipped calibration, no fit on these
runs) against models measured *after* predict was frozen (commit f4dc3da, 2026-11-28), none of them in any fit, table
or band; then ``servelab calibrate`` on each server's design run, checked on that server's other loads.

Data (validation/kept-back-h200/): one 2 × H200 host (its CPU in host.txt), the vLLM 0.25 kit, dummy weights, uniform
routing, 512 prompt / 128 output tokens. ``validation/arch_gpu.sh`` ran ``validation/cold_gpu.py --levels 1,16,64
--stagger-levels 4,32 --duration 15s --calibrate h200`` for each model, one per GPU: every level warmed up first, then
``servelab calibrate --url``'s design (steady state at 1, 16 and 64 streams, 30 s each, cold: MODEL-calibrate-run.json),
``vllm bench serve`` bursts at 1, 16 and 64 streams (2 requests a stream, a seed and a prefix-cache reset a level:
MODEL-bursts.json, its hits and JIT lines per level) and ``servelab bench`` at 4 and 32 streams (15 s: MODEL-stagger-run.json).

Held-out points per model: the three bursts (tok/s, mean TTFT) and the five steady-state levels (tok/s, p50 TTFT; the
single stream's TPOT). The steady state at 64 streams is one 30 s window, not the MoE truth rule's 3 × 60 s: said here
(the fourth set's repeats, where they ran, are scored instead, ``long``; the window is shown beside them, not scored).
A point is inside the band when the measured tok/s (TTFT) lies within [prediction ÷ (1 + b), prediction ÷ (1 − b)], b the
point's band, as predict prints it (servelab.plan.band; until eda5322, × (1 ± b)).

The second set (validation/kept-back2-h200/: one 4 × H200 host, the same recipe, four models at once) was chosen before
the fused-MoE kernel's rate (servelab.engines.vllm_moe.MOE_RATE) was measured and opened after predict was frozen with it
(commit 725136f). The third (validation/kept-back3-h200/: OLMoE-1B-7B, Granite-3.1-3B-A800M, GLM-4.5-Air cut to 16 layers,
Phi-3.5-MoE; one 4 × H200 host, the same recipe) was committed before the host's floor (``Engine.eager_host_s``) was modelled
and opened after predict was frozen with it (commit cd7a670).

The fourth (validation/kept-back4-h200/: ERNIE-4.5-21B-A3B's shapes, Granite-3.0-1B-A400M, Llama-3.2-1B, Kimi-K2 cut to 4 layers
in BF16; one 4 × H200 host, the same recipe with the steady state at 4, 16 and 32 streams) was committed before the host's time
per step (``Engine.step_host_s``) was modelled and opened after predict was frozen with its first form (commit 2fe8e8f); its 64
streams were measured again under the truth rule (3 × 60 s on a second start of each server: MODEL-repeats3-stagger-run.json;
Kimi-K2's did not finish within the device's call), whose mean stands for the level (``long``) in place of the design's window.

The fifth (validation/kept-back5-h200/: Qwen3-0.6B, Gemma-3-1B, GLM-4-9B-0414's shapes, MiniMax-M2.5 cut to 8 layers in BF16;
one 4 × H200 host, the fourth's recipe and repeats) was committed before the host-bound steady state (waves, the host's queue,
the host's band) was modelled and opened after predict was frozen with it (commit 56a97d5); MiniMax-M2.5's repeats came back
cut by the device call's end (no run file), so its design window is scored.

The sixth (validation/kept-back6-h100/: Qwen2.5-0.5B and SmolLM2-1.7B on one H100 host, lent where an H200 was asked for; the
fifth's recipe without repeats) was committed before predict was frozen with the host-bound burst's queue and opened after
(commit ca8afdb); a folder whose name ends in -h100 is predicted and calibrated for an H100 SXM.

The seventh (validation/kept-back7-h100/: Qwen3-1.7B and Qwen3-30B-A3B cut to 16 layers on one H100 host; the sixth's recipe)
was committed with the sixth's configs (4adb0a2), and measured and opened after predict was frozen with the host-bound
steady state's floor and one host's queue (commit d525186).

The eighth (validation/kept-back8-h100/: Llama-3.2-3B's shapes and Mistral-7B-v0.3 on one H100 host, one job on it; the
seventh's recipe) was committed before the host's scale (bc249df), measured with predict as at d525186, and opened after the band
was taken from every held-out point (validation/bands.py).

The ninth (validation/kept-back9-h100/: DeepSeek-V3 cut to 5 layers in BF16 and Gemma-2-9B on one H100 host, one job on it; the
eighth's recipe, and DeepSeek-V3's 64 streams again under the truth rule, three 60 s repeats on a second start: ``long``) was committed
before it was measured (2b704ef) and opened after calibrate's prior on the efficiencies was tightened on Hopper (2e7720a).

The tenth (validation/kept-back10-h100/: Mixtral-8x22B cut to 8 layers in BF16 and OLMo-2-13B on a further H100 host, one job on it;
the ninth's recipe and repeats) was committed (ecf1031) before predict's band was held out by model (7e4baed), measured after it, and
opened blind at f1b4a5b (validation/kept-back10-h100/blind-f1b4a5b.txt): the first blind check of that band.

The eleventh (validation/kept-back11-h100/: Aya-Expanse-8B's shapes and dots.llm1 cut to 8 layers, two model_types servelab reads
as a generic decoder, on a further H100 host, one job on it; the tenth's recipe, dots.llm1's 64 streams as repeats, two of three
done) was committed (b61de0c) before it was measured and opened blind at 5d976b3 (validation/kept-back11-h100/blind-5d976b3.txt).
dots.llm1's truth is void (:func:`void`): vLLM 0.25 ran it on its Transformers backend, where the routing simulator that the
dummy-weight runs use sent every token to experts 0-5 of its 128; its rows are printed as opened and none is scored.

The twelfth (validation/kept-back12-h100/: AFMoE in vLLM's AfmoeConfig shapes and FlexOlmo-7x7B's shapes cut to 16 layers, two MoE
model_types servelab reads as a generic decoder, each native in vLLM 0.25, on a further H100 host, one job on it; the eleventh's recipe,
the 64 streams as repeats, three for AFMoE and two of three for FlexOlmo) was committed (2d31473) before it was measured and opened
blind at 4a20434 (validation/kept-back12-h100/blind-4a20434.txt).

The thirteenth (validation/kept-back13-h100/: Laguna in vLLM's LagunaConfig shapes cut to 24 layers and Minitron-8B's shapes, on a
further H100 host) was committed (df0d602) before it was measured and opened blind at df0d602 (blind-df0d602.txt).

The fourteenth (validation/kept-back14-h100/: A.X K1 in vLLM's AXK1Config shapes cut to 4 layers, MLA, and HY V3 in vLLM's HYV3Config
shapes cut to 8 layers, each 192 fine-grained experts without a tuned fused-MoE config, on a further H100 host) was committed (74a6cbc)
before it was measured and opened blind at c80af28 (blind-c80af28.txt). A level with a Triton JIT compile in its window (HY V3's
16-stream burst) is shown and not scored; HY V3 was served without calibrate's design (servelab read it as not fitting then).

The fifteenth (validation/kept-back15-h100/: not a new model, the second set's Moonlight-16B-A3B, whose held-out worst there was
measured while three other servers shared the host's CPUs, one job on a further H100 host by the same protocol, its steady state at 4
streams cut by the device call's end) was chosen (1b1e7a2) before it was measured and opened blind at ac47d6c (blind-ac47d6c.txt).

Usage: ``python validation/kept_back.py [kept-back2-h200 | … | kept-back15-h100]`` (no GPU; the folder under validation/, default the first set).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_check as cc  # noqa: E402
from servelab.metrics.bootlog import parse_bootlog  # noqa: E402
from servelab.rules.diagnose import void_routing  # noqa: E402

DATA = cc.ROOT / "validation" / "kept-back-h200"
GOALS = "tok/s median ≤ 8 %, worst ≤ 20 %; single stream ≤ 10 %; burst TTFT mean, median ≤ 25 %; ≥ 90 % of points inside the band"


def scored(path: Path) -> list[dict]:
    """A servelab run file's levels that are scored: with successful requests, and not cut short by the device call's end."""
    return [lv for lv in json.loads(path.read_text())["levels"] if lv["ok"] and not lv.get("cut_short")]


def levels(model: str, data: Path = DATA) -> dict[str, dict[int, dict]]:
    """The model's measured levels in ``data`` by kind: ``burst`` (vllm bench serve rows), ``design`` and ``stagger`` (servelab runs),
    and ``long`` (the truth rule's repeats, MODEL-repeats3-stagger-run.json: their mean tok/s, TTFT p50 and TPOT p50 a level)."""
    out = {"burst": {lv["concurrency"]: lv for lv in json.loads((data / f"{model}-bursts.json").read_text())["levels"]}}
    for kind, name in (("design", "calibrate-run"), ("stagger", "stagger-run")):
        path = data / f"{model}-{name}.json"
        out[kind] = {lv["concurrency"]: lv for lv in scored(path)} if path.exists() else {}
    long = data / f"{model}-repeats3-stagger-run.json"  # the truth rule's repeats (3 × 60 s): their mean stands for the level
    if long.exists():
        reps = scored(long)
        for c in sorted({lv["concurrency"] for lv in reps}):
            at = [lv for lv in reps if lv["concurrency"] == c]
            out.setdefault("long", {})[c] = {"output_throughput_tok_s": statistics.mean(lv["output_throughput_tok_s"] for lv in at),
                                             "ttft_ms": {"p50": statistics.mean(lv["ttft_ms"]["p50"] for lv in at)},
                                             "tpot_ms": {"p50": statistics.mean(lv["tpot_ms"]["p50"] for lv in at)},
                                             "prompt_tokens": sum(lv["prompt_tokens"] for lv in at), "ok": sum(lv["ok"] for lv in at)}  # fmt: skip
    return out


def hardware(data: Path) -> str:
    """The hardware profile of a kept-back folder's GPU: its name's suffix (``-h100``: an H100 SXM; else an H200)."""
    return "h100-sxm" if data.name.endswith("-h100") else "h200"


def void(model: str, data: Path = DATA) -> bool:
    """Whether a boot log of the model's server in ``data`` (MODEL-boot.log, MODEL-repeats3-boot.log) shows its MoE routing simulated
    with the router outside the MoE layer (``servelab.rules.diagnose.void_routing``, finding void_routing_simulation): every token went
    to the same top-k experts, so the server's throughput is not the model's and none of its points is scored."""
    logs = [data / f"{model}-boot.log", data / f"{model}-repeats3-boot.log"]
    return any(void_routing(parse_bootlog(p.read_text(errors="replace"))) for p in logs if p.exists())


def check(model: str, calibration: str, kinds: tuple[str, ...], data: Path = DATA) -> list[dict]:
    """One row per level of ``kinds``: measured, predicted with ``calibration`` and the signed errors (%), whether the measured
    tok/s and TTFT lie inside the point's band, and whether the point is scored (not a void truth's, :func:`void`; not a level with a
    Triton JIT compile in its window; not a design window whose level the truth rule's repeats measured)."""
    rows = []
    measured_levels = levels(model, data)
    voided = void(model, data)
    for kind, got in measured_levels.items():
        if kind not in kinds or not got:
            continue
        pred = cc.predicted(model, calibration, "burst" if kind == "burst" else "stagger", sorted(got), cc.prompt_tokens(got), hardware(data))
        for c, lv in sorted(got.items()):
            tok, ttft, tpot = cc.measured(kind, lv)
            p = pred[c]
            p_ttft = p["ttft_mean_s" if kind == "burst" else "ttft_s"] * 1e3
            lo, hi = p["band"]["aggregate_tok_s"]
            t_lo, t_hi = (v / p["ttft_s"] * p_ttft for v in p["band"]["ttft_s"])
            rows.append({"kind": kind, "c": c, "tok": tok, "p_tok": p["aggregate_tok_s"], "ttft": ttft, "p_ttft": p_ttft, "tpot": tpot,
                         "p_tpot": p["tpot_s"] * 1e3, "in_tok": lo <= tok <= hi, "in_ttft": t_lo <= ttft <= t_hi, "host_share": p["host_share"], "queue": p["host_queue_s"] * 1e3,
                         "void": voided, "jit": bool(lv.get("jit_lines") or lv.get("jit_kernels")),
                         "scored": not voided and not lv.get("jit_lines") and not lv.get("jit_kernels") and not (kind == "design" and c in measured_levels.get("long", {}))})  # fmt: skip  # the repeats' mean stands for it
    for r in rows:
        r.update(e_tok=100 * (r["p_tok"] / r["tok"] - 1), e_ttft=100 * (r["p_ttft"] / r["ttft"] - 1), e_tpot=100 * (r["p_tpot"] / r["tpot"] - 1))
    return rows


def show(title: str, rows: list[dict]) -> None:
    print(f"\n#### {title}\n\n(errors: predicted ÷ measured − 1; in band: measured within [prediction ÷ (1 + b), prediction ÷ (1 − b)], b the point's band)\n\n| level | tok/s meas / pred | err | TTFT ms meas / pred | err | TPOT ms meas / pred | err | in band (tok/s, TTFT) |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        why = "" if r["scored"] else " (not scored: a void truth)" if r["void"] else " (not scored: a Triton JIT compile in its window)" if r["jit"] else " (not scored: the repeats below)"
        print(f"| {r['kind']} {r['c']}{why} | {r['tok']:,.0f} / {r['p_tok']:,.0f} | {r['e_tok']:+.1f} % | {r['ttft']:,.0f} / {r['p_ttft']:,.0f} | {r['e_ttft']:+.1f} % | "
              f"{r['tpot']:.2f} / {r['p_tpot']:.2f} | {r['e_tpot']:+.1f} % | {'yes' if r['in_tok'] else 'NO'}, {'yes' if r['in_ttft'] else 'NO'} |")  # fmt: skip


def summary(rows: list[dict]) -> dict[str, float]:
    """The issue's measures over ``rows`` (absolute errors, %): tok/s median and worst, single-stream TPOT (the steady state's
    one stream, as validation/predict_arch.py scores it), burst TTFT mean median, and the share of the points whose measured
    tok/s, and whose TTFT, lie inside the band (two shares)."""
    rows = [r for r in rows if r["scored"]]  # a design window whose level the truth rule's repeats measured is shown, not scored
    if not rows:
        return {key: math.nan for key in ("tok_median", "tok_worst", "single", "burst_ttft_median", "inside_tok", "inside_ttft")}
    tok = [abs(r["e_tok"]) for r in rows]
    single = [abs(r["e_tpot"]) for r in rows if r["c"] == 1 and r["kind"] != "burst"]
    burst_ttft = [abs(r["e_ttft"]) for r in rows if r["kind"] == "burst"]
    return {"tok_median": statistics.median(tok), "tok_worst": max(tok), "single": max(single, default=float("nan")),
            "burst_ttft_median": statistics.median(burst_ttft) if burst_ttft else float("nan"),
            "inside_tok": 100 * sum(r["in_tok"] for r in rows) / len(rows), "inside_ttft": 100 * sum(r["in_ttft"] for r in rows) / len(rows)}  # fmt: skip


def main(data: Path = DATA) -> dict[str, dict]:
    """Replay the kept-back set in ``data`` (module docstring): per model, its held-out rows and their summary, and the rows after calibrate."""
    models = sorted(p.name.removesuffix("-bursts.json") for p in data.glob("*-bursts.json"))
    if not models:
        raise SystemExit(f"{data}: no MODEL-bursts.json there; name a kept-back folder under validation/")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            held = check(model, cc.SHIPPED, ("burst", "design", "stagger", "long"), data)
            show(f"held out (the shipped calibration, {cc.SHIPPED}): {model}", held)
            if held and held[0]["void"]:
                print(f"\n{model}: void, not scored: its server simulated the MoE routing with the router outside the MoE layer (finding "
                      "void_routing_simulation: every token to the same top-k experts), so its throughput is not the model's")
                results[model] = {"held": None, "rows": held}
                continue
            results[model] = {"held": summary(held), "rows": held}
            run = data / f"{model}-calibrate-run.json"
            if run.exists():
                own = cc.calibrated(run, model, Path(tmp) / f"{model}.yaml", hardware(data))
                after = check(model, own, ("burst", "stagger", "long"), data)
                show(f"after servelab calibrate on its design run (1, 16, 64 streams): {model}", after)
                results[model]["after"] = after
    print(f"\nGoals: {GOALS}\n\n| model | tok/s median / worst | single-stream TPOT | burst TTFT mean, median | inside the band: tok/s, TTFT | after calibrate: bursts / other steady-state levels (worst) |\n|---|---|---|---|---|---|")
    for model, r in results.items():
        s = r["held"]
        if s is None:
            print(f"| {model} | void: not scored (finding void_routing_simulation) | | | | |")
            continue
        after = r.get("after", [])
        worst = {kind: max((abs(x["e_tok"]) for x in after if x["kind"] in kinds and x["scored"]), default=float("nan"))
                 for kind, kinds in (("burst", ("burst",)), ("stagger", ("stagger", "long")))}  # fmt: skip
        cell = {key: "–" if math.isnan(v) else f"{v:.1f} %" for key, v in (*s.items(), *worst.items())}  # none measured: a model without a one-stream steady state or a design run
        print(f"| {model} | {cell['tok_median']} / {cell['tok_worst']} | {cell['single']} | {cell['burst_ttft_median']} | {s['inside_tok']:.0f} %, {s['inside_ttft']:.0f} % | "
              f"{cell['burst']} / {cell['stagger']} |")  # fmt: skip
    pooled = summary([row for r in results.values() for row in r["rows"]]) if results else {}
    if pooled:
        n = sum(row["scored"] for r in results.values() for row in r["rows"])
        print(f"\nAll {n} kept-back points: tok/s median {pooled['tok_median']:.1f} %, worst {pooled['tok_worst']:.1f} %; burst TTFT mean median "
              f"{pooled['burst_ttft_median']:.1f} %; inside the band: tok/s {pooled['inside_tok']:.0f} %, TTFT {pooled['inside_ttft']:.0f} %")
    return results


if __name__ == "__main__":
    main(cc.ROOT / "validation" / sys.argv[1] if len(sys.argv) > 1 else DATA)
