#!/usr/bin/env python3
"""How many of vLLM's engine steps carry prompts, and what such a step costs: the measurement behind
``MIXED_SHARE`` in src/servelab/plan/predict.py (issue 17).

Every stream's tokens arrive once per engine step, so the arrival times of all the chunks of a level,
merged, fall into clusters one step apart (a new step starts after a gap of more than 1.5 ms). A
step that carries prompts is far longer than a decode step (vLLM 0.25 on H100: a mixed batch above the
largest CUDA-graph capture size, 512 tokens, runs without graphs): a step longer than 2.5 × the median
step is counted as such. The prompts in it are the requests whose first token falls in the measured
part of the level (its middle 60 %, away from ramp and drain).

Input: validation/predict-h100/{moe-long,hybrid}-chunks.jsonl.xz — per successful request of
validation/predict-h100/{moe-long,hybrid}-run.json, its level (``c``), its start (s, the run's
clock) and its chunks' times after the start (ms), taken from the run's records.jsonl.

Usage: ``python validation/mixed_steps.py`` (no GPU).
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "predict-h100"
GAP_S = 0.0015  # chunks further apart than this belong to different steps
LONG = 2.5  # a step this many times the median step carries prompts


def levels(path: Path) -> dict[int, list[dict]]:
    by: dict[int, list[dict]] = {}
    with lzma.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            by.setdefault(r["c"], []).append(r)
    return dict(sorted(by.items()))


def main() -> None:
    print("| run | streams | steps | decode step p50 ms | steps carrying prompts | such a step, mean ms | prompts per step | prompts per such step |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ("moe-long", "hybrid"):
        for c, reqs in levels(HERE / f"{name}-chunks.jsonl.xz").items():
            t = np.sort(np.concatenate([r["start"] + np.array(r["chunks_ms"]) / 1e3 for r in reqs]))
            lo, hi = np.percentile(t, 20), np.percentile(t, 80)
            t = t[(t > lo) & (t < hi)]
            starts = t[np.concatenate([[0], np.nonzero(np.diff(t) > GAP_S)[0] + 1])]
            steps = np.diff(starts)
            p50 = np.median(steps)
            long = steps > LONG * p50
            first = np.array([r["start"] + r["chunks_ms"][0] / 1e3 for r in reqs])
            prompts = int(((first > lo) & (first < hi)).sum())
            print(f"| {name} | {c} | {len(steps)} | {p50 * 1e3:.1f} | {long.mean():.0%} | {steps[long].mean() * 1e3 if long.any() else 0:.0f} | "
                  f"{prompts / len(steps):.2f} | {prompts / max(long.sum(), 1):.2f} |")


if __name__ == "__main__":
    main()
