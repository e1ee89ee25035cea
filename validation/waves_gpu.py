#!/usr/bin/env python3
"""Synchronized waves on a real vLLM: repeatability of the steady-state closed loop, and the same
load from ``vllm bench serve``, with each tool's server-side queue and TTFT histograms.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm; one server start
per call, so that each call stays under the device tool's 10 minutes):

    python3 validation/waves_gpu.py --kit .gpu-vllm --out OUT --start 1     # then --start 2, --start 3

Each start: Qwen3-8B bf16 (dummy weights), vLLM's default flags; then, on the same server,
``servelab bench`` (stagger, the default) at 64 and 256 streams, ``servelab bench --closed-loop
burst`` at 256, and ``vllm bench serve --max-concurrency 256`` with the same lengths (1,024 in /
256 out, chat endpoint, ignore_eos). Around each, the server's ``vllm:request_queue_time_seconds``
and ``vllm:time_to_first_token_seconds`` histograms are scraped (mean = Δsum ÷ Δcount). Writes
``OUT/start-N.json``; ``python3 validation/waves_gpu.py --table OUT`` prints the table of all starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_gpu import bench, serve, stop  # noqa: E402

INPUT, OUTPUT = 1024, 256
HISTOGRAMS = ("vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds")


def scrape(url: str, histograms: tuple[str, ...] = HISTOGRAMS) -> dict[str, float]:
    """Sum and count of the histograms (summed over label sets)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.removesuffix("_sum").removesuffix("_count") in histograms and s.name.endswith(("_sum", "_count")):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def server_means(before: dict[str, float], after: dict[str, float], histograms: tuple[str, ...] = HISTOGRAMS) -> dict[str, float | None]:
    """Each histogram's mean over an interval, ms, from its deltas (queue time and TTFT per request by default)."""
    res = {}
    for h in histograms:
        n = after.get(h + "_count", 0) - before.get(h + "_count", 0)
        res[h.split(":")[1].removesuffix("_seconds") + "_mean_ms"] = 1e3 * (after.get(h + "_sum", 0) - before.get(h + "_sum", 0)) / n if n else None
    return res


def servelab_levels(url: str, out: Path, levels: str, *extra: str) -> list[dict]:
    before = scrape(url)
    run, records = bench(url, out, levels, "--input-tokens", str(INPUT), "--output-tokens", str(OUTPUT), *extra)
    server = server_means(before, scrape(url))  # over the whole command (all its levels): reported per command
    rows = []
    for lv in run.levels:
        w = lv.waves
        ttfts = sorted(round((r.first_token - r.start) * 1e3, 1) for r in records if r.phase == "measured" and r.concurrency == lv.concurrency and r.status == "ok" and r.first_token)
        spread = f" ±{run.load.output_spread:.0%}" if run.load.output_spread else ""
        rows.append({"tool": "servelab " + run.load.closed_loop + spread, "ttft_ms_sorted": ttfts, "concurrency": lv.concurrency, "ok": lv.ok, "failed": lv.failed_requests,
                     "output_tok_s": lv.output_throughput_tok_s, "ttft_p50_ms": lv.ttft_ms.p50, "ttft_mean_ms": lv.ttft_ms.mean,
                     "send_spread": w and w.send_spread, "densest_share": w and w.densest_share,
                     "ttft_p50_ms_by_wave": w and w.ttft_p50_ms_by_wave, "ramp_requests": lv.ramp_requests,
                     "findings": [f.kind for f in run.findings if f.evidence.get("concurrency") == lv.concurrency],
                     "server_histograms_whole_command": server})  # fmt: skip
    return rows


def vllm_bench(url: str, model: str, out: Path) -> dict:
    before = scrape(url)
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "openai-chat", "--base-url", url,
           "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", f"/tmp/models/{model}", "--dataset-name", "random",
           "--random-input-len", str(INPUT), "--random-output-len", str(OUTPUT), "--num-prompts", "1024", "--max-concurrency", "256",
           "--ignore-eos", "--save-result", "--result-dir", str(out), "--result-filename", "vllm-bench.json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    (out / "vllm-bench.stdout.txt").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-3000:], proc.stderr[-1500:], flush=True)
    res = json.loads((out / "vllm-bench.json").read_text())
    return {"tool": "vllm bench serve", "concurrency": 256, "ok": res.get("completed"), "failed": res.get("failed", 0),
            "output_tok_s": res.get("output_throughput"), "ttft_p50_ms": res.get("median_ttft_ms"), "ttft_mean_ms": res.get("mean_ttft_ms"),
            "server_histograms_whole_command": server_means(before, scrape(url))}  # fmt: skip


MODES = {  # mode → (levels, extra servelab bench arguments)
    "stagger": ("64,256", ()),
    "burst": ("256", ("--closed-loop", "burst")),
    "stagger64": ("64", ("--requests", "512")),
    "stagger256": ("256", ()),
    "spread64": ("64", ("--requests", "512", "--output-spread", "0.1")),
    "spread256": ("256", ("--output-spread", "0.1")),
}


def one_start(kit: Path, out: Path, start: int, modes: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pgid, url = serve(kit, "qwen3-8b", out / f"vllm-{start}.log")
    rows = []
    try:
        for mode in modes:
            if mode == "vllm":
                rows.append(vllm_bench(url, "qwen3-8b", out))
            else:
                levels, extra = MODES[mode]
                rows += servelab_levels(url, out / f"{mode}-{start}", levels, *extra)
    finally:
        stop(pgid)
    (out / f"start-{start}.json").write_text(json.dumps(rows, indent=1))
    table(out)


def table(out: Path) -> None:
    """One row per (start, tool, level) over every start-N.json in ``out``, as Markdown."""
    print("| start | tool | streams | ok / failed | output tok/s | TTFT p50 ms | TTFT by wave (p50, ms) | send spread | server queue ms (mean) | server TTFT ms (mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(out.glob("start-*.json")):
        for r in json.loads(path.read_text()):
            srv = r["server_histograms_whole_command"]
            waves = " / ".join(f"{v:,.0f}" for v in r.get("ttft_p50_ms_by_wave") or [] if v is not None) or "–"
            print(f"| {path.stem.split('-')[1]} | {r['tool']} | {r['concurrency']} | {r['ok']} / {r['failed']} | {r['output_tok_s']:,.0f} | "
                  f"{r['ttft_p50_ms']:,.0f} | {waves} | {r.get('send_spread') if r.get('send_spread') is not None else '–'} | "
                  f"{srv['request_queue_time_mean_ms'] or 0:,.0f} | {srv['time_to_first_token_mean_ms'] or 0:,.0f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--start", type=int)
    ap.add_argument("--modes", default="stagger,burst,vllm", help=f"what to run on each start, in order: {', '.join(MODES)}, vllm")
    ap.add_argument("--table", type=Path, help="print the table of a finished OUT and exit")
    args = ap.parse_args()
    if args.table:
        return table(args.table)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    one_start(args.kit, args.out, args.start, args.modes.split(","))


if __name__ == "__main__":
    main()
