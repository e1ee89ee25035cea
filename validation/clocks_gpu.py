#!/usr/bin/env python3
"""The GPU's SM clock and power while a burst runs: are the 256-stream bursts, whose 8,192-token
prefill steps predict puts 10–16 % too fast (validation/RESULTS-predict.md), slowed by the power cap?

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm):

    python3 validation/clocks_gpu.py --kit .gpu-vllm --out OUT --model qwen3-8b

Warms up as validation/cold_gpu.py does, then per level (4, 64, 256 streams, cold, ``vllm bench
serve --num-prompts 2C``) samples ``nvidia-smi`` every 100 ms; prints and writes
``OUT/MODEL-clocks.json``: tok/s, the SM clock's median and 10th percentile (MHz) and the power's
median (W) over the samples at ``BUSY_W`` or more, and every sample.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_gpu import OUTPUT, model_args, reset, serve_model, vllm_bench  # noqa: E402
from vllm_gpu import stop  # noqa: E402

BUSY_W = 250  # samples at this power or more are the GPU at work (an idle H200 draws ~120 W)


def main() -> None:
    args = model_args(__doc__.split("\n\n")[0])
    pgid, url = serve_model(args.kit, args.model, args.out / f"{args.model}-clocks-boot.log")
    rows = []
    try:
        for c in (4, 64, 256):
            vllm_bench(url, args.model, args.out, c, c, 16, 10_000 + c)
        for c in (4, 64, 256):
            reset(url)
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "100"],
                                   stdout=subprocess.PIPE, text=True)  # fmt: skip
            res = vllm_bench(url, args.model, args.out, c, 2 * c, OUTPUT, c)
            smi.terminate()
            samples = [tuple(float(x) for x in line.split(",")) for line in smi.communicate()[0].splitlines() if line.count(",") == 1]
            busy = [s for s in samples if s[1] >= BUSY_W] or samples  # the requests' window, not the client's start-up
            clocks, watts = sorted(s[0] for s in busy), [s[1] for s in busy]
            rows.append({"concurrency": c, "tok_s": res["output_throughput"], "ttft_mean_ms": res["mean_ttft_ms"], "sm_mhz_median": statistics.median(clocks),
                         "sm_mhz_p10": clocks[len(clocks) // 10], "power_w_median": statistics.median(watts), "busy_samples": len(busy),
                         "samples": samples})  # fmt: skip
            print({k: v for k, v in rows[-1].items() if k != "samples"}, flush=True)
    finally:
        stop(pgid)
    (args.out / f"{args.model}-clocks.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
