#!/usr/bin/env python3
"""What the API server adds (issue 38): the same load through the chat and the completions endpoint of
one vLLM server, with the server's own TTFT and inter-token histograms beside servelab's.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm; one server start):

    python3 validation/api_gpu.py --kit .gpu-vllm --out OUT

Qwen3-8B bf16 (dummy weights), vLLM's default flags at max_model_len 2,048, 512 prompt / 128 output
tokens, every prompt unique; per endpoint and level (1, 64, 256 streams) one ``servelab bench``
(stagger, 20 s), the prefix cache reset before it, vLLM's ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds`` and ``vllm:e2e_request_latency_seconds`` scraped around it (mean =
Δsum ÷ Δcount: the whole command, ramp included). Writes ``OUT/api.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_gpu import reset  # noqa: E402
from vllm_gpu import bench, serve, stop  # noqa: E402
from waves_gpu import scrape, server_means  # noqa: E402

HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "api-boot.log"
    pgid, url = serve(args.kit, "qwen3-8b", log, "--max-model-len", "2048", env={"VLLM_SERVER_DEV_MODE": "1"})
    rows = []
    try:
        for endpoint in ("chat", "completions"):
            for c in (1, 64, 256):
                reset(url)
                before = scrape(url, HISTOGRAMS)
                run, _ = bench(url, args.out / f"{endpoint}-{c}", str(c), "--endpoint", endpoint, "--input-tokens", "512", "--output-tokens", "128", "--duration", "20s")
                server = server_means(before, scrape(url, HISTOGRAMS), HISTOGRAMS)
                lv = run.levels[0]
                rows.append({"endpoint": endpoint, "concurrency": c, "tok_s": lv.output_throughput_tok_s, "ttft_p50_ms": lv.ttft_ms.p50, "ttft_mean_ms": lv.ttft_ms.mean,
                             "tpot_p50_ms": lv.tpot_ms.p50, "itl_mean_ms": lv.itl_ms.mean, "e2e_mean_ms": lv.e2e_ms.mean, "server": server})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        stop(pgid)
    (args.out / "api.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
