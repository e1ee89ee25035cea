#!/usr/bin/env python3
"""How many of vLLM's engine steps carry prompts, and what such a step costs: the measurement behind
``MIXED_SHARE`` in src/servelab/plan/cohorts.py (issue 17).

Every stream's tokens arrive once per engine step, so the arrival times of all the chunks of a level,
merged, fall into clusters one step apart (a new step starts after a gap of more than 1.5 ms). A
step that carries prompts is far longer than a decode step (vLLM 0.25 on H100: a mixed batch above the
largest CUDA-graph capture size, 512 tokens, runs without graphs): a step longer than 2.5 × the median
step is counted as such. The prompts in it are the requests whose first token falls in the measured
part of the level (its middle 60 %, away from ramp and drain).

Input: validation/predict-h100/{moe-long,hybrid}-chunks.jsonl.xz — per successful request of
validation/predict-h100/{moe-long,hybrid}-run.json, its level (``c``), its start (s, the run's
clock) and its chunks' times after the start (ms), taken from the run's records.jsonl.

Then the same for the steady state of every cold run (validation/cold-*/MODEL-stagger-records.jsonl.xz,
servelab bench's records of validation/cold_gpu.py), with each machine's CUDA-graph capture time from
the run's boot log beside it: what a step carrying prompts costs by model and machine (issue 38).

Then every stream's inter-token latencies at 16 and 64 streams, for the cold runs, the capture pairs
(validation/capture-h100*/) and the routing variants (validation/topk-h100/): where the machines differ,
the steps that carry prompts (issue 38).

Then the cohorts of the MoE runs' steady state: the prompts whose first tokens came out of one engine
step (first tokens within ``COHORT_S`` of each other), per such step, beside the level's output tok/s;
``servelab predict`` assumes k ÷ min(k, ``MIXED_SHARE``) of them, k = (streams − 1) ÷ output tokens, where
the token budget splits no cohort (``servelab.plan.cohorts.cohorts``).

Then the same for an MLA MoE (:func:`mla_cohorts`), whose steps carrying prompts run without CUDA graphs for 70–80 ms:
there the prompts bunch far beyond that rule at 64 streams (6.25 a step against 1.97; issue 53's calibrate check).

Last, the cohorts as the load runs (:func:`merging`): DeepSeek-V2-Lite's and the third kept-back set's prompts per step, 10 s
window by window; where the steps with prompts are host-bound, they merge into waves.

Then the kept-back servers' steps with prompts against what predict prices and the host's floor, and the steady state held out
with a share of that floor as such a step's least (:func:`kept_back_steps`: ``Calibration.mixed_floor``, issue 53).

Usage: ``python validation/mixed_steps.py`` (no GPU).
"""

from __future__ import annotations

import json
import lzma
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from servelab.metrics.waves import COHORT_GAP, cohorts  # noqa: E402

HERE = Path(__file__).resolve().parent / "predict-h100"
GAP_S = 0.0015  # chunks further apart than this belong to different steps
LONG = 2.5  # a step this many times the median step carries prompts
COLD_LONG = 1.6  # … in the cold runs, whose decode steps are longer beside a mixed step (Mixtral: 19 against ~43 ms)
COLD = Path(__file__).resolve().parent
WINDOW_S = 10.0  # merging(): the windows the cohorts are counted in
COHORT_S = 0.004  # first tokens closer than this came out of one engine step (a step's chunks leave the API server within ~1 ms)


def levels(path: Path) -> dict[int, list[dict]]:
    by: dict[int, list[dict]] = {}
    with lzma.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            by.setdefault(r["c"], []).append(r)
    return dict(sorted(by.items()))


def row(name: str, c: int, reqs: list[tuple[float, np.ndarray]], long_at: float) -> str:
    """One level's table row from its requests' (start, chunk times after it), s: its steps, and those
    longer than ``long_at`` × the median step (the ones that carry prompts)."""
    t = np.sort(np.concatenate([start + chunks for start, chunks in reqs]))
    lo, hi = np.percentile(t, 20), np.percentile(t, 80)
    t = t[(t > lo) & (t < hi)]
    starts = t[np.concatenate([[0], np.nonzero(np.diff(t) > GAP_S)[0] + 1])]
    steps = np.diff(starts)
    p50 = np.median(steps)
    long = steps > long_at * p50
    first = np.array([start + chunks[0] for start, chunks in reqs])
    prompts = int(((first > lo) & (first < hi)).sum())
    return (f"| {name} | {c} | {len(steps)} | {p50 * 1e3:.1f} | {long.mean():.0%} | {steps[long].mean() * 1e3 if long.any() else 0:.0f} | "
            f"{prompts / len(steps):.2f} | {prompts / max(long.sum(), 1):.2f} |")


def cold_levels(path: Path) -> dict[int, list[tuple[float, np.ndarray]]]:
    """A cold run's measured levels (validation/cold_gpu.py's servelab bench records): each successful
    request's start and chunk times after it, s."""
    by: dict[int, list[tuple[float, np.ndarray]]] = {}
    with lzma.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            if r["phase"] == "measured" and r["status"] == "ok" and r["chunk_times"]:
                by.setdefault(r["concurrency"], []).append((r["start"], np.array(r["chunk_times"])))
    return dict(sorted(by.items()))


def main() -> None:
    head = ("| run | streams | steps | decode step p50 ms | steps carrying prompts | such a step, mean ms | prompts per step | prompts per such step |\n"
            "|---|---|---|---|---|---|---|---|")
    print(head)
    for name in ("moe-long", "hybrid"):
        for c, reqs in levels(HERE / f"{name}-chunks.jsonl.xz").items():
            print(row(name, c, [(r["start"], np.array(r["chunks_ms"]) / 1e3) for r in reqs], LONG))
    print(f"\nThe cold runs' steady state (validation/cold-*/, 512/128 tokens; a step longer than {COLD_LONG} × the median carries prompts; "
          "the machine's CUDA-graph capture time from the run's boot log)\n")
    print(head.replace("| run |", "| run | graph capture s |").replace("|---|", "|---|---|", 1))
    for path in sorted(COLD.glob("cold-*/*-stagger-records.jsonl.xz")):
        boot = json.loads(path.with_name(path.name.replace("records.jsonl.xz", "run.json")).read_text()).get("boot") or {}
        for c, reqs in cold_levels(path).items():
            if c > 1:
                print(row(f"{path.parent.name}/{path.name.split('-stagger')[0]} | {boot.get('graph_capture_s') or '–'}", c, reqs, COLD_LONG))
    print("\nThe same steady states as each stream sees them: the gaps between its chunks (ITL; each one engine step), "
          "ms, at 16 and 64 streams, every cold run and capture pair (validation/cold-*/, validation/capture-h100*/)\n")
    print("| run | streams | ITL p50 | p75 | p90 | p99 | mean | gaps above 1.6 × p50 |\n|---|---|---|---|---|---|---|---|")
    runs = sorted([*COLD.glob("cold-*/*-stagger-records.jsonl.xz"), *COLD.glob("capture-h100*/*-stagger-records.jsonl.xz"),
                   *COLD.glob("topk-h100/*-stagger-records.jsonl.xz"), *COLD.glob("repeats-h100/*-stagger-records.jsonl.xz")])  # fmt: skip
    for path in runs:
        for c, reqs in cold_levels(path).items():
            if c in (16, 64):
                print(itl_row(f"{path.parent.name}/{path.name.split('-stagger')[0]}", c, reqs))
    print(f"\nThe MoE runs' cohorts: prompts per engine step that gave first tokens (first tokens within {COHORT_S * 1e3:.0f} ms of each other), "
          "and the level's output tok/s (512/128 tokens; predict assumes 1.00 at 16 streams and 1.97 at 64)\n")
    print("| run | 16 streams: prompts / steps / per step | tok/s | 64 streams: prompts / steps / per step | tok/s |\n|---|---|---|---|---|")
    for path in runs:
        if any(moe in path.name for moe in ("mixtral", "qwen3-30b", "qwen2-57b")):
            tok_s = {lv["concurrency"]: lv["output_throughput_tok_s"] for lv in json.loads(path.with_name(path.name.replace("records.jsonl.xz", "run.json")).read_text())["levels"]}
            cells = [cohort_cells(reqs, tok_s[c]) for c, reqs in cold_levels(path).items() if c in (16, 64)]
            print(f"| {path.parent.name}/{path.name.split('-stagger')[0]} | {' | '.join(cells)} |")
    mla_cohorts()
    merging()
    small_models()
    kept_back_steps()


def first_tokens(path: Path) -> list[dict]:
    """The measured requests of a first-tokens file (level ``c``, ``start`` and ``first_token_s``, s; JSON lines, xz)."""
    with lzma.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def step_gaps(levels: list[dict]) -> dict[int, float]:
    """Per level of a servelab run's ``levels`` (repeats alike), the gap between first tokens at which servelab bench starts a
    new engine step: ``COHORT_GAP`` × the level's ITL p50 (the repeats' median), s."""
    itl: dict[int, list[float]] = {}
    for lv in levels:
        itl.setdefault(lv["concurrency"], []).append(lv["itl_ms"]["p50"] / 1e3)
    return {c: COHORT_GAP * statistics.median(v) for c, v in itl.items()}


def merging() -> None:
    """The cohorts as the load runs: prompts per engine step (``servelab.metrics.waves.cohorts``, a new step where first tokens
    are more than ``COHORT_GAP`` × the level's ITL p50 apart, as servelab bench counts them), per ``WINDOW_S`` of each level, for
    DeepSeek-V2-Lite's three 60 s repeats at 64 streams (validation/arch-h200-x4/), Moonlight-16B-A3B's and Qwen1.5-MoE-A2.7B's
    60 s repeats at 64 streams (validation/long-h200/; the third repeat cut after ~6 s by the device's time) and the third
    kept-back set's design runs at 16 and 64 streams (validation/kept-back3-h200/MODEL-calibrate-first-tokens.jsonl.xz: level,
    start and first token of each measured request, s; 30 s a level). A host-bound steady state's cohorts merge into waves (validation/RESULTS-predict.md)."""
    print(f"\nThe cohorts as the load runs: prompts per engine step that gave first tokens, per {WINDOW_S:.0f} s of the level\n")
    print("| run | streams | prompts per step, window by window |\n|---|---|---|")
    arch = COLD / "arch-h200-x4" / "deepseek-v2-lite-repeats3-first-tokens.jsonl.xz"
    files = [(arch, "deepseek-v2-lite (3 × 60 s)", arch.with_name("deepseek-v2-lite-repeats3-stagger-run.json"))]
    files += [(p, p.name.replace("-repeats3-first-tokens.jsonl.xz", " (60 s repeats)"), p.with_name(p.name.replace("-first-tokens.jsonl.xz", "-stagger-run.json")))
              for p in sorted((COLD / "long-h200").glob("*-first-tokens.jsonl.xz"))]  # fmt: skip
    files += [(p, p.name.removesuffix("-calibrate-first-tokens.jsonl.xz"), p.with_name(p.name.replace("-first-tokens.jsonl.xz", "-run.json")))
              for p in sorted((COLD / "kept-back3-h200").glob("*-first-tokens.jsonl.xz"))]  # fmt: skip
    for path, name, run in files:
        firsts, gaps = first_tokens(path), step_gaps(json.loads(run.read_text())["levels"])
        for c in sorted({r["c"] for r in firsts}):
            gap = gaps[c]
            t = np.sort([r["start"] + r["first_token_s"] for r in firsts if r["c"] == c])
            runs = np.split(t, np.nonzero(np.diff(t) > 2.0)[0] + 1)  # repeats apart by more than 2 s
            cells = []
            for run in runs:
                for a in np.arange(run[0], run[-1], WINDOW_S):
                    x = run[(run >= a) & (run < a + WINDOW_S)]
                    if len(x) > 1:
                        cells.append(f"{cohorts(x, gap)[0]:.1f}")
            print(f"| {name} | {c} | {', '.join(cells)} |")


def small_models() -> None:
    """The fourth kept-back set's prompts per step by level (servelab's figure: first tokens more than half the level's ITL p50
    apart are different steps, ``servelab.metrics.waves.cohorts``) from each run's first tokens, and Llama-3.2-1B with vLLM's
    capture sizes against CUDA graphs up to 2,048 tokens (validation/graphs-h200/: a step with one prompt inside a graph)."""
    print("\nPrompts per engine step (by third of the level), the fourth kept-back set and Llama-3.2-1B with larger CUDA graphs\n")
    print("| run | streams | prompts per step | by third | tok/s |\n|---|---|---|---|---|")
    runs = [(COLD / "kept-back4-h200", m, ft, run) for m in ("llama-3.2-1b", "granite-3.0-1b-a400m", "ernie-4.5-21b-a3b", "kimi-k2-4l")
            for ft, run in (("stagger", "stagger-run"), ("calibrate", "calibrate-run"), ("repeats3", "repeats3-stagger-run"))]
    runs += [(COLD / "graphs-h200", m, "", "stagger-run") for m in ("llama-3.2-1b", "llama-3.2-1b-graphs")]  # fmt: skip
    for folder, model, ft, run in runs:
        tokens, run_file = folder / f"{model}-{ft + '-' if ft else ''}first-tokens.jsonl.xz", folder / f"{model}-{run}.json"
        if not tokens.exists() or not run_file.exists():
            continue  # Kimi-K2's repeats did not run
        firsts, levels = first_tokens(tokens), json.loads(run_file.read_text())["levels"]
        for c, gap in sorted(step_gaps(levels).items()):
            if c < 4:
                continue
            per_step, thirds = cohorts([r["start"] + r["first_token_s"] for r in firsts if r["c"] == c], gap)
            tok = statistics.mean(lv["output_throughput_tok_s"] for lv in levels if lv["concurrency"] == c)
            name = f"{folder.name}/{model} {run.removesuffix('-run')}" + (" (3 × 60 s; first tokens of ~the first two)" if ft == "repeats3" and model == "llama-3.2-1b" else "")
            print(f"| {name} | {c} | {per_step:.2f} | {', '.join(f'{x:.1f}' for x in thirds)} | {tok:,.0f} |")


def kept_back_steps() -> None:
    """What a steady-state step with prompts costs on the kept-back servers (validation/kept-back*/, 512/128 tokens, not void) at 16
    streams and up, against what predict prices with the shipped calibration: the run file's ITL p50 (a decode step) and p90 (a step
    with prompts where they ride ≥ 10 % of the steps), the prompts a step servelab counted (``waves``), predict's decode step and its
    step with prompts all told (``Point.decode_step_s`` + (TPOT − it) ÷ the share of steps with prompts), and the host's floor
    for a step without CUDA graphs with the MoE and MLA layers' launches (``Terms.eager_host_s``), which the steady state charges only
    where the host binds (docs/metrics.md, "host's floor"). Last, the measured step with prompts over each, median by the model's
    MoE layers, over the levels the host does not bind whose ITL p90 is a step with prompts (above 1.5 × the p50: not waves)."""
    from kept_back import void
    from servelab.plan.calibration import calibration
    from servelab.plan.fit import measured_levels
    from servelab.plan.hardware import load_hardware
    from servelab.plan.model_spec import load_model
    from servelab.plan.predict import predict
    from servelab.plan.quant import get_format
    from servelab.store.results import RunResult

    print("\nThe kept-back servers' steps with prompts (ms; ITL from the run files; predict with the shipped calibration)\n")
    print("| server | run | streams | MoE layers | ITL p50 / p90 | prompts a step | priced: decode step / step with prompts | host's floor with the MoE and MLA layers |\n"
          "|---|---|---|---|---|---|---|---|")  # fmt: skip
    ratios: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    held: list[tuple] = []  # every steady-state level beyond one stream (repeats each), with the shipped calibration
    fmt = get_format("bf16")
    for path in sorted(COLD.glob("kept-back*/*-run.json")):
        model, run_name = next(((path.name.split(f"-{k}")[0], k) for k in ("repeats3-stagger-run", "stagger-run", "calibrate-run") if path.name.endswith(f"-{k}.json")), ("", ""))
        if not model or void(model, path.parent):
            continue
        spec, hw = load_model(str(COLD / "configs" / model)), load_hardware("h100-sxm" if path.parent.name.endswith("-h100") else "h200")
        run, cal = RunResult.model_validate_json(path.read_text()), calibration(None, spec, fmt)
        raw = {lv.concurrency: lv for lv in run.levels}
        for m in measured_levels(run, spec, fmt, hw):
            lv, t = raw[m.concurrency], m.terms.on_host(cal.host_scale)
            if m.concurrency > 1:
                held.append((m, cal))
            if m.concurrency < 16 or not lv.itl_ms or not t.mixed_share or run_name.startswith("repeats3"):
                continue  # a repeat's level is the design's again
            p = predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens)
            mixed = p.decode_step_s + (p.tpot_s - p.decode_step_s) / t.mixed_share
            per_step = f"{lv.waves.prompts_per_step:.2f}" if lv.waves and lv.waves.prompts_per_step else "–"
            print(f"| {path.parent.name}/{model} | {run_name.removesuffix('-run')} | {m.concurrency} | {spec.moe_layers} | {lv.itl_ms.p50:.1f} / {lv.itl_ms.p90:.1f} | "
                  f"{per_step} | {p.decode_step_s * 1e3:.1f} / {mixed * 1e3:.1f} | {t.eager_host_s * 1e3:.1f} |")  # fmt: skip
            if not p.host_bound and (lv.itl_ms.p90 > 1.5 * lv.itl_ms.p50):  # the p90 a step with prompts: not bunched into waves
                ratios[spec.moe_layers >= 20].append((lv.itl_ms.p90 / 1e3 / mixed, lv.itl_ms.p90 / 1e3 / t.eager_host_s))
    floors = sorted(b for pairs in ratios.values() for _, b in pairs)
    if not floors:
        return
    print(f"\nmeasured step with prompts over the host's floor, {len(floors)} levels: 10th percentile {floors[len(floors) // 10]:.2f}, "
          f"median {statistics.median(floors):.2f}, 90th {floors[len(floors) * 9 // 10]:.2f}")  # fmt: skip
    for many, pairs in ratios.items():
        if not pairs:
            continue
        print(f"\n{'20 MoE layers or more' if many else 'fewer than 20 MoE layers (dense included)'}: {len(pairs)} levels, measured step with prompts (ITL p90) "
              f"over predict's median {statistics.median(a for a, _ in pairs):.2f}, over the host's floor median {statistics.median(b for _, b in pairs):.2f}")  # fmt: skip
    print(f"\nThe {len(held)} steady-state levels beyond one stream (each 60 s repeat and the design window it repeats apart), held out (tok/s), with a share of the host's floor as a step with prompts' least "
          "(Calibration.mixed_floor; 0 in the shipped calibrations)\n\n| share | median | worst | within 10 % | within 20 % |\n|---|---|---|---|---|")  # fmt: skip
    for share in (0.0, 0.5, 0.6, 0.7, 0.8, 1.0):
        errors = [abs(predict(m.terms, cal.model_copy(update={"mixed_floor": share}), concurrency=m.concurrency, output_tokens=m.output_tokens).aggregate_tok_s / m.tok_s - 1)
                  for m, cal in held]  # fmt: skip
        print(f"| {share:g} | {100 * statistics.median(errors):.1f} % | {100 * max(errors):.1f} % | {sum(e <= 0.1 for e in errors)} | {sum(e <= 0.2 for e in errors)} |")


def mla_cohorts() -> None:
    """DeepSeek-V2-Lite (bf16, FlashMLA, its fused-MoE kernel untuned) on the 4 × H200 host (validation/arch-h200-x4/): its
    steps carrying prompts and its cohorts by streams, the 64-stream repeats from their first tokens alone
    (deepseek-v2-lite-repeats3-first-tokens.jsonl.xz: level, start and first token of each request, s)."""
    arch = COLD / "arch-h200-x4"
    print("\nAn MLA MoE (DeepSeek-V2-Lite bf16, validation/arch-h200-x4/): steps carrying prompts and prompts per such step\n")
    print("| streams | steps | decode step p50 ms | steps carrying prompts | such a step, mean ms | prompts per step | prompts per such step | cohorts: prompts / steps / per step |\n"
          "|---|---|---|---|---|---|---|---|")  # fmt: skip
    for c, reqs in cold_levels(arch / "deepseek-v2-lite-stagger-records.jsonl.xz").items():
        print("| " + row("", c, reqs, LONG).removeprefix("|  | ") + f" {cohort_cells(reqs, 0.0).split(' | ')[0]} |")
    firsts = first_tokens(arch / "deepseek-v2-lite-repeats3-first-tokens.jsonl.xz")
    reqs = [(r["start"], np.array([r["first_token_s"]])) for r in firsts]
    print(f"| {firsts[0]['c']} (3 × 60 s) | – | – | – | – | – | – | {cohort_cells(reqs, 0.0).split(' | ')[0]} |")


def cohort_cells(reqs: list[tuple[float, np.ndarray]], tok_s: float) -> str:
    """One level's cohorts: its prompts, the engine steps their first tokens came out of, prompts per such step, and its tok/s."""
    first = [start + chunks[0] for start, chunks in reqs]
    per_step = cohorts(first, COHORT_S)[0]  # exact: prompts ÷ steps
    return f"{len(first)} / {round(len(first) / per_step)} / {per_step:.2f} | {tok_s:,.0f}"


def itl_row(name: str, c: int, reqs: list[tuple[float, np.ndarray]]) -> str:
    """One level's inter-token latencies (every gap between a stream's chunks, ms): their percentiles,
    mean (= the level's TPOT over all streams) and the share that are steps carrying prompts."""
    gaps = np.concatenate([np.diff(chunks) for _, chunks in reqs]) * 1e3
    p50, p75, p90, p99 = np.percentile(gaps, [50, 75, 90, 99])
    return f"| {name} | {c} | {p50:.1f} | {p75:.1f} | {p90:.1f} | {p99:.1f} | {gaps.mean():.1f} | {(gaps > COLD_LONG * p50).mean():.0%} |"


if __name__ == "__main__":
    main()
