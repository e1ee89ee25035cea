#!/usr/bin/env python3
"""Whether one API server process bounds a small MoE's steady state (issue 53): OLMoE-1B-7B and Granite-3.1-3B-A800M (vLLM
0.25, BF16, dummy weights, uniform routing), each served twice on one 4 × H200 host at once, one server per GPU: with vLLM's
one API server process and with four (``--api-server-count 4``). ``validation/cold_gpu.py --stagger-only --levels 16,64
--duration 60s`` each: servelab bench's steady state, 512 / 128 tokens, every prompt unique (prefix-cache hits 0), 60 s a level.

Prints each level's output tok/s, TTFT p50, TPOT p50 and its prompts per engine step (``servelab.metrics.waves``: first tokens
more than half a decode step, the level's ITL p50, apart are different steps), over the level and its thirds, from the
measured requests' first tokens (validation/api-server-h200/MODEL-first-tokens.jsonl.xz, s since the run's start).

Usage: ``python validation/api_servers.py`` (no GPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "validation"))

from mixed_steps import first_tokens, step_gaps  # noqa: E402
from servelab.metrics.waves import cohorts  # noqa: E402

DATA = ROOT / "validation" / "api-server-h200"
SERVERS = {"olmoe-1b-7b": 1, "olmoe-1b-7b-api4": 4, "granite-3.1-3b-a800m": 1, "granite-3.1-3b-a800m-api4": 4}  # run → API server processes


def main() -> dict[tuple[str, int], dict]:
    """One row per run and level: tok/s, TTFT and TPOT p50 (ms), prompts per step over the level and by third."""
    print("| model | API servers | streams | tok/s | TTFT p50, ms | TPOT p50, ms | prompts per step (by third) |\n|---|---|---|---|---|---|---|")
    out = {}
    for name, servers in SERVERS.items():
        firsts, levels = first_tokens(DATA / f"{name}-first-tokens.jsonl.xz"), json.loads((DATA / f"{name}-stagger-run.json").read_text())["levels"]
        gaps = step_gaps(levels)
        for lv in levels:
            c = lv["concurrency"]
            exact, by_third = cohorts([r["first_token"] for r in firsts if r["c"] == c], gaps[c])
            per_step, thirds = round(exact, 2), [round(x, 2) for x in by_third]
            row = {"tok_s": lv["output_throughput_tok_s"], "ttft": lv["ttft_ms"]["p50"], "tpot": lv["tpot_ms"]["p50"], "per_step": per_step, "thirds": thirds}
            out[name.removesuffix("-api4"), servers, c] = row
            print(f"| {name.removesuffix('-api4')} | {servers} | {c} | {row['tok_s']:,.0f} | {row['ttft']:.0f} | {row['tpot']:.2f} | "
                  f"{per_step:g} ({', '.join(f'{x:g}' for x in thirds)}) |")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
