#!/usr/bin/env python3
"""``servelab capacity`` against a real vLLM (issue 32): the measured capacity beside servelab
predict's, on the kit's Qwen3-8B (bf16, dummy weights, max_model_len 4,096).

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm):

    python3 validation/capacity_gpu.py --kit .gpu-vllm --out OUT [--slo tpot_p99=20ms,ttft_p99=500ms]

It starts vLLM with the kit's serve.sh, runs ``servelab capacity --hardware PROFILE --model-config
qwen3-8b --json`` (1,024 prompt / 128 output tokens, bench's default requests per probe, cold
prompts), and writes ``OUT/capacity.json`` (the answer, every probe, the prediction), the console
output and the boot log. Each probe's run directory stays under ``OUT/probes``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_gpu import ROOT, gpu, profile_for, serve, stop  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--slo", default="tpot_p99=20ms,ttft_p99=500ms")
    args = ap.parse_args()
    found = gpu()
    if found is None:
        print("skipped: no GPU")
        return
    name, _ = found
    args.out.mkdir(parents=True, exist_ok=True)
    pgid, url = serve(args.kit, "qwen3-8b", args.out / "vllm.log", "--max-model-len", "4096")
    try:
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "servelab", "capacity", "--url", url, "--slo", args.slo, "--input-tokens", "1024", "--output-tokens", "128",
               "--hardware", profile_for(name), "--model-config", "qwen3-8b", "--output", str(args.out / "probes"), "--json"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
                                                                       "SERVELAB_DB": str(args.out / "runs.db")})  # fmt: skip
        took = time.monotonic() - t0
        (args.out / "capacity.stdout.txt").write_text(proc.stdout + proc.stderr)
        print(proc.stdout[-8000:], proc.stderr[-3000:], flush=True)
        doc = json.loads(proc.stdout[proc.stdout.index("{\n"):])
        doc |= {"gpu": name, "seconds": round(took), "command": " ".join(cmd[2:])}
        (args.out / "capacity.json").write_text(json.dumps(doc, indent=1))
        print(f"capacity {doc.get('max_concurrency')} streams, predicted {doc.get('predicted')}, {len(doc['probes'])} probes, {took:.0f} s", flush=True)
    finally:
        stop(pgid)


if __name__ == "__main__":
    main()
