#!/usr/bin/env python3
"""The traffic of issue 31 and the capacity search of issue 32 on a real vLLM (the kit's Qwen3-8B,
bf16, dummy weights, max_model_len 4,096), cold: every prompt opened by a nonce, the prefix cache
reset before each run (``VLLM_SERVER_DEV_MODE=1``, ``POST /reset_prefix_cache``) and its hits read
from /metrics before and after.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm):

    python3 validation/traffic_gpu.py --kit .gpu-vllm --out OUT --part traffic   # chat vs completions, sessions, agentic, capacity
    python3 validation/traffic_gpu.py --kit .gpu-vllm --out OUT --part sweep     # vllm bench sweep serve_workload, same load and SLOs

``traffic``: ``servelab bench`` with ``--endpoint chat`` and ``--endpoint completions`` at 64 and 256
streams (512 prompt / 128 output tokens), ``--sessions 32 --turns 4``, the ``agentic`` mix on 16
streams, then ``servelab capacity --slo tpot_p99=20ms,ttft_p99=500ms`` (1,024 / 128 tokens,
``--hardware`` and ``--model-config qwen3-8b``: predict's start), timed. ``sweep``: vLLM 0.25's
``vllm bench sweep serve_workload`` (0.25 has no ``serve_sla``; serve_workload is its successor)
over max_concurrency with the same lengths, timed; its levels are read against the same SLOs.
Writes ``OUT/<part>.json`` and each command's console output.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_gpu import ROOT, free_port, gpu, profile_for, serve, stop  # noqa: E402

SLO = "tpot_p99=20ms,ttft_p99=500ms"
ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def hits(url: str) -> float:
    """vLLM's prefix-cache hits so far (tokens)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")))


def servelab(out: Path, name: str, *args: str) -> tuple[float, str]:
    """Run the servelab CLI; (seconds, console output), saved as OUT/name.txt."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}", "SERVELAB_DB": str(out / "runs.db")})  # fmt: skip
    took = time.monotonic() - t0
    (out / f"{name}.txt").write_text(proc.stdout + proc.stderr)
    print(f"== {name} ({took:.0f} s, exit {proc.returncode})\n{proc.stdout[-5000:]}{proc.stderr[-1500:]}", flush=True)
    return took, proc.stdout


def traffic(kit: Path, out: Path, hw: str) -> dict:
    pgid, url = serve(kit, "qwen3-8b", out / "vllm.log", "--max-model-len", "4096", "--enable-prompt-tokens-details", env=ENV)
    doc: dict = {"runs": {}}
    try:
        runs = {
            "chat": ["--endpoint", "chat", "--concurrency", "64,256", "--input-tokens", "512", "--output-tokens", "128"],
            "completions": ["--endpoint", "completions", "--concurrency", "64,256", "--input-tokens", "512", "--output-tokens", "128"],
            "sessions": ["--sessions", "32", "--turns", "4", "--input-tokens", "512", "--turn-input-tokens", "256", "--output-tokens", "128"],
            "agentic": ["--mix", "agentic", "--workers", "16", "--requests", "32"],
        }
        for name, args in runs.items():
            urllib.request.urlopen(urllib.request.Request(url + "/reset_prefix_cache", method="POST"), timeout=30).read()
            before = hits(url)
            took, _ = servelab(out, name, "bench", "--url", url, *args, "--output", str(out / name), "--server-log", str(out / "vllm.log"))
            run = json.loads((out / name / "run.json").read_text())
            doc["runs"][name] = {"seconds": round(took), "prefix_cache_hits": hits(url) - before, "prompt_check": run["prompt_check"],
                                 "levels": [{k: lv.get(k) for k in ("concurrency", "output_throughput_tok_s", "ttft_ms", "tpot_ms", "sessions")} for lv in run["levels"]]}  # fmt: skip
        urllib.request.urlopen(urllib.request.Request(url + "/reset_prefix_cache", method="POST"), timeout=30).read()
        took, stdout = servelab(out, "capacity", "capacity", "--url", url, "--slo", SLO, "--input-tokens", "1024", "--output-tokens", "128",
                                "--hardware", hw, "--model-config", "qwen3-8b", "--output", str(out / "probes"), "--json")  # fmt: skip
        doc["capacity"] = json.loads(stdout[stdout.index("{\n"):]) | {"seconds": round(took)}
    finally:
        stop(pgid)
    return doc


def sweep(kit: Path, out: Path) -> dict:
    """vllm bench sweep serve_workload: it starts vLLM itself (the kit's flags), runs serial (c = 1),
    batch (c = num_prompts) and the levels between, resetting the prefix cache after each."""
    port = free_port()
    model = "/tmp/models/qwen3-8b"  # laid out by the kit's serve.sh in the traffic part
    serve_cmd = (f"{sys.executable} -m vllm.entrypoints.cli.main serve {model} --served-model-name qwen3-8b --load-format dummy "
                 f"--host 127.0.0.1 --port {port} --attention-backend FLASH_ATTN --max-model-len 4096")  # fmt: skip
    bench_cmd = (f"{sys.executable} -m vllm.entrypoints.cli.main bench serve --backend openai-chat --endpoint /v1/chat/completions "
                 f"--model {model} --served-model-name qwen3-8b --host 127.0.0.1 --port {port} --dataset-name random --random-input-len 1024 "
                 "--random-output-len 128 --num-prompts 64 --ignore-eos --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,99")  # fmt: skip
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "sweep", "serve_workload", "--serve-cmd", serve_cmd, "--bench-cmd", bench_cmd,
           "--after-bench-cmd", f"curl -s -X POST http://127.0.0.1:{port}/reset_prefix_cache",  # it resets only a server started as `vllm`
           "--workload-var", "max_concurrency", "--workload-iters", "4", "-o", str(out / "sweep")]  # fmt: skip
    env = {**os.environ, **ENV, "VLLM_USE_FLASHINFER_SAMPLER": "0", "PYTHONPATH": os.environ.get("PYTHONPATH", "/tmp/site"), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    (out / "sweep.txt").write_text(" ".join(shlex.quote(c) for c in cmd) + "\n\n" + proc.stdout + proc.stderr)
    print(proc.stdout[-6000:], proc.stderr[-3000:], flush=True)
    rows = []
    for summary in sorted((out / "sweep").rglob("summary.csv")):
        with summary.open() as f:
            rows += list(csv.DictReader(f))
    levels = []
    for r in rows:
        c = r.get("max_concurrency")
        tpot, ttft = float(r.get("p99_tpot_ms") or "nan"), float(r.get("p99_ttft_ms") or "nan")
        levels.append({"max_concurrency": c, "p99_tpot_ms": tpot, "p99_ttft_ms": ttft, "output_throughput": r.get("output_throughput"),
                       "meets_slo": tpot <= 20 and ttft <= 500, "duration_s": r.get("duration")})  # fmt: skip
    return {"seconds": round(took), "exit": proc.returncode, "levels": levels, "command": " ".join(cmd[2:6]) + " …"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--part", choices=["traffic", "sweep"], required=True)
    args = ap.parse_args()
    found = gpu()
    if found is None:
        print("skipped: no GPU")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    doc = traffic(args.kit, args.out, profile_for(found[0])) if args.part == "traffic" else sweep(args.kit, args.out)
    doc["gpu"] = found[0]
    (args.out / f"{args.part}.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1)[-4000:], flush=True)


if __name__ == "__main__":
    main()
