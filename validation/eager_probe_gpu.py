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

Whether the eager extra is the host's launch time hidden by a longer step's GPU work, and whether
vLLM's routing simulator (``VLLM_MOE_ROUTING_SIMULATION_STRATEGY``, which every MoE run here uses)
causes it: ``--capture-to 4096`` adds CUDA-graph capture sizes 1,024, 2,048 and 4,096 to vLLM's
default list, so that each size S can be probed inside a graph (S tokens) and without (S + 10);
``--prompts`` picks the lengths; ``--routing model`` serves the MoE without the simulator (the dummy
weights' own routing); ``--tuned-config SRC:NAME`` serves it with the fused-MoE config file SRC under the
name vLLM looks for (NAME, from a boot log's "Config file not found at …"), through
``VLLM_TUNED_CONFIG_FOLDER``: whether the default config is what slows a MoE's prefill:

    python3 validation/eager_probe_gpu.py --kit .gpu-vllm --out OUT --model qwen3-30b-a3b --capture-to 4096 \
        --prompts 512,522,1024,1034,2048,2058,4096,4106
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_gpu import model_args, reset, serve_model  # noqa: E402
from ttft_probe_gpu import server_ttft  # noqa: E402
from vllm_gpu import bench, stop  # noqa: E402

from servelab.engines.vllm import default_capture_sizes  # noqa: E402

PROMPTS = (512, 522)  # at and just above the largest capture size
REQUESTS, OUTPUT = 6, 16


def main() -> None:
    args = model_args(__doc__.split("\n\n")[0], ("--prompts", {"default": ",".join(map(str, PROMPTS))}),
                      ("--capture-to", {"type": int, "default": 0, "help": "add capture sizes 1,024, 2,048, … up to this"}),
                      ("--routing", {"choices": ["uniform", "model"], "default": "uniform"}), ("--tuned-config", {"default": ""}), many=True)  # fmt: skip
    prompts = tuple(int(p) for p in args.prompts.split(","))
    tag = f"{'-capture' + str(args.capture_to) if args.capture_to else ''}{'-model-routing' if args.routing == 'model' else ''}{'-tuned' if args.tuned_config else ''}"
    tuned = {}
    if args.tuned_config:
        src, name = args.tuned_config.split(":", 1)
        folder = Path(tempfile.mkdtemp())
        shutil.copy(src, folder / name)
        tuned = {"VLLM_TUNED_CONFIG_FOLDER": str(folder)}
    sizes = default_capture_sizes(256, 8192) + [s for s in (1024, 2048, 4096, 8192) if s <= args.capture_to]
    extra = ("--compilation-config", json.dumps({"cudagraph_capture_sizes": sizes}), "--max-model-len", str(max(prompts) + 1024)) if args.capture_to else ()
    rows = []
    for model in args.model:
        pgid, url = serve_model(args.kit, model, args.out / f"{model}{tag}-eager-boot.log", *extra, env=tuned, simulate_routing=args.routing == "uniform")
        try:
            for prompt in (*prompts, *prompts):  # the first pass warms up (Triton compiles each shape once)
                reset(url)
                s0, n0 = server_ttft(url)
                run = bench(url, args.out / f"{model}-{prompt}-{len(rows)}", "1", "--input-tokens", str(prompt), "--output-tokens", str(OUTPUT),
                            "--requests", str(REQUESTS))[0]  # fmt: skip
                s1, n1 = server_ttft(url)
                rows.append({"model": model, "routing": args.routing, "capture_to": args.capture_to, "tuned_config": args.tuned_config, "prompt_tokens": prompt, "client_ttft_ms": run.levels[0].ttft_ms.mean,
                             "server_ttft_ms": 1e3 * (s1 - s0) / max(n1 - n0, 1), "tpot_ms": run.levels[0].tpot_ms.p50,
                             "prefix_cache_hit_rate": run.levels[0].server.prefix_cache_hit_rate if run.levels[0].server else None})  # fmt: skip
                print(rows[-1], flush=True)
        finally:
            stop(pgid)
        (args.out / f"eager-probe{tag}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
