"""The DGX Spark field report's Qwen3.5-122B-A10B NVFP4 case (issue 34): servelab plan and predict
beside what the report printed and measured. CPU only; prints the tables of validation/RESULTS-spark.md.

    python validation/spark_report.py
"""

from __future__ import annotations

import json
import subprocess
import sys

PLAN = ["--model", "qwen3.5-122b-a10b", "--hardware", "dgx-spark", "--quant", "nvfp4", "--kv-dtype", "fp8", "--max-model-len", "131072",
        "--gpu-memory-utilization", "0.9", "--speculative", "mtp:2", "--prefix-caching"]  # fmt: skip
REPORTED = {"weights_gib": 76.02, "kv_budget_gib": 30.33, "kv_capacity_tokens": 595_584, "max_concurrency": 12.89}
# workload: prompt tokens, output tokens, acceptance rate (the report's range, mid), tok/s low–high, TTFT s.
# The report gives the prompts of Q&A (20) and Long-RAG (~7,500) only: the others use servelab's suite shapes
# (code 256, json_kie 512, multilingual 1,024; validation/spark/report-workloads.yaml), so their TTFT is not compared.
TABLE = {"Q&A": (20, 256, 0.705, 24.7, 25.6, "0.27"), "Code": (256, 300, 0.965, 29.7, 30.1, None), "JSON-KIE": (512, 256, 1.0, 30.7, 31.0, None),
         "Hungarian": (1024, 256, 0.65, 23.7, 24.6, None), "Long-RAG-8K": (7500, 256, 0.745, 25.7, 26.9, "2.55–4.41")}  # fmt: skip


def servelab(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "servelab", *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    print("| figure | vLLM 0.19 printed | plan --vllm-version 0.19 | error | plan (0.25 rules) |")
    print("|---|---|---|---|---|")
    old, new = servelab("plan", *PLAN, "--vllm-version", "0.19"), servelab("plan", *PLAN)
    for key, reported in REPORTED.items():
        err = 100 * (old[key] - reported) / reported
        shown = (lambda v: f"{v:,}") if isinstance(reported, int) else (lambda v: f"{v:,.2f}")
        print(f"| {key} | {shown(reported)} | {shown(old[key])} | {err:+.1f} % | {shown(new[key])} |")
    print()
    print("| workload | acceptance | measured tok/s | predicted decode tok/s | error | predicted output tok/s (O ÷ E2E) | measured TTFT s | predicted TTFT s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (prompt, out, rate, low, high, ttft) in TABLE.items():
        p = servelab("predict", "--model", "qwen3.5-122b-a10b", "--hardware", "dgx-spark", "--quant", "nvfp4", "--speculative", "mtp:2",
                     "--acceptance", str(rate), "--input-tokens", str(prompt), "--output-tokens", str(out), "--concurrency", "1")["variants"][0]["points"][0]  # fmt: skip
        decode, mid = 1 / p["tpot_s"], (low + high) / 2
        print(f"| {name} | {rate:.3g} | {low}–{high} | {decode:.1f} | {100 * (decode - mid) / mid:+.1f} % | {p['per_stream_tok_s']:.1f} | {ttft or 'prompt not given'} | {p['ttft_s']:.2f} |")


if __name__ == "__main__":
    main()
