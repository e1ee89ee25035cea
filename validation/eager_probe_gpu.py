#!/usr/bin/env python3
"""What a step without CUDA graphs costs, model by model on one machine (validation/RESULTS-predict.md,
"The MoE layer times"): at one stream, a prompt of 512 tokens (vLLM's largest CUDA-graph capture
size: it prefills inside a graph) against one of 522 (above it: without graphs), servelab bench
each, the prefix cache reset first; vLLM's own TTFT histogram read around each probe. The difference
is the eager step's extra for that model; one machine for all, so that the host (which launches an
eager step's kernels) is the same.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm; one server at a time):

    python3 validation/eager_probe_gpu.py --kit .gpu-vllm --out OUT --model mixtral-8x7b qwen3-30b-a3b

Prints one row per model and prompt length and writes ``OUT/eager-probe.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_gpu import model_args, reset, serve_model  # noqa: E402
from ttft_probe_gpu import server_ttft  # noqa: E402
from vllm_gpu import bench, stop  # noqa: E402

PROMPTS = (512, 522)  # at and just above the largest capture size
REQUESTS, OUTPUT = 6, 16


def main() -> None:
    args = model_args(__doc__.split("\n\n")[0], many=True)
    rows = []
    for model in args.model:
        pgid, url = serve_model(args.kit, model, args.out / f"{model}-eager-boot.log")
        try:
            for prompt in (*PROMPTS, *PROMPTS):  # the first pair warms up (Triton compiles each shape once)
                reset(url)
                s0, n0 = server_ttft(url)
                run = bench(url, args.out / f"{model}-{prompt}-{len(rows)}", "1", "--input-tokens", str(prompt), "--output-tokens", str(OUTPUT),
                            "--requests", str(REQUESTS))[0]  # fmt: skip
                s1, n1 = server_ttft(url)
                rows.append({"model": model, "prompt_tokens": prompt, "client_ttft_ms": run.levels[0].ttft_ms.mean,
                             "server_ttft_ms": 1e3 * (s1 - s0) / max(n1 - n0, 1), "tpot_ms": run.levels[0].tpot_ms.p50})  # fmt: skip
                print(rows[-1], flush=True)
        finally:
            stop(pgid)
        (args.out / "eager-probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
