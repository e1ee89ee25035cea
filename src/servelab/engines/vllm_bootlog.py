"""vLLM's startup log: how servelab reads it (``Engine.rules``, ``ready``, ``notable``, ``strip_prefix``
of ``servelab.engines.vllm``; the facts: ``servelab.engines.bootfacts.BootFacts``).

Line prefixes: ``INFO 11-06 10:51:36 [kv_cache_utils.py:1229] …`` (≥ 0.8), ``INFO 01-30 03:18:12
gpu_model_runner.py:848] …`` (older), and the logfmt lines of a structured-logging setup
(``level=INFO name=vllm.v1.core.kv_cache_utils msg="…"``). Process prefixes such as
``(EngineCore_DP0 pid=7)`` are removed before (``servelab.metrics.bootlog``). Formats and the
releases each rule was checked on: ../shared/reference/server-facts.md §3, tests/fixtures/bootlogs/INDEX.yaml.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime

from servelab.engines.bootfacts import BootFacts, MaxConcurrency, Rule, int_list, num, set_fact, set_facts
from servelab.engines.vllm_kv import BLOCK_TOKENS

PREFIX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+(?:\[[^\]]+\]|\S+\])\s*(.*)$")
LOGFMT = re.compile(r'^level=(\w+) name=vllm\S* msg="(.*)"$')


def strip_prefix(line: str) -> tuple[str, float | None, str] | None:
    """(message, timestamp in s or None, level) of a vLLM log line, or None if it is not one."""
    if m := PREFIX.match(line):
        return m.group(3), datetime.strptime("2000-" + m.group(2), "%Y-%m-%d %H:%M:%S").timestamp(), m.group(1)
    if m := LOGFMT.match(line):
        return m.group(2).replace('\\"', '"'), None, m.group(1).upper()
    return None


def _non_default(f: BootFacts, m: re.Match) -> None:
    try:
        f.non_default_args = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        f.non_default_args = m.group(1)
        return
    if isinstance(f.non_default_args, dict) and f.gpu_memory_utilization is None:
        f.gpu_memory_utilization = f.non_default_args.get("gpu_memory_utilization")


def _batch_args(f: BootFacts, m: re.Match) -> None:
    """max_num_seqs / max_num_batched_tokens given on the command line (read apart from the whole
    dict, which literal_eval refuses when it holds enum reprs such as ``<DynamicShapesType…>``)."""
    for name, value in re.findall(r"'(max_num_seqs|max_num_batched_tokens)': (\d+)", m.group(1)):
        setattr(f, name, int(value))


def _concurrency(f: BootFacts, m: re.Match) -> None:
    if f.max_concurrency is None:
        f.max_concurrency = MaxConcurrency(context_tokens=int(num(m.group(1))), factor=num(m.group(2)))


def _quant(f: BootFacts, m: re.Match) -> None:
    value = m.group(1) or m.group(2)
    if value not in f.quant_backends:
        f.quant_backends.append(value)


def _engine_config(f: BootFacts, m: re.Match) -> None:
    set_fact("version")(f, m)
    f.model = f.model or m.group(2)
    f.max_model_len = f.max_model_len or int(m.group(3))


def _moe_default(f: BootFacts, m: re.Match) -> None:
    """A MoE layer without a tuned config: it names the run's config even after another layer's tuned one."""
    f.moe_config, f.moe_config_tuned = m.group(1), False


RULES: list[Rule] = [
    Rule(re.compile(r"vLLM (?:API )?server version ([\w.+\-]+)"), set_fact("version"), "0.6–0.33"),
    Rule(re.compile(r"non-default args: (\{.*\})"), _non_default, "0.9–0.33"),
    Rule(re.compile(r"non-default args: (\{.*'max_num_(?:seqs|batched_tokens)': \d+.*)"), _batch_args, "0.9–0.33"),
    Rule(re.compile(r"Initializing a V1 LLM engine \(v([\w.+\-]+)\) with config: model='([^']*)'.*?max_seq_len=(\d+)"), _engine_config, "0.8–0.25"),
    Rule(re.compile(r"with config: .*?tensor_parallel_size=(\d+),.*?quantization=([\w\-]+),.*?kv_cache_dtype=(\w+)"),
         set_facts(tensor_parallel_size=lambda m: int(m.group(1)), quantization=lambda m: None if m.group(2) == "None" else m.group(2),
                   kv_cache_dtype=lambda m: m.group(3)), "0.8–0.25"),  # fmt: skip
    Rule(re.compile(r"with config: .*?enable_prefix_caching=(True|False)"), set_fact("prefix_caching", lambda m: m.group(1) == "True"), "0.8–0.25"),
    Rule(re.compile(r"speculative_config=SpeculativeConfig\(method='(\w+)', model=.*?, num_spec_tokens=(\d+)\)"),
         set_facts(speculative_method=lambda m: m.group(1), speculative_tokens=lambda m: int(m.group(2))), "0.25 (engine config line)"),
    Rule(re.compile(r"'cudagraph_capture_sizes': \[([\d, ]*)\]"), set_fact("cudagraph_sizes", lambda m: int_list(m.group(1))), "0.10–0.25"),
    Rule(re.compile(r"Using max model len (\d+)"), set_fact("max_model_len", lambda m: int(m.group(1))), "0.8–0.25"),
    Rule(re.compile(r"current --gpu-memory-utilization=([\d.]+)"), set_fact("gpu_memory_utilization", lambda m: float(m.group(1))), "0.11–0.25"),
    Rule(re.compile(r"max_num_batched_tokens=(\d+)"), set_fact("max_num_batched_tokens", lambda m: int(m.group(1))), "0.8–0.25"),
    Rule(re.compile(r"Using (\w+) attention backend out of potential backends"), set_fact("attention_backend"), "0.11–0.25 (list in [...] or (...))"),
    Rule(re.compile(r"Using (Flash Attention|FlashInfer|FlashMLA|Triton MLA|FlexAttention|XFormers|Torch SDPA)\s+backend"), set_fact("attention_backend"), "0.7–0.10"),
    Rule(re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) backend\.$"), set_fact("attention_backend"), "0.25 (forced: --attention-backend)"),
    Rule(re.compile(r"█\s+version\s+([\w.+\-]+)"), set_fact("version"), "0.18–0.25 (ASCII-art banner)"),
    Rule(re.compile(r"█\s+model\s+(\S+)"), set_fact("model"), "0.18–0.25 (ASCII-art banner)"),
    # MoE backends, every spelling: "Using 'MARLIN' WNA16 MoE backend", "Using 'VLLM_CUTLASS' NvFp4 MoE backend out of
    # potential backends: [...]", "Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: [...]" (0.15),
    # "Using Triton backend for FP8 MoE" (0.13)
    Rule(re.compile(r"Using '?([\w\-]+)'? (?:NvFp4|Fp8|Unquantized|Int8|Mxfp4|MxFp8|WNA16|W4A8|Mxfp4Mxfp8) MoE backend"), set_fact("moe_backend"), "0.15–0.25"),
    Rule(re.compile(r"Using (\w+) backend for (?:FP8|NVFP4|MXFP4|MXFP8|INT8|W4A8|WNA16|BF16|FP16) MoE"), set_fact("moe_backend"), "0.11–0.13"),
    # vllm/model_executor/layers/fused_moe/fused_moe.py get_moe_configs: the tuned Triton config of the model's
    # experts on this GPU, or its default ("Performance might be sub-optimal!"; the paths it tried, ", "-joined)
    Rule(re.compile(r"Using configuration from \S*?([^/\s]+\.json) for MoE layer"), set_facts(moe_config=lambda m: m.group(1), moe_config_tuned=lambda m: True), "0.25"),
    Rule(re.compile(r"Using default MoE config\. Performance might be sub-optimal! Config file not found at .*?([^/\s]+\.json)$"), _moe_default, "0.25"),
    # vllm/model_executor/models/transformers/: an architecture with no vLLM implementation (e.g. Dots1ForCausalLM after 0.23.0:
    # registry.py _PREVIOUSLY_SUPPORTED_MODELS) runs on Transformers' model code; its MoE experts go to FusedMoE with the router
    # left in Transformers ("external routing") unless a fuser takes the whole block ("internal routing")
    Rule(re.compile(r"Using Transformers modeling backend|has no vLLM implementation, falling back to Transformers implementation"),
         set_fact("modeling_backend", lambda m: "transformers"), "0.25"),  # fmt: skip
    Rule(re.compile(r"-> FusedMoE \((external|internal) routing\)"), set_fact("moe_external_routing", lambda m: m.group(1) == "external"), "0.25"),
    # vllm/model_executor/layers/fused_moe/router/routing_simulator_router.py (VLLM_MOE_ROUTING_SIMULATION_STRATEGY set)
    Rule(re.compile(r"Simulating MoE routing using a (\w+) strategy"), set_fact("moe_routing_simulation"), "0.25"),
    Rule(re.compile(r"Using (\S+) for (?:NVFP4|MXFP4|MXFP8) GEMM|Using (\S+) for mixed-precision linear"), _quant, "0.11–0.25"),
    Rule(re.compile(r"Selected (\w+Kernel) for \w+"), _quant, "0.2x (scaled-mm kernel of a quantized linear)"),
    Rule(re.compile(r"Loading weights took ([\d.]+) seconds"), set_fact("weights_load_s", lambda m: float(m.group(1))), "0.6–0.33"),
    Rule(re.compile(r"Model loading took ([\d.]+) ?(?:GiB|GB)(?: memory)? and ([\d.]+) seconds"),
         set_facts(weights_gib=lambda m: float(m.group(1)), weights_load_s=lambda m: float(m.group(2))), "0.8 ('GB and'), 0.9–0.33 ('GiB memory and')"),  # fmt: skip
    Rule(re.compile(r"Loading model weights took ([\d.]+) GB"), set_fact("weights_gib", lambda m: float(m.group(1))), "0.6–0.8 (V0)"),
    Rule(re.compile(r"torch\.compile (?:and initial profiling/warmup run together )?(?:takes|took) ([\d.]+) s in total"),
         set_fact("compile_s", lambda m: float(m.group(1))), "0.7–0.33"),  # fmt: skip
    Rule(re.compile(r"Available KV cache memory: ([\d.]+) GiB"), set_fact("kv_cache_gib", lambda m: float(m.group(1))), "0.8–0.33"),
    Rule(re.compile(r"KV cache size: ([\d,]+) tokens"), set_fact("kv_cache_tokens", lambda m: int(num(m.group(1)))), "0.8–0.33"),
    Rule(re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x"), _concurrency, "0.7–0.33"),
    Rule(re.compile(r"# (?:GPU|cuda) blocks: (\d+)"), set_fact("kv_cache_tokens", lambda m: int(m.group(1)) * BLOCK_TOKENS), "0.6–0.7"),
    Rule(re.compile(r"model weights take ([\d.]+) ?GiB"), set_fact("weights_gib", lambda m: float(m.group(1))), "0.6–0.8 (V0 worker)"),
    Rule(re.compile(r"reserved for KV Cache is ([\d.]+) ?GiB"), set_fact("kv_cache_gib", lambda m: float(m.group(1))), "0.6–0.8 (V0 worker)"),
    Rule(re.compile(r"gpu_memory_utilization \(([\d.]+)\)"), set_fact("gpu_memory_utilization", lambda m: float(m.group(1))), "0.6–0.8 (V0 worker)"),
    # vllm/v1/worker/gpu_worker.py (CUDA graph memory profiling, on by default since 0.21): what it reserved before the KV
    # cache (profile_cudagraph_memory: the first capture + the second's memory × the other sizes) against what capture took
    Rule(re.compile(r"CUDA graph pool memory: ([\d.]+) GiB \(actual\), ([\d.]+) GiB \(estimated\)"),
         set_facts(graph_pool_gib=lambda m: float(m.group(1)), graph_estimate_gib=lambda m: float(m.group(2))), "0.21–0.25"),  # fmt: skip
    Rule(re.compile(r"Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB"),
         set_facts(graph_capture_s=lambda m: float(m.group(1)), graph_capture_gib=lambda m: float(m.group(2))), "0.8–0.33"),  # fmt: skip
]
READY = re.compile(r"Application startup complete")
NOTABLE = re.compile(
    r"Auto-prefetch is disabled|Mamba cache mode is set|max_num_scheduled_tokens is set to|padding layers|"
    r"CUDA graph memory profiling is enabled|not supported|is deprecated|Truncating max_cudagraph_capture_size"
)
