#!/usr/bin/env python3
"""Why vllm bench serve's one-stream TTFT on FP8 servers sat 18–55 ms above servelab's on the same
server (validation/RESULTS-predict.md): the two clients, one after the other on one server, at the
prompt lengths each sent (vllm bench serve's 512 random tokens are 522 with the chat template, above
vLLM's largest CUDA-graph capture size, 512; servelab's 512 include the template) and swapped, each
probe with the prefix cache reset first, and vLLM's own TTFT histogram
(``vllm:time_to_first_token_seconds``, arrival at the API server to the first token) read around each
probe, so that the client's figure can be told from the server's.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm):

    python3 validation/ttft_probe_gpu.py --kit .gpu-vllm --out OUT --model qwen3-30b-a3b

Prints one row per probe (client TTFT mean, server TTFT mean, requests) and writes ``OUT/MODEL-ttft-probe.json``.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_gpu import INPUT, OUTPUT, model_args, reset, serve_model, vllm_bench  # noqa: E402
from vllm_gpu import bench, stop  # noqa: E402


def server_ttft(url: str) -> tuple[float, float]:
    """(sum s, count) of vLLM's TTFT histogram so far."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {"sum": 0.0, "count": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("vllm:time_to_first_token_seconds_"):
                key = s.name.rsplit("_", 1)[-1]
                if key in out:
                    out[key] += s.value
    return out["sum"], out["count"]


def main() -> None:
    args = model_args(__doc__.split("\n\n")[0])
    pgid, url = serve_model(args.kit, args.model, args.out / f"{args.model}-probe-boot.log")
    rows = []
    try:
        for c in (1, 4, 16, 64):  # the warm-up of cold_gpu.py
            vllm_bench(url, args.model, args.out, c, c, 16, 10_000 + c)

        def probe(name: str, run) -> None:
            reset(url)
            s0, n0 = server_ttft(url)
            client = run()
            s1, n1 = server_ttft(url)
            rows.append({"probe": name, "client_ttft_ms": client, "server_ttft_ms": 1e3 * (s1 - s0) / max(n1 - n0, 1), "requests": n1 - n0})
            print(rows[-1], flush=True)

        for prompt in (INPUT, INPUT - 10):  # vllm bench serve's prompt is the random text's tokens plus the chat template's (10)
            probe(f"vllm bench serve c=1, --random-input-len {prompt}", lambda p=prompt: vllm_bench(url, args.model, args.out, 1, 4, OUTPUT, 1, p)["mean_ttft_ms"])
        for prompt in (INPUT, INPUT + 10):  # servelab's prompt is the template's tokens and the text's together
            probe(f"servelab bench c=1, --input-tokens {prompt}", lambda p=prompt: bench(url, args.out / f"probe-{p}", "1", "--input-tokens", str(p), "--output-tokens",
                                                                                       str(OUTPUT), "--requests", "4")[0].levels[0].ttft_ms.mean)  # fmt: skip
    finally:
        stop(pgid)
    (args.out / f"{args.model}-ttft-probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
