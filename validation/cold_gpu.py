#!/usr/bin/env python3
"""Cold held-out runs for ``servelab predict`` (issue 38): two model sizes no calibration has seen,
both closed-loop modes, 1–256 streams, measured cold.

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm; one server start per
call, so that each call stays under the device tool's 10 minutes):

    python3 validation/cold_gpu.py --kit .gpu-vllm --out OUT --model qwen3-14b     # then mixtral-8x7b

- ``qwen3-14b``: Qwen3-14B bf16 (dense; validation/configs/qwen3-14b), vLLM's default flags at
  max_model_len 2,048; ``qwen3-32b`` the same for Qwen3-32B (on an H200);
- ``mixtral-8x7b``: Mixtral-8x7B with ``--quantization fp8`` (8 experts, top 2; uniform-random routing,
  the kit README says why; the kit's tokenizer resized to its 32,000 ids);
- ``qwen3-8b``, ``qwen3-30b-a3b`` (fp8, uniform routing): the kit's configs, the models of the shipped
  calibrations, for a GPU they were not fitted on (leave-one-GPU-out);
- ``gemma-3-27b`` (bf16, 62 layers) and ``llama-3.1-70b`` (``--quantization fp8``, 80 layers, H200):
  deep dense models, the check of the per-layer step time (``--levels 1,4,16,64`` keeps a call under
  10 minutes); ``qwen3-32b-fp8``: Qwen3-32B with ``--quantization fp8``, against its BF16 run on the
  same GPU (FP8's prefill speed); ``qwen2-57b-a14b`` (``--quantization fp8``, uniform routing: 64 experts
  of 2,560, top 8, and a shared expert; validation/configs/qwen2-57b-a14b), a MoE no fit has seen, on an H100;
  ``qwen3-30b-a3b-bf16``: the kit's Qwen3-30B-A3B in BF16 (uniform routing), the MoE layer times' model in a
  format no MoE fit has seen (61 GB of weights: an H100 holds it at max_model_len 2,048); ``mixtral-8x7b-bf16``
  likewise (94 GB: an H200); ``qwen3-30b-a3b-top2`` and ``-top4``: the same MoE with each token routed to 2 or
  4 of its 128 experts instead of 8 (``num_experts_per_tok``; validation/configs/): what the routed experts per
  token cost a step, all else equal.

On each server (started with ``VLLM_SERVER_DEV_MODE=1``), 512 prompt / 128 output tokens, chat endpoint:

1. warm-up: ``vllm bench serve`` at every level with 16 output tokens, so that Triton's MoE kernels
   compile before any window (vLLM's jit_monitor);
2. bursts: per level C, ``POST /reset_prefix_cache``, then ``vllm bench serve --max-concurrency C
   --num-prompts 2C --request-rate inf --seed C`` (a seed per level); the prefix-cache hits
   (``vllm:prefix_cache_hits_total``) and the jit_monitor lines of the server log are counted around it;
3. steady state: ``POST /reset_prefix_cache``, then ``servelab bench --concurrency 1,4,16,64,256
   --duration 20s --server-log LOG`` (stagger; every prompt unique, cold; servelab reads the
   jit_monitor lines and the hits itself).

Writes ``OUT/MODEL-bursts.json`` (one row per level, vllm bench serve's result with the hits and
JIT lines), ``OUT/MODEL-stagger-run.json`` and ``OUT/MODEL-boot.log``; prints both tables.

``--capture-sizes 576,…,2048`` serves the model with CUDA graphs captured at these sizes too (vLLM's
defaults and these, files named MODEL-captureN, N the largest), ``--max-capture-size N`` with vLLM's own
sizes up to N (``--max-cudagraph-capture-size``, MODEL-maxN), ``--stagger-only`` skips the bursts:
what larger graphs gain the steady state (validation/capture-h100/). A sparse list (``--capture-sizes``)
makes vLLM 0.25 reserve ~20 GiB of KV cache for its graphs (finding graph_memory_overreserved).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_gpu import ROOT, bench, serve, servelab, stop  # noqa: E402

from servelab.engines.vllm import default_capture_sizes  # noqa: E402
from servelab.metrics.bootlog import parse_bootlog  # noqa: E402
from servelab.rules.diagnose import void_routing  # noqa: E402

HERE = Path(__file__).resolve().parent
INPUT, OUTPUT, LEVELS = 512, 128, (1, 4, 16, 64, 256)
UNIFORM = {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random"}
MODELS = {  # name → (vLLM flags, environment, vocab_size when not the kit tokenizer's 151,936)
    "qwen3-14b": (("--max-model-len", "2048"), {}, None),
    "qwen3-32b": (("--max-model-len", "2048"), {}, None),  # H200: 65.5 GB of weights
    "mixtral-8x7b": (("--max-model-len", "2048", "--quantization", "fp8"), UNIFORM, 32000),
    "qwen3-8b": (("--max-model-len", "2048"), {}, None),  # in the calibrations: for another GPU (leave-one-GPU-out)
    "qwen3-30b-a3b": (("--max-model-len", "2048", "--quantization", "fp8"), UNIFORM, None),
    "gemma-3-27b": (("--max-model-len", "2048"), {}, 262208),  # 62 layers: the per-layer step time's check (the kit's tokenizer grown to its vocabulary)
    "llama-3.1-70b": (("--max-model-len", "2048", "--quantization", "fp8"), {}, 128256),  # 80 layers, dense FP8 (H200)
    "qwen3-32b-fp8": (("--max-model-len", "2048", "--quantization", "fp8"), {}, None),  # FP8 against qwen3-32b's BF16 on one GPU
    "qwen2-57b-a14b": (("--max-model-len", "2048", "--quantization", "fp8"), UNIFORM, None),  # MoE: 64 experts of 2,560 (top 8) and a shared one (H100)
    "qwen3-30b-a3b-bf16": (("--max-model-len", "2048"), UNIFORM, None),  # the MoE of the MoE layer times, in BF16: a format no MoE fit has seen (H100)
    "mixtral-8x7b-bf16": (("--max-model-len", "2048"), UNIFORM, 32000),  # 94 GB in BF16 (H200): FP8's MoE term held out, one stream beside mixtral-8x7b
    "qwen3-30b-a3b-top2": (("--max-model-len", "2048", "--quantization", "fp8"), UNIFORM, None),  # Qwen3-30B-A3B routing each token to 2 experts, not 8
    "qwen3-30b-a3b-top4": (("--max-model-len", "2048", "--quantization", "fp8"), UNIFORM, None),  # … to 4 (validation/configs/qwen3-30b-a3b-topK)
    # issue 53: MLA with fine-grained experts (the kit serves MLA with FlashMLA, its README), a sliding-window MoE, a new dense family
    "deepseek-v2-lite": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 102400),  # real config, BF16: 64 experts of 1,408, top 6, 2 shared
    "deepseek-v2-lite-triton": (("--max-model-len", "2048", "--attention-backend", "TRITON_MLA"), UNIFORM, 102400),  # the same on Triton MLA
    # block FP8 without DeepGEMM (VLLM_USE_DEEP_GEMM=0: CUTLASS block-scaled linears): its warm-up JIT-compiles 2,096 kernels, 4.5 min on an H200
    "kimi-k2-6l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), {**UNIFORM, "VLLM_USE_DEEP_GEMM": "0"}, 163840),  # Kimi-K2 cut to 6 layers: 384 experts of 2,048
    "deepseek-v3-8l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), {**UNIFORM, "VLLM_USE_DEEP_GEMM": "0"}, 129280),  # DeepSeek-V3 cut to 8 layers (3 dense)
    "gpt-oss-20b": (("--max-model-len", "2048"), UNIFORM, 201088),  # BF16 (the kit has no MXFP4 kernels for Hopper): sliding window 128 on half the layers, sinks
    "phi-4": (("--max-model-len", "2048"), {}, 100352),  # dense, a family no calibration has seen
    # issue 53's kept-back set (validation/kept-back-h200/, validation/kept_back.py): measured after predict was frozen, never fitted on
    "glm-4.7-flash": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 154880),  # real config: MLA with q_lora, 64 experts of 1,536, top 4
    "moonlight-16b-a3b": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 163840),  # real config (DeepSeek-V3 architecture), 64 of 1,408
    "deepseek-v2-8l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 102400),  # DeepSeek-V2 cut to 8 layers: 160 experts of 1,536, top 6
    "mistral-small-24b": (("--max-model-len", "2048"), {}, 131072),  # dense, 40 layers, a family no calibration has seen
    "gpt-oss-120b-12l": (("--max-model-len", "2048"), UNIFORM, 201088),  # gpt-oss-120b cut to 12 layers, BF16: 128 experts of 2,880, sliding window
    # issue 53's second kept-back set (validation/kept-back2-h200/): chosen before the fused-MoE rate was measured, opened after predict was frozen
    "qwen3-235b-a22b-12l": (("--max-model-len", "2048"), UNIFORM, None),  # Qwen3-235B-A22B cut to 12 layers, BF16: 128 experts of 1,536, top 8
    "qwen1.5-moe-a2.7b": (("--max-model-len", "2048"), UNIFORM, None),  # real config: 60 experts of 1,408, top 4, a shared one of 5,632; MHA
    "granite-3.3-8b": (("--max-model-len", "2048"), {}, 49159),  # dense, a family no calibration has seen
    "olmo-2-13b": (("--max-model-len", "2048"), {}, 100352),  # dense, granite-3.3-8b's fallback
    # issue 53's third kept-back set (validation/kept-back3-h200/): chosen before the eager step's host time was modelled, opened after predict was frozen
    "olmoe-1b-7b": (("--max-model-len", "2048"), UNIFORM, 50304),  # real config: 64 experts of 1,024, top 8, 16 layers, no shared expert
    "granite-3.1-3b-a800m": (("--max-model-len", "2048"), UNIFORM, 49155),  # real config: 40 experts of 512, top 8, 32 layers (vLLM's V2 model runner)
    "glm-4.5-air-16l": (("--max-model-len", "2048"), UNIFORM, 151552),  # GLM-4.5-Air cut to 16 layers: 128 experts of 1,408, top 8, a shared one
    "phi-3.5-moe": (("--max-model-len", "2048"), UNIFORM, 32064),  # real shapes (rope scaling left out): 16 experts of 6,400, top 2, 32 layers
    # issue 53's fourth kept-back set (validation/kept-back4-h200/): chosen before the steady state's waves and the per-step host time were modelled
    "ernie-4.5-21b-a3b": (("--max-model-len", "2048"), UNIFORM, 103424),  # ERNIE 4.5's shapes: 64 experts of 1,536, top 6, 2 shared, 28 layers (a family servelab had not read)
    "granite-3.0-1b-a400m": (("--max-model-len", "2048"), UNIFORM, 49155),  # real shapes: 32 experts of 512, top 8, 24 layers, hidden 1,024
    "llama-3.2-1b": (("--max-model-len", "2048"), {}, 128256),  # dense, 16 layers, hidden 2,048: a tiny model's per-step cost
    "kimi-k2-4l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 163840),  # Kimi-K2 cut to 4 layers, BF16: 384 experts of 2,048 (101 GiB)
    # issue 53's fifth kept-back set (validation/kept-back5-h200/): chosen before the host-bound steady state's band and the API server's finding
    "qwen3-0.6b": (("--max-model-len", "2048"), {}, None),  # real config: dense, 28 layers, hidden 1,024 (the smallest step)
    "gemma-3-1b": (("--max-model-len", "2048"), {}, 262144),  # real shapes: dense, 26 layers, hidden 1,152, sliding window 512 on 5 of 6
    "glm-4-9b": (("--max-model-len", "2048"), {}, 151552),  # GLM-4-9B-0414's shapes: dense, 40 layers, 2 KV heads, 4 norms a layer
    "minimax-m2.5-8l": (("--max-model-len", "2048"), UNIFORM, 200064),  # MiniMax-M2.5 cut to 8 layers, BF16: 256 experts of 1,536, top 8, GQA
    # issue 53's sixth kept-back set (validation/kept-back6-h100/: lent an H100): chosen after the host-bound burst's queue was drafted, before predict was frozen with it
    "qwen2.5-0.5b": (("--max-model-len", "2048"), {}, None),  # real config: dense, 24 layers, hidden 896, 2 KV heads, tied embeddings
    "smollm2-1.7b": (("--max-model-len", "2048"), {}, 49152),  # real config: dense (Llama), 24 layers, hidden 2,048, 32 KV heads (MHA)
    "qwen3-1.7b": (("--max-model-len", "2048"), {}, None),  # real config: dense, 28 layers, hidden 2,048
    "qwen3-30b-a3b-16l": (("--max-model-len", "2048"), UNIFORM, None),  # Qwen3-30B-A3B cut to 16 layers, BF16: 128 experts of 768, top 8
    # issue 53's eighth kept-back set (validation/kept-back8-h100/): chosen after calibrate fitted the host's scale, before it was measured on a new machine
    "llama-3.2-3b": (("--max-model-len", "2048"), {}, 128256),  # real shapes: dense, 28 layers, hidden 3,072, 8 KV heads, tied embeddings
    "mistral-7b-v0.3": (("--max-model-len", "2048"), {}, 32768),  # real config: dense, 32 layers, hidden 4,096, 8 KV heads
    # issue 53's ninth kept-back set (validation/kept-back9-h100/): chosen after the band came from every held-out point, before it was measured
    "deepseek-v3-5l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA"), UNIFORM, 129280),  # DeepSeek-V3 cut to 5 layers (3 dense, 2 MoE), BF16: 256 experts of 2,048, top 8, a shared one (50 GiB)
    "gemma-2-9b": (("--max-model-len", "2048"), {}, 256000),  # real config: dense, 42 layers, head 256, sliding window 4,096 on half, logit soft-capping (a family no set has seen)
    # issue 53's tenth kept-back set (validation/kept-back10-h100/): chosen before the band was held out by model (7e4baed), before it was measured
    "mixtral-8x22b-8l": (("--max-model-len", "2048"), UNIFORM, 32768),  # Mixtral-8x22B cut to 8 layers, BF16: 8 experts of 16,384, top 2, hidden 6,144 (38 GiB)
    # olmo-2-13b (above, never measured): dense, 40 layers, hidden 5,120, 40 KV heads (MHA), a family no set has seen
    # issue 53's eleventh kept-back set: two model_types servelab does not know (read as a generic decoder), chosen after the tenth was opened, before it is measured
    "aya-expanse-8b": (("--max-model-len", "2048"), {}, 256000),  # Aya-Expanse-8B's shapes (Cohere: parallel attention and MLP, one LayerNorm a layer, tied embeddings), BF16 (16 GB)
    "dots-llm1-8l": (("--max-model-len", "2048"), UNIFORM, 152064),  # dots.llm1 cut to 8 layers (1 dense, 7 MoE), BF16: 128 experts of 1,408, top 6, 2 shared; MHA (35 GB)
    # issue 53's twelfth kept-back set: two MoE model_types servelab does not know, each with a native vLLM 0.25 implementation whose
    # FusedMoE gets the router's full logits (so the routing simulation holds; the eleventh's dots.llm1 did not: kept_back.void) and a
    # config class vLLM ships (vllm/transformers_utils/configs/), chosen after the eleventh was opened, before it is measured
    "afmoe": (("--max-model-len", "2048"), UNIFORM, 200192),  # AFMoE (Arcee) in vLLM's AfmoeConfig shapes: 64 experts of 1,408, top 6, 2 shared, gated attention, sliding window 2,048 on 3 of 4 layers (37 GB)
    "flex-olmo-16l": (("--max-model-len", "2048"), UNIFORM, 100352),  # FlexOlmo-7x7B's shapes (vLLM's FlexOlmoConfig) cut to 16 layers: 7 experts of 11,008, top 5; MHA, q/k norms (34 GB)
    # issue 53's thirteenth kept-back set: a fine-grained MoE native in vLLM 0.25 whose FusedMoE gets the router's logits over all 256
    # experts (so the routing simulation holds) with a config class vLLM ships, and a dense family no set has seen; chosen after the
    # twelfth was opened, before it is measured
    "laguna-24l": (("--max-model-len", "2048"), UNIFORM, 100352),  # Laguna (Poolside) in vLLM's LagunaConfig shapes cut to 24 layers: 256 experts of 512, top 8, a shared one of 512, the first layer dense; 48 heads of 128 on hidden 2,048, 8 KV heads, q/k norms, a per-head output gate (37 GiB)
    "minitron-8b": (("--max-model-len", "2048"), {}, 256000),  # Minitron-8B's shapes (nemotron: squared-ReLU MLP without a gate, LayerNorm1P, half-rotary RoPE), dense, 32 layers, 48 heads of 128 on hidden 4,096, 8 KV heads (17 GB)
    # issue 53's fourteenth kept-back set: two fine-grained MoE model_types native in vLLM 0.25 whose FusedMoE gets the router's logits over
    # all 192 experts (so the routing simulation holds), each with a config class vLLM ships; chosen after the thirteenth was opened, before it is measured
    "axk1-4l": (("--max-model-len", "2048", "--attention-backend", "FLASHMLA", "--trust-remote-code"), UNIFORM, 163840),  # A.X K1 (SK Telecom) in vLLM's AXK1Config shapes cut to 4 layers (1 dense, 3 MoE), BF16: MLA (q_lora 1,536, 64 heads), 192 experts of 2,048, top 8, a shared one, hidden 7,168 (57 GB); model_type AXK1 is in no config registry of vLLM 0.25 or transformers 5.17 (whose is 'axk1', which vLLM would not read as MLA): config.json's auto_map names vLLM's AXK1Config, copied beside it, hence --trust-remote-code
    "hy-v3-8l": (("--max-model-len", "2048"), UNIFORM, 120832),  # HY V3 (Tencent Hunyuan) in vLLM's HYV3Config shapes cut to 8 layers (1 dense, 7 MoE), BF16: 192 experts of 1,536, top 8, a shared one, 64 heads of 128 on hidden 4,096, 8 KV heads, q/k norms (55 GB)
    # issue 53's fifteenth set (validation/kept-back15-h100/), not new models: the first two sets' deep MLA MoE (glm-4.7-flash and
    # moonlight-16b-a3b above, their worst held out 40 and 55 %, on design levels run while three other servers shared the host's
    # CPUs) measured again one job on one H100 host, by the same protocol, and opened at the commit that chose it: whether that
    # worst is predict's or the shared host's; qwen1.5-moe-a2.7b (its 16-stream burst +50 %, TTFT 674 ms) if time is left
    # Llama-3.2-1B with CUDA graphs up to 2,048 tokens (a prompt's step inside a graph): whether its steady state's waves come from steps without graphs
    "llama-3.2-1b-graphs": (("--max-model-len", "2048", "--max-cudagraph-capture-size", "2048"), {}, 128256),
    # the small MoE models again with four API server processes (vLLM's --api-server-count): whether one API server bounds their steady state
    "olmoe-1b-7b-api4": (("--max-model-len", "2048", "--api-server-count", "4"), UNIFORM, 50304),
    "granite-3.1-3b-a800m-api4": (("--max-model-len", "2048", "--api-server-count", "4"), UNIFORM, 49155),
}
JIT = "Triton kernel JIT compilation during inference"
COMPLETIONS = {"gpt-oss-20b", "gpt-oss-120b-12l"}  # benched on /v1/completions: its chat endpoint renders harmony, whose special tokens the kit's tokenizer lacks (HTTP 500 '<|end|>')


def kit_with(kit: Path, model: str, vocab: int | None) -> Path:
    """A copy of the kit with validation/configs/MODEL added and, for another vocabulary, its tokenizer resized."""
    tmp = Path(tempfile.mkdtemp()) / "kit"
    shutil.copytree(kit, tmp)
    (tmp / "configs").chmod(0o755)
    if not (tmp / "configs" / model).exists():  # MODEL-fp8, MODEL-bf16, MODEL-api4: MODEL's config (the kit's or ours), in another format or serving
        base = model.removesuffix("-fp8").removesuffix("-bf16").removesuffix("-triton").removesuffix("-api4").removesuffix("-graphs")
        shutil.copytree(tmp / "configs" / base if (tmp / "configs" / base).exists() else HERE / "configs" / base, tmp / "configs" / model)
    if vocab:
        (tmp / "tokenizer").chmod(0o755)
        subprocess.run([sys.executable, str(kit / "resize_tokenizer.py"), str(vocab), str(tmp / "resized")], check=True)
        for f in (tmp / "resized").iterdir():
            dest = tmp / "tokenizer" / f.name
            dest.unlink(missing_ok=True)
            shutil.copy(f, dest)
    return tmp


def hits(url: str) -> tuple[float, float]:
    """(prefix-cache hits, queries) so far, tokens, from /metrics."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {"vllm:prefix_cache_hits": 0.0, "vllm:prefix_cache_queries": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name.removesuffix("_total")
            if name in out:
                out[name] += s.value
    return out["vllm:prefix_cache_hits"], out["vllm:prefix_cache_queries"]


def reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url + "/reset_prefix_cache", method="POST"), timeout=30).read()


def vllm_bench(url: str, model: str, out: Path, concurrency: int, prompts: int, output: int, seed: int, input_len: int = INPUT) -> dict:
    api = ("openai", "/v1/completions") if model in COMPLETIONS else ("openai-chat", "/v1/chat/completions")
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", api[0], "--base-url", url,
           "--endpoint", api[1], "--model", model, "--tokenizer", f"/tmp/models/{model}", "--dataset-name", "random",
           "--random-input-len", str(input_len), "--random-output-len", str(output), "--num-prompts", str(prompts),
           "--max-concurrency", str(concurrency), "--request-rate", "inf", "--seed", str(seed), "--ignore-eos",
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
           "--save-result", "--result-dir", str(out), "--result-filename", "vb.json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-3000:], flush=True)
        raise RuntimeError(f"vllm bench serve failed at {concurrency}")
    res = json.loads((out / "vb.json").read_text())
    (out / "vb.json").unlink()
    return res


def serve_model(kit: Path, model: str, log: Path, *extra: str, env: dict | None = None, simulate_routing: bool = True) -> tuple[int, str]:
    """Start vLLM on ``MODELS[model]`` with its development endpoints (``/reset_prefix_cache``), ``extra``
    flags after the model's and ``env`` over its environment; ``simulate_routing`` False serves a MoE
    without vLLM's routing simulator (``UNIFORM``: the dummy weights' own routing); (process group, URL)."""
    flags, model_env, vocab = MODELS[model]
    if not simulate_routing:
        model_env = {k: v for k, v in model_env.items() if k not in UNIFORM}
    return serve(kit_with(kit, model, vocab), model, log, *flags, *extra, env={**model_env, **(env or {}), "VLLM_SERVER_DEV_MODE": "1"})


def model_args(description: str, *extra: tuple[str, dict], many: bool = False) -> argparse.Namespace:
    """--kit, --out (created) and --model (``many``: one or more, a list), and ``extra`` options as (flag, add_argument keywords)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--kit", type=Path, required=True, help="the gpu-vllm kit folder (serve.sh, configs/, tokenizer/)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", choices=list(MODELS), required=True, **({"nargs": "+"} if many else {}))
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def run_model(kit: Path, out: Path, model: str, levels: tuple[int, ...] = LEVELS, capture: tuple[int, ...] = (), bursts: bool = True,
              max_capture: int | None = None, repeats: int = 1, stagger_levels: tuple[int, ...] | None = None, duration: str = "20s",
              long_levels: tuple[int, ...] = (), calibrate: str | None = None) -> None:  # fmt: skip
    """The run of the module docstring; ``capture``: CUDA-graph capture sizes added to vLLM's defaults (the files then named
    MODEL-captureN, N the largest); ``max_capture``: vLLM's own sizes up to it (--max-cudagraph-capture-size, MODEL-maxN);
    ``calibrate``: a hardware profile, then ``servelab calibrate --url`` runs its own design on the server after the warm-up (its
    calibration OUT/MODEL-calibration.yaml, its run OUT/MODEL-calibrate/), before the bursts and the steady state it is checked on;
    ``bursts`` False: the steady state alone; ``repeats`` > 1: each steady-state level measured that many times on the one
    server (servelab bench --repeats; files MODEL-repeatsN): how far a level moves between measurements on one machine;
    ``stagger_levels``: the steady state's levels when not ``levels``, each measured for ``duration``; ``long_levels``: then
    these, three times 60 s each (files MODEL-repeats3-stagger*: the truth rule for MoE steady state at >= 64 streams)."""
    name = f"{model}-capture{max(capture)}" if capture else f"{model}-max{max_capture}" if max_capture else model
    name += f"-repeats{repeats}" if repeats > 1 else ""
    log = out / f"{name}-boot.log"
    sizes = ("--compilation-config", json.dumps({"cudagraph_capture_sizes": sorted({*default_capture_sizes(1024, 8192), *capture})})) if capture else ()
    sizes += ("--max-cudagraph-capture-size", str(max_capture)) if max_capture else ()
    pgid, url = serve_model(kit, model, log, *sizes)
    try:
        if void_routing(parse_bootlog(log.read_text(errors="replace"))):  # kept_back.void: no truth of this model can come from this server
            raise SystemExit(f"{model}: void_routing_simulation (servelab bootlog {log}): vLLM simulated the MoE routing with the router outside "
                             "its MoE layer, so every token would go to the same top-k experts; not measured")
        for c in levels:  # warm-up: every batch shape the levels reach, before any window
            vllm_bench(url, model, out, c, c, 16, 10_000 + c)
        api = ("--endpoint", "completions") if model in COMPLETIONS else ()
        if calibrate:
            reset(url)
            servelab("calibrate", "--url", url, "--hardware", calibrate, "--model", str(ROOT / "validation" / "configs" / model), "--input-tokens",
                     str(INPUT), "--output-tokens", str(OUTPUT), "--output", str(out / f"{name}-calibrate"), "--out", str(out / f"{name}-calibration.yaml"),
                     "--server-log", str(log), *api, check=True)  # fmt: skip
        rows = []
        for c in levels if bursts else ():
            reset(url)
            h0, mark = hits(url), log.stat().st_size
            res = vllm_bench(url, model, out, c, 2 * c, OUTPUT, c)
            h1 = hits(url)
            jit = [line for line in log.read_text(errors="replace")[mark:].splitlines() if JIT in line]
            keep = ("completed", "failed", "total_input_tokens", "total_output_tokens", "duration", "output_throughput", "mean_ttft_ms",
                    "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "median_e2el_ms")  # fmt: skip
            rows.append({"concurrency": c, **{k: res.get(k) for k in keep}, "prefix_cache_hits": h1[0] - h0[0], "prefix_cache_queries": h1[1] - h0[1], "jit_lines": jit})
            r = rows[-1]
            print(f"{model} burst c={c}: {r['completed']} ok, {r['output_throughput']:,.0f} tok/s, TTFT mean {r['mean_ttft_ms']:.0f} / p99 "
                  f"{r['p99_ttft_ms']:.0f} ms, TPOT mean {r['mean_tpot_ms']:.2f} ms, hits {r['prefix_cache_hits']:.0f} of "
                  f"{r['prefix_cache_queries']:.0f} tokens, JIT lines {len(jit)}", flush=True)  # fmt: skip
        if bursts:
            (out / f"{name}-bursts.json").write_text(json.dumps({"model": model, "input_tokens": INPUT, "output_tokens": OUTPUT, "levels": rows}, indent=1))
        reset(url)
        run, _ = bench(url, out / f"{name}-stagger", ",".join(map(str, stagger_levels or levels)), "--input-tokens", str(INPUT), "--output-tokens",
                       str(OUTPUT), "--duration", duration, "--server-log", str(log), "--repeats", str(repeats), *api)  # fmt: skip
        if long_levels:
            reset(url)
            bench(url, out / f"{name}-repeats3-stagger", ",".join(map(str, long_levels)), "--input-tokens", str(INPUT), "--output-tokens", str(OUTPUT),
                  "--duration", "60s", "--server-log", str(log), "--repeats", "3", *api)  # fmt: skip
            shutil.copy(out / f"{name}-repeats3-stagger" / "run.json", out / f"{name}-repeats3-stagger-run.json")
    finally:
        stop(pgid)
    shutil.copy(out / f"{name}-stagger" / "run.json", out / f"{name}-stagger-run.json")
    for lv in run.levels:
        hit = lv.server.prefix_cache_hit_rate if lv.server else None
        print(f"{model} stagger c={lv.concurrency}: {lv.ok} ok, {lv.output_throughput_tok_s or 0:,.0f} tok/s, TTFT p50 {lv.ttft_ms.p50} ms, "
              f"TPOT p50 {lv.tpot_ms.p50} ms, hit rate {hit}, findings {[f.kind for f in run.findings if f.evidence.get('concurrency') == lv.concurrency]}", flush=True)  # fmt: skip


def main() -> None:
    args = model_args(__doc__.split("\n\n")[0], ("--levels", {"default": ",".join(map(str, LEVELS)),
                                                              "help": "streams per level, comma-separated (a large model's 256 outlasts one call)"}),
                      ("--capture-sizes", {"default": "", "help": "CUDA-graph capture sizes to add to vLLM's defaults, comma-separated"}),
                      ("--max-capture-size", {"type": int, "help": "vLLM's --max-cudagraph-capture-size: its own capture sizes up to it"}),
                      ("--stagger-only", {"action": "store_true", "help": "no bursts: the steady state alone"}),
                      ("--repeats", {"type": int, "default": 1, "help": "measure each steady-state level this many times (servelab bench --repeats)"}),
                      ("--stagger-levels", {"default": "", "help": "the steady state's levels when not --levels, comma-separated"}),
                      ("--duration", {"default": "20s", "help": "each steady-state window (MoE at >= 64 streams: 60s, three repeats)"}),
                      ("--long-levels", {"default": "", "help": "then these steady-state levels three times 60 s each, comma-separated"}),
                      ("--calibrate", {"help": "a hardware profile: servelab calibrate --url on the server first (its design, then the checks)"}))  # fmt: skip
    capture = tuple(int(c) for c in args.capture_sizes.split(",") if c)
    stagger = tuple(int(c) for c in args.stagger_levels.split(",") if c) or None
    run_model(args.kit, args.out, args.model, tuple(int(c) for c in args.levels.split(",")), capture, not args.stagger_only, args.max_capture_size,
              args.repeats, stagger, args.duration, tuple(int(c) for c in args.long_levels.split(",") if c), args.calibrate)  # fmt: skip


if __name__ == "__main__":
    main()
