#!/usr/bin/env python3
"""``servelab calibrate --url`` on a GPU server, checked on the same server's bursts and other steady-state levels
(issue 53: "after calibrate on a server's steady-state levels: its bursts within 15 %, its steady state at other
concurrencies within 10 %").

Data (validation/calibrate-h200/serverN/, three H200s, 16-core Xeon hosts, vLLM 0.25 kit, dummy weights, uniform routing):
``validation/cold_gpu.py --model MODEL --levels 1,16,64 --stagger-levels 4,32 --duration 15s --calibrate h200`` started
the model (server1: DeepSeek-V2-Lite bf16 on FlashMLA; server2, server3: gpt-oss-20b bf16 on /v1/completions; server3
then Phi-4), warmed every level up, ran ``servelab calibrate --url`` (its design: 1, 16 and 64 streams, 30 s each,
steady state, cold; MODEL-calibrate-run.json), then ``vllm bench serve`` bursts at 1, 16 and 64 streams (2 requests a
stream, a seed and a prefix-cache reset a level) and ``servelab bench`` at 4 and 32 streams (15 s). 512 / 128 tokens.
Prefix-cache hits 0 (Phi-4's 64-stream burst: 512 of 66,816 prompt tokens); each MoE server's one Triton JIT line came
in the warm-up. server2's design run did not come back: it is not checked.

Each design run is refitted with this checkout's ``servelab calibrate`` (the shipped calibration as prior).
Prints each check level, measured and predicted with the server's own calibration and with the shipped one.
Usage: ``python validation/calibrate_check.py`` (no GPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "validation" / "calibrate-h200"
SHIPPED = "vllm-0.25-h100-bf16"


def predicted(model: str, calibration: str, mode: str, levels: list[int], input_tokens: int, hardware: str = "h200") -> dict[int, dict]:
    """servelab predict's points (by concurrency) for ``model`` (validation/configs/MODEL, in its config's format: bf16 here) under
    the check's load with ``calibration`` on ``hardware`` (a profile name), at the prompt length the level sent."""
    cmd = [sys.executable, "-m", "servelab", "predict", "--model", str(ROOT / "validation" / "configs" / model), "--hardware", hardware, "--closed-loop", mode,
           "--input-tokens", str(input_tokens),
           "--output-tokens", "128", "--concurrency", ",".join(map(str, levels)), "--calibration", calibration, "--json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    return {p["concurrency"]: p for p in json.loads(out.stdout)["variants"][0]["points"]}


def prompt_tokens(measured: dict[int, dict]) -> int:
    """The levels' mean prompt length as the server counted it: vllm bench serve's random prompts of 512 tokens reach
    it as 522 (its total_input_tokens), above the largest CUDA-graph capture size (512), so that a prompt's step runs
    without graphs; servelab bench's are 512 (its prompt_tokens)."""
    sent = [(lv["total_input_tokens"], lv["completed"]) if "completed" in lv else (lv["prompt_tokens"], lv["ok"]) for lv in measured.values()]
    return round(sum(t for t, _ in sent) / sum(n for _, n in sent))


def measured(mode: str, lv: dict) -> tuple[float, float, float]:
    """(tok/s, TTFT ms, TPOT ms) of one measured level: a burst's (vllm bench serve's row) mean TTFT and TPOT, a steady
    state's (a servelab run's level) p50s."""
    if mode == "burst":
        return lv["output_throughput"], lv["mean_ttft_ms"], lv["mean_tpot_ms"]
    return lv["output_throughput_tok_s"], lv["ttft_ms"]["p50"], lv["tpot_ms"]["p50"]


def calibrated(run: Path, model: str, out: Path, hardware: str = "h200") -> str:
    """``servelab calibrate`` (this checkout's fit, the shipped calibration as prior) on the design run ``run`` that
    ``servelab calibrate --url`` measured on the server (``hardware``: its profile name), written to ``out``: its path."""
    cmd = [sys.executable, "-m", "servelab", "calibrate", str(run), "--hardware", hardware, "--model", str(ROOT / "validation" / "configs" / model), "--out", str(out)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    return str(out)


def main() -> None:
    print(f"| server | model | level | measured tok/s | own calibration | shipped ({SHIPPED}) | measured TTFT ms | predicted (own) |\n|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for run in sorted(DATA.glob("*/*-calibrate-run.json")):
            server, model = run.parent, run.name.removesuffix("-calibrate-run.json")
            own = calibrated(run, model, Path(tmp) / f"{server.name}-{model}.yaml")
            bursts = {lv["concurrency"]: lv for lv in json.loads((server / f"{model}-bursts.json").read_text())["levels"]}
            stagger = {lv["concurrency"]: lv for lv in json.loads((server / f"{model}-stagger-run.json").read_text())["levels"]}
            for mode, levels in (("burst", bursts), ("stagger", stagger)):
                got = {cal: predicted(model, cal, mode, sorted(levels), prompt_tokens(levels)) for cal in (own, SHIPPED)}
                for c, lv in sorted(levels.items()):
                    tok, ttft, _ = measured(mode, lv)
                    cells = [f"{p[c]['aggregate_tok_s']:,.0f} ({100 * (p[c]['aggregate_tok_s'] / tok - 1):+.1f} %)" for p in got.values()]
                    key = "ttft_mean_s" if mode == "burst" else "ttft_s"
                    print(f"| {server.name} | {model} | {mode} {c} | {tok:,.0f} | {cells[0]} | {cells[1]} | {ttft:,.0f} ({'mean' if mode == 'burst' else 'p50'}) "
                          f"| {got[own][c][key] * 1e3:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
