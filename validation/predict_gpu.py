#!/usr/bin/env python3
"""Real vLLM runs for ``servelab predict``'s validation (issue 17): a MoE concurrency curve, the same
MoE with a slot cap and a capture list with and without 5 and 10, and n-gram speculative decoding on
the dense model. The runs land in validation/predict-h100/ and feed validation/predict_loo.py.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm; one or two server
starts per call, so that each call stays under the device tool's 10 minutes):

    python3 validation/predict_gpu.py --kit .gpu-vllm --out OUT --part moe          # then moe-caps, ngram

- ``moe``: Qwen3-30B-A3B fp8, uniform-random expert routing (``VLLM_MOE_ROUTING_SIMULATION_STRATEGY``,
  the kit README says why), vLLM's default flags at max_model_len 4,096; c = 1 … 256 (powers of two),
  512 prompt / 128 output tokens, 12 s of steady state per level;
- ``moe-caps``: the same with ``--max-num-seqs 64`` and capture sizes [1, 2, 4, 5, 8, 10, 16, 32, 64]:
  c = 5 and 10 unpadded (padded to 8 and 16 under the defaults of ``moe``), c = 128 queued by the
  slot cap;
- ``ngram``: Qwen3-8B bf16 with n-gram speculation (3 draft tokens), c = 1, 8, 64, 256, 1,024 / 128
  tokens (dummy weights repeat themselves, so acceptance is high: it checks the verify cost, not rates);
- ``dense``: the same without speculation (the baseline speculation is compared with);
- ``dense-eager``: c = 64 and 256 of ``dense`` with ``--enforce-eager`` (a start in seconds): output
  throughput in the 12 s window against Little's law, c · O ÷ mean E2E, with the records kept;
- ``moe-long``: ``moe`` with 25 s windows (over 3 request durations at every level, where ``moe``'s
  12 s were too short above 32 streams: servelab's ``short_window`` finding);
- ``hybrid``: Nemotron-3-Nano-30B-A3B fp8 (Mamba-2 + attention + MoE layers; uniform-random routing),
  as ``moe-long``; the kit's tokenizer is resized to the model's 131,072 ids (the kit README says why);
- ``moe-1024``, ``hybrid-1024``: ``moe`` and ``hybrid`` at 1,024 prompt / 256 output tokens, c = 1, 8, 32,
  30 s per level (a second workload for leave-one-run-out, and a prompt above the 512-token capture size).

Each part writes ``OUT/PART-run.json`` (the run), ``OUT/PART.log`` (the boot log, for the limits) and
prints the table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_gpu import bench, serve, stop  # noqa: E402

MOE_ENV = {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random"}
MOE = ("qwen3-30b-a3b", ("--quantization", "fp8", "--max-model-len", "4096"), MOE_ENV)
PARTS = {  # part → (config, vLLM flags, environment, levels, servelab bench arguments)
    "moe": (*MOE, "1,2,4,8,16,32,64,128,256", ("--input-tokens", "512", "--output-tokens", "128", "--duration", "12s")),
    "moe-caps": (MOE[0], (*MOE[1], "--max-num-seqs", "64", "--compilation-config",
                          json.dumps({"cudagraph_capture_sizes": [1, 2, 4, 5, 8, 10, 16, 32, 64]})), MOE_ENV,
                 "5,10,64,128", ("--input-tokens", "512", "--output-tokens", "128", "--duration", "12s")),
    "ngram": ("qwen3-8b", ("--max-model-len", "4096", "--speculative-config",
                           json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2})),
              {}, "1,8,64,256", ("--input-tokens", "1024", "--output-tokens", "128", "--duration", "12s")),
    "dense": ("qwen3-8b", ("--max-model-len", "4096"), {}, "1,8,64,256",
              ("--input-tokens", "1024", "--output-tokens", "128", "--duration", "12s")),
    "dense-eager": ("qwen3-8b", ("--max-model-len", "4096", "--enforce-eager"), {}, "64,256",
                    ("--input-tokens", "1024", "--output-tokens", "128", "--duration", "12s")),
    "moe-long": (*MOE, "1,2,4,8,16,32,64,128,256", ("--input-tokens", "512", "--output-tokens", "128", "--duration", "25s")),
    "hybrid": ("nemotron-3-nano-30b-a3b", MOE[1], MOE_ENV, "1,2,4,8,16,32,64,128,256",
               ("--input-tokens", "512", "--output-tokens", "128", "--duration", "25s")),
    "moe-1024": (*MOE, "1,8,32", ("--input-tokens", "1024", "--output-tokens", "256", "--duration", "30s")),
    "hybrid-1024": ("nemotron-3-nano-30b-a3b", MOE[1], MOE_ENV, "1,8,32", ("--input-tokens", "1024", "--output-tokens", "256", "--duration", "30s")),
}  # fmt: skip
VOCAB = {"nemotron-3-nano-30b-a3b": 131072}  # config → vocab_size, where it is not the kit tokenizer's 151,936


def run_part(kit: Path, out: Path, part: str) -> None:
    """One server start, one ``servelab bench`` over the part's levels; keeps run.json and the boot log."""
    config, flags, env, levels, extra = PARTS[part]
    log = out / f"{part}.log"
    if config in VOCAB:  # a copy of the kit whose tokenizer has the model's vocabulary
        tmp = Path(tempfile.mkdtemp())
        shutil.copytree(kit, tmp / "kit")
        subprocess.run([sys.executable, str(kit / "resize_tokenizer.py"), str(VOCAB[config]), str(tmp / "tokenizer")], check=True)
        shutil.copytree(tmp / "tokenizer", tmp / "kit" / "tokenizer", dirs_exist_ok=True)
        kit = tmp / "kit"
    pgid, url = serve(kit, config, log, *flags, env=env)
    try:
        run, _ = bench(url, out / part, levels, *extra, "--server-log", str(log))
    finally:
        stop(pgid)
    shutil.copy(out / part / "run.json", out / f"{part}-run.json")
    shutil.copy(out / part / "records.jsonl", out / f"{part}-records.jsonl")
    for lv in run.levels:
        acc = lv.server.acceptance_rate if lv.server else None
        little = lv.concurrency * run.load.output_tokens / (lv.e2e_ms.mean / 1e3) if lv.e2e_ms.mean else 0
        print(f"{part} c={lv.concurrency}: {lv.ok} ok / {lv.failed_requests} failed, {lv.output_throughput_tok_s or 0:,.0f} tok/s "
              f"(c · O ÷ mean E2E {little:,.0f}), TPOT p50 {lv.tpot_ms.p50} ms, "
              f"TTFT p50 {lv.ttft_ms.p50} ms" + (f", acceptance {acc:.2f}" if acc is not None else ""), flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True, help="the gpu-vllm kit folder (serve.sh, configs/, tokenizer/)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--part", choices=list(PARTS), action="append", required=True, help="repeat for several, one server start each")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for part in args.part:
        run_part(args.kit, args.out, part)


if __name__ == "__main__":
    main()
