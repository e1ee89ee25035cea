"""vLLM: everything servelab knows about it (the engine interface: ``servelab.engines.base``).

Facts from ../shared/reference/server-facts.md §1–3: discovery (``owned_by: "vllm"``, ``GET
/version``, ``max_model_len`` on the model card), ``/tokenize`` in its chat form, request fields
(``ignore_eos`` + ``min_tokens``), Prometheus names with their renames, startup-log formats
(fixtures in tests/fixtures/bootlogs/INDEX.yaml; read by ``servelab.engines.vllm_bootlog``), its flags,
its defaults and its CUDA-graph sizes.
"""

from __future__ import annotations

import json
import math
import re

from servelab.values.argv import flag_value, flag_values, has_flag
from servelab.engines.base import Engine, Flags, Gauges, JsonGet, JsonPost, LintFinding, MoeKernel, RuntimeMemory
from servelab.engines.counters import Scrapes, ServerStats
from servelab.engines.cudagraph import padding, recommend
from servelab.engines.vllm_bootlog import NOTABLE, READY, RULES, strip_prefix
from servelab.engines.kv_layout import HybridLayout
from servelab.engines.vllm_kv import hybrid_layout, kv_tokens, rules_for
from servelab.engines import vllm_moe
from servelab.engines.vllm_host import EAGER_HOST_LAYER_S, EAGER_HOST_MLA_S, EAGER_HOST_MOE_S, HOST_QUEUE, STEP_HOST_S, STEP_HOST_SEQ_S
from servelab.values.specs import GIB, Hardware, ModelSpec

NAME = "vllm"


def default_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, num_spec_tokens: int = 0, sm100: bool = False, largest: int | None = None) -> list[int]:
    """vLLM 0.33's default ``cudagraph_capture_sizes``, ascending.

    Source: ``vllm/config/vllm.py`` ``_set_cudagraph_sizes`` (server-facts.md §2.4): with no user
    list, ``max = min(max_num_seqs · (1 + num_spec_tokens) · 2, 512)`` (1024 on data-center
    Blackwell, sm_100), or ``largest`` where the server sets it (``--max-cudagraph-capture-size``),
    capped at ``max_num_batched_tokens``; the sizes are ``[1, 2, 4] + range(8, min(max+1, 256), 8) +
    range(256, max+1, 16)``, plus ``max_num_batched_tokens`` itself when it is the cap; with
    speculative decoding, the multiples ``n · (1 + num_spec_tokens)`` of those sizes up to
    ``max_num_batched_tokens`` are added.
    """
    query_len = 1 + num_spec_tokens
    largest = largest or min(max_num_seqs * query_len * 2, 1024 if sm100 else 512)
    largest = min(max_num_batched_tokens, largest)
    sizes = [s for s in [1, 2, 4] if s <= largest] + list(range(8, min(largest + 1, 256), 8)) + list(range(256, largest + 1, 16))
    if largest == max_num_batched_tokens:
        sizes.append(max_num_batched_tokens)
    if num_spec_tokens:
        sizes += [n * query_len for n in list(sizes) if n * query_len <= max_num_batched_tokens]
    return sorted(set(sizes))


# Models whose largest CUDA-graph capture size vLLM raises when the server sets neither the list nor the largest:
# vllm/model_executor/models/config.py GptOssForCausalLMConfig.verify_and_update_config ("Increase the max capture size
# from 512 to 1024 for performance"); gpt-oss-20b's boot log on vLLM 0.25 says 1024 (validation/calibrate-h200/server3/).
MODEL_LARGEST_CAPTURE = {"gpt_oss": 1024}

# Runtime memory of vLLM 0.25 (vllm/v1/worker/gpu_worker.py, determine_available_memory): the KV cache gets
# gpu_memory_utilization × total − weights − non-torch increase − torch peak of profile_run − the CUDA-graph
# estimate. Measured with VLLM_LOGGING_LEVEL=DEBUG ("Memory profiling takes …") on H100 and H200, dummy weights:
# validation/RESULTS-runtime-memory.md.
NON_TORCH_GIB = 0.24  # "non-torch forward increase memory": 0.22 (dense) – 0.24 (MoE, hybrid), TP=1
# The V1 runner's dummy sampler run (gpu_model_runner.py, _dummy_sampler_run) samples every one of max_num_seqs
# rows twice, the second time through forward_native (top-k/top-p, fp32 softmax, exponential noise): 1.30 GiB
# more at 1,024 than at 256 rows on Nemotron-3-Nano (vocabulary 131,072) = 13.9 bytes per logit.
V1_SAMPLER_BYTES_PER_LOGIT = 13.9
V2_SAMPLER_BYTES_PER_LOGIT = 4.0  # the V2 runner samples once, without top-k/top-p (gpu/model_runner.py)
# profile_cudagraph_memory (V1 only; V2 returns 0): 0.64 GiB at a largest capture size of 512 (Nemotron-3-Nano,
# Qwen3-30B-A3B), 0.52 (Qwen3-Next, TP=2), 0.14 at 128 (Qwen3-30B-A3B, max_num_seqs 64).
CUDA_GRAPH_GIB_PER_CAPTURED_TOKEN = 0.64 / 512
# vllm/config/vllm.py, DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (as model_type): MoE models that take the V2 runner
V2_MOE_MODEL_TYPES = frozenset({"deepseek_v2", "qwen2_moe", "granitemoe"})


def model_runner(spec: ModelSpec) -> str:
    """``"v2"`` or ``"v1"``: the GPU model runner vLLM 0.25 picks for a model (vllm/config/vllm.py,
    ``VllmConfig._is_default_v2_model_runner_model``): V2 for models that are neither hybrid nor MoE,
    and for the MoE architectures it lists; V1 for the rest (MoE, Mamba / linear-attention hybrids)."""
    if spec.count("linear") or spec.count("mamba"):
        return "v1"
    return "v2" if not spec.moe_layers or spec.model_type in V2_MOE_MODEL_TYPES else "v1"


def spec_tokens(argv: list[str]) -> int:
    """``num_speculative_tokens`` from ``--speculative-config`` JSON (0 when absent or unreadable)."""
    raw = flag_value(argv, "--speculative-config")
    try:
        return int(json.loads(raw).get("num_speculative_tokens", 0)) if raw else 0
    except (ValueError, AttributeError, TypeError):
        return 0


SMALL_TIER_MAX_NUM_SEQS = 256  # the max_num_seqs default of `vllm serve` on DGX Spark, A100, RTX 5090 (server-facts.md §2.3)
# Online FP8 (--quantization fp8) against BF16, Qwen3-32B in both formats on one H200 (vLLM 0.25, validation/cold-h200/qwen3-32b*):
# a 512-token prompt in a CUDA graph prefills 1.45x faster (TTFT 44 against 62 ms), steps of 8,192 prompt tokens 1.5-1.7x, never 2x;
# a step without graphs costs 25 ms more in FP8 (a 522-token prompt: 69 against 44 ms), ~1 ms in BF16: 0.39 ms over 64 layers.
# Held out on Llama-3.1-70B fp8 (80 layers, H200): 1 % median, 3 % worst tok/s (validation/RESULTS-predict.md)
FP8_GAIN = 1.5
FP8_EAGER_LAYER_S = 0.4e-3
# What a MoE layer costs more in online FP8 than in BF16, every step (docs/metrics.md, FP8 MoE layer): its fused-MoE op
# quantizes its activations itself (fused_moe.py fused_experts_impl -> ops.scaled_fp8_quant: a memset, a max reduction and
# a quantization kernel, on the input and the intermediate), whose max reduction (csrc/quantization/w8a8/fp8/common.cu
# segmented_max_reduction_strided) has each of a row's 256 threads read ceil(hidden / 256), then ceil(width / 256) elements
# in turn: FP8_MOE_READ_S a read (kernel profile, validation/moe-kernel/: 4.7, 6.9, 15.2 us for 11, 24, 72 reads). The
# rest makes Qwen3-30B-A3B's 11 reads the 17.3 us measured on it in both formats (validation/eager-h100/format/).
FP8_QUANT_THREADS = 256
FP8_MOE_READ_S = 0.17e-6
FP8_MOE_LAYER_S = 17.3e-6 - 11 * FP8_MOE_READ_S


class VLLM(Engine):
    """vLLM's OpenAI-compatible server (``vllm serve``)."""

    name = NAME
    title = "vLLM"
    owned_by = ("vllm",)
    exact_output_length = True
    gauges = Gauges(("vllm:num_requests_running",), ("vllm:num_requests_waiting",), ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))
    spec_decode_prefix = "vllm:spec_decode_num_"
    # vllm/v1/utils jit_monitor (0.2x): "Triton kernel JIT compilation during inference: fused_moe_kernel. This causes …", TileLang kernels
    # likewise; a MoE kernel compiling for a new batch shape inside a level (issue 38: 432 tok/s and an 860 ms TTFT at 4 streams against ~650)
    jit_warning = re.compile(r"(?:Triton kernel|TileLang) JIT compilation during inference: ([\w.]+?)(?:\.\s|\.?$|\s)")
    largest_capture_flag = "--max-cudagraph-capture-size"  # vllm/engine/arg_utils.py (CompilationConfig.max_cudagraph_capture_size)
    larger_graphs = ("captures every 16 tokens up to it; on one H100, vLLM 0.25, 512-token prompts, steady state at 4–64 streams: +23–61 % tok/s on Qwen3-30B-A3B fp8 "
                     "and +1–2 % on the dense Qwen3-14B bf16, for 26 s more graph capture at boot and 1.2 GiB more graph memory; its sizes and nine more "
                     "to 2,048: +6–30 % on Mixtral-8x7B fp8, +22–65 % on Qwen3-30B-A3B fp8, but vLLM reserved 20.9 GiB of KV cache for them (finding "
                     "graph_memory_overreserved; validation/capture-h100*/)")  # fmt: skip
    pricing = ("a dense BF16 model's burst prefilling at the hardware's power-capped clock after its first step with prompts, "
               f"vLLM's FP8 at {FP8_GAIN:g}x the BF16 rate (MoE experts 1x), {FP8_EAGER_LAYER_S * 1e3:g} ms a layer dearer without CUDA graphs "
               f"and {FP8_MOE_LAYER_S * 1e6:.1f} µs + {FP8_MOE_READ_S * 1e6:g} µs per {FP8_QUANT_THREADS} elements of hidden size and of "
               "expert width a MoE layer dearer in every step; on Hopper, its Triton fused-MoE experts' FLOPs at "
               + ", ".join(f"{rate:g}x in {fmt}" for fmt, rate in vllm_moe.MOE_RATE.items()) + " the dense rate; "
               f"a step with prompts without CUDA graphs at least the host's launches ({EAGER_HOST_LAYER_S * 1e3:g} ms a layer; in a burst "
               f"{EAGER_HOST_MOE_S['bf16'] * 1e3:g} more a BF16 MoE layer, {EAGER_HOST_MLA_S * 1e3:g} more an MLA layer); "
               f"on Hopper, every step at least the host's {STEP_HOST_S * 1e3:g} ms + {STEP_HOST_SEQ_S * 1e6:g} µs a sequence beyond the first "
               f"(fitted up to 64) and, where that binds (the host-bound points marked *), a steady state's prompts in waves and "
               f"each request {HOST_QUEUE:g} one-sequence host steps a running stream in the host's queue")
    untuned_moe = ("it warns that performance may be sub-optimal: tune one for this GPU with vLLM's benchmarks/kernels/benchmark_moe.py --tune "
                   "and point VLLM_TUNED_CONFIG_FOLDER at the folder it writes (vllm/model_executor/layers/fused_moe/fused_moe.py, get_moe_configs). "
                   "Measured on an H200 at 8,192 tokens, the tuned files vLLM ships gained 7 % (Qwen3-30B-A3B's experts, BF16) and 12 % (Mixtral-8x7B's) "
                   "over its default config; fine-grained BF16 experts reached 0.53–0.65 of cuBLAS's rate with either (validation/moe-kernel/h200-prefill.json)")  # fmt: skip
    foreign_model_code = ("it does so for an architecture it has no implementation of (those it dropped, Dots1ForCausalLM among them, "
                          "supported until 0.23.0: vllm/model_executor/models/registry.py, _PREVIOUSLY_SUPPORTED_MODELS) or when --model-impl "
                          "transformers asks for it, running Transformers' model code with its own attention and MoE kernels "
                          "(vllm/model_executor/models/transformers/); servelab's calibrations were measured on vLLM's own model code and this "
                          "backend was not measured against them, so compare its numbers with servelab predict with care")  # fmt: skip
    void_routing = ("vLLM 0.25's routing simulator draws each token's experts from the width of the router output it is handed "
                    "(fused_moe/router/routing_simulator_router.py, route_tokens: router_logits.shape[-1]), and the Transformers backend hands "
                    "it the top-k weights (models/transformers/moe.py, _transformers_moe_forward), so every token went to the first top-k experts: "
                    "each step read those experts' weights only, the throughput of a far smaller MoE. Seen on dots.llm1 cut to 8 layers (128 experts, "
                    "top 6) on an H100: it decoded at 183 % and 209 % of its roofline ceiling at 16 and 64 streams (finding ceiling_exceeded; "
                    "validation/kept-back11-h100/). Measure such a model with its real weights, without VLLM_MOE_ROUTING_SIMULATION_STRATEGY")  # fmt: skip
    graph_estimate = ("its estimate is the first graph's memory plus the second's times the other sizes (vllm/v1/worker/gpu_model_runner.py "
                      "profile_cudagraph_memory), which a capture list whose largest sizes are far apart inflates: vLLM 0.25's sizes and nine more up to "
                      "2,048 reserved 20.9 GiB for 1.1 GiB and halved Qwen3-30B-A3B fp8's KV cache on an H100 (validation/capture-h100/); capture every 16 "
                      "tokens up to the largest (--max-cudagraph-capture-size), or set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0")  # fmt: skip
    rules = RULES
    ready = READY
    notable = NOTABLE
    strip_prefix = staticmethod(strip_prefix)
    # /health is refused until the engine is built (server-facts.md §2.2); weights, torch.compile and graphs take 5-15 min on big models: 900 s
    launchers = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"))  # vLLM docs, "OpenAI-compatible server"
    ready_path = "/health"
    ready_timeout_s = 900.0
    default_port = 8000
    # --quantization / the checkpoint's quant_method (vllm/model_executor/layers/quantization/__init__.py)
    quant_formats = {"fp8": "fp8", "modelopt": "fp8", "modelopt_fp4": "nvfp4", "mxfp4": "mxfp4", "gptq": "gptq-int4",
                     "gptq_marlin": "gptq-int4", "awq": "awq-int4", "awq_marlin": "awq-int4"}  # fmt: skip
    container_caches = (("vllm", ".cache/vllm"),)  # its torch_compile_cache survives the container
    cluster_backends = ("ray", "native")
    # vllm/engine/arg_utils.py (-tp/--tensor-parallel-size, --enable-expert-parallel/-ep)
    flags = Flags(
        max_model_len="--max-model-len", max_num_seqs="--max-num-seqs", max_num_batched_tokens="--max-num-batched-tokens",
        eager="--enforce-eager", gpu_memory="--gpu-memory-utilization", speculative="--speculative-config",
        prefix_cache_off="--no-enable-prefix-caching", kv_cache_dtype="--kv-cache-dtype", quantization="--quantization",
        tp=("--tensor-parallel-size", "-tp"), ep=("--enable-expert-parallel", "-ep"),
    )  # fmt: skip
    gpu_memory_utilization_default = 0.92  # vllm/config/cache.py (0.9 before 0.2x)
    max_num_seqs_floor = SMALL_TIER_MAX_NUM_SEQS
    kv_cache_dtypes = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")  # vllm/config/cache.py CacheDType

    def draft_tokens(self, argv: list[str]) -> int:
        """``num_speculative_tokens`` of ``--speculative-config``."""
        return spec_tokens(argv)

    def point_problem(self, argv: list[str], request_tokens: int) -> str | None:
        """vLLM refuses max_num_batched_tokens below max_num_seqs (vllm/config/scheduler.py,
        SchedulerConfig.verify_max_model_len: "max_num_batched_tokens … must be greater than or equal
        to max_num_seqs")."""
        seqs, mbt = flag_value(argv, self.flags.max_num_seqs), flag_value(argv, self.flags.max_num_batched_tokens)
        if seqs and mbt and seqs.isdecimal() and mbt.isdecimal() and int(mbt) < int(seqs):
            return f"vLLM refuses --max-num-batched-tokens {mbt} below --max-num-seqs {seqs}"
        return None

    async def describe(self, get: JsonGet, card: dict) -> tuple[str | None, int | None]:
        """Version from ``GET /version``; context from the card's ``max_model_len``."""
        body = await get("/version")
        _, context = await super().describe(get, card)
        return (body.get("version") if isinstance(body, dict) else None), context

    async def chat_count(self, post: JsonPost, model: str, messages: list[dict], extra: dict) -> int | None:
        """``POST /tokenize`` in its chat form (``messages``, ``add_generation_prompt``) → ``count``."""
        out = await post("/tokenize", {"model": model, "messages": messages, "add_generation_prompt": True, **extra})
        return out.get("count", len(out["tokens"]))

    def request_fields(self, *, max_tokens: int, ignore_eos: bool, cold: bool) -> dict:
        """``ignore_eos`` and ``min_tokens = max_tokens`` for an exact output length."""
        return {"ignore_eos": True, "min_tokens": max_tokens} if ignore_eos else {}

    def server_counters(self, s: Scrapes, stats: ServerStats) -> None:
        """Tokens, prefix-cache queries and hits (≤ 0.10: ``vllm:gpu_prefix_cache_*``), preemptions,
        and the queue-time, TTFT and E2E histograms."""
        stats.prompt_tokens = s.delta("vllm:prompt_tokens_total")
        stats.generation_tokens = s.delta("vllm:generation_tokens_total")
        queries = s.delta("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        hits = s.delta("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        stats.cached_prompt_tokens, stats.prefix_cache_hit_rate = hits, s.ratio(hits, queries)
        stats.preemptions = s.delta("vllm:num_preemptions_total")
        stats.queue_time_mean_ms = s.hist_mean_ms("vllm:request_queue_time_seconds")
        stats.ttft_mean_ms = s.hist_mean_ms("vllm:time_to_first_token_seconds")
        stats.e2e_mean_ms = s.hist_mean_ms("vllm:e2e_request_latency_seconds")

    def parallel_flags(self, argv: list[str], tp: int, expert_parallel: bool, backend: str | None) -> list[str]:
        """TP/EP flags, and ``--distributed-executor-backend ray`` on a Ray cluster."""
        extra = super().parallel_flags(argv, tp, expert_parallel, backend)
        if backend == "ray" and not has_flag(argv, "--distributed-executor-backend"):
            extra += ["--distributed-executor-backend", "ray"]
        return extra

    def cluster_flags(self, nodes: int, rank: int, head: str, port: int) -> list[str]:
        """``--nnodes N --node-rank R --master-addr HEAD --master-port P``, ``--headless`` on workers (vllm/engine/arg_utils.py)."""
        flags = ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", head, "--master-port", str(port)]
        return flags + (["--headless"] if rank else [])

    def lint_rules(self, argv: list[str], concurrencies: list[int]) -> list[LintFinding]:
        """capture-sizes: plan concurrencies that decode padded to a larger CUDA graph, or without one;
        capture-sizes-sparse: a capture list whose two largest sizes, above 512, are more than 16 apart."""
        if has_flag(argv, "--enforce-eager"):
            return []
        given, largest = self._capture_args(argv)
        return self._sparse_sizes(given) + self._padded(argv, concurrencies, given, largest)

    @staticmethod
    def _capture_args(argv: list[str]) -> tuple[list[str], str]:
        """The capture sizes a command gives (--cudagraph-capture-sizes or --cuda-graph-sizes, else
        --compilation-config's cudagraph_capture_sizes) and its largest capture size for vLLM's own list
        (--max-cudagraph-capture-size, else --compilation-config's max_cudagraph_capture_size; "" where none)."""
        try:
            config = json.loads(flag_value(argv, "--compilation-config") or "{}")
        except json.JSONDecodeError:
            config = {}
        config = config if isinstance(config, dict) else {}
        sizes = flag_values(argv, "--cudagraph-capture-sizes") or flag_values(argv, "--cuda-graph-sizes") or [str(v) for v in config.get("cudagraph_capture_sizes") or []]
        return sizes, flag_value(argv, "--max-cudagraph-capture-size") or str(config.get("max_cudagraph_capture_size") or "")

    def _sparse_sizes(self, given: list[str]) -> list[LintFinding]:
        """A capture list (``given``: ``_capture_args``) whose two largest sizes, the largest above 512, are more
        than 16 apart: vLLM's graph-memory estimate (``graph_estimate``) may reserve far more than the graphs take."""
        sizes = sorted({int(v) for v in given if v.isdecimal()})
        if len(sizes) < 2 or sizes[-1] <= 512 or sizes[-1] - sizes[-2] <= 16:
            return []
        return [LintFinding("capture-sizes-sparse", "warning", f"the two largest CUDA-graph capture sizes are {sizes[-1]} and {sizes[-2]}: "
                            "vLLM may reserve far more memory for the graphs than they take, out of the KV cache",
                            f"vLLM sizes its KV cache after reserving its estimate of the graphs' memory: {self.graph_estimate}. Check "
                            "servelab bootlog (CUDA-graph memory reserved against what the pool took) or servelab bench --server-log "
                            "(finding graph_memory_overreserved).")]  # fmt: skip

    def _padded(self, argv: list[str], concurrencies: list[int], given: list[str], largest: str) -> list[LintFinding]:
        """capture-sizes (``lint_rules``; ``given``, ``largest``: ``_capture_args``)."""
        conc = concurrencies
        k = spec_tokens(argv)
        seqs = flag_value(argv, "--max-num-seqs")
        seqs_n = int(seqs) if seqs and seqs.isdecimal() else None
        if seqs_n:  # no decode batch is larger than max_num_seqs, whatever the plan's concurrency
            conc = sorted({min(c, seqs_n) for c in conc})
        if given and all(v.isdecimal() for v in given):
            sizes, source = sorted({int(v) for v in given}), "the recipe's capture sizes"
        else:
            tokens = flag_value(argv, "--max-num-batched-tokens")
            tokens_n = int(tokens) if tokens and tokens.isdecimal() else 2048
            sizes = default_capture_sizes(seqs_n or SMALL_TIER_MAX_NUM_SEQS, tokens_n, k, largest=int(largest) if largest.isdecimal() else None)
            source = "vLLM's default capture sizes" + (f" up to {largest}" if largest.isdecimal() else "")
        padded = [p for p in padding(sizes, conc, k) if p.graph_size is None or p.waste > 0]
        if not padded:
            return []
        parts = [
            f"c={p.concurrency} runs without a graph (above the largest size {max(sizes)})" if p.graph_size is None
            else f"c={p.concurrency} pads {p.tokens} → {p.graph_size} ({100 * p.waste:.0f} % wasted)"
            for p in padded
        ]  # fmt: skip
        fix = ",".join(str(s) for s in recommend([s for s in sizes if s <= max(conc)], conc, k))
        return [LintFinding(
            "capture-sizes", "warning", f"plan concurrencies are not {source}: " + "; ".join(parts),
            "A decode batch runs the CUDA graph of the smallest captured size ≥ its tokens (vllm/v1/cudagraph_dispatcher.py), "
            "so the padding is computed for nothing and per-stream tok/s dips at exactly these levels. Capture them, e.g. "
            f"--cudagraph-capture-sizes {fix.replace(',', ' ')} (servelab plan cudagraph), or measure the levels users run.",
        )]  # fmt: skip

    def batch_defaults(self, hw: Hardware) -> tuple[int, int]:
        """vLLM 0.33 ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) by device tier.

        Source: ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` (server-facts.md §2.3):
        ≥ 160 GiB → 16384 / 1024; ≥ 70 GiB and not GB10 → 8192 / 1024; otherwise (GB10 included) 2048 / 256.
        """
        if hw.memory_gib >= 160:
            return 16384, 1024
        if hw.memory_gib >= 70 and "gb10" not in hw.name.lower():
            return 8192, 1024
        return 2048, SMALL_TIER_MAX_NUM_SEQS

    def runtime_memory(self, spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1) -> RuntimeMemory:
        """vLLM 0.25's memory per GPU before the KV cache, besides the weights (GiB; module constants
        give each term's source and measurement). With M = max_num_batched_tokens, H = hidden size:

        - activations: MoE, M × top-k × (m·N / tp + K) × 2 bytes (the fused-MoE kernel's
          gate/up, down and output caches, m the expert's matrices, ``ModelSpec.expert_matrices``: 3 gated, 2 not; N = one
          expert's width; K what it reads and writes, H or a latent size: Nemotron 3's ``moe_latent_size``) + 4·H·M·2
          bytes of hidden-size buffers; dense, M × (2·I / tp + 4·H) × 2 bytes;
        - sampler: max_num_seqs × vocabulary × bytes per logit of the runner (not divided by tp:
          every rank samples the gathered logits);
        - CUDA graphs (V1 only): the largest default capture size × 1.25 MiB.

        Measured error: within 0.2 GiB of vLLM's own figures on the seven DEBUG boots of
        validation/RESULTS-runtime-memory.md (tests/test_plan.py asserts 0.25 GiB).
        """
        runner = model_runner(spec)
        M, H = max_num_batched_tokens, spec.hidden_size
        if spec.moe_layers:
            width = min(H, spec.expert_params // (spec.expert_matrices * spec.moe_intermediate_size))  # what the experts read and write: H (gpt-oss's biases aside), or Nemotron 3's latent
            moe = M * spec.experts_per_token * (spec.expert_matrices * spec.moe_intermediate_size / tp + width) * 2
            activations = moe + 4 * H * M * 2
        else:
            activations = M * (2 * spec.intermediate_size / tp + 4 * H) * 2
        per_logit = V1_SAMPLER_BYTES_PER_LOGIT if runner == "v1" else V2_SAMPLER_BYTES_PER_LOGIT
        graphs = self.capture_sizes(max_num_seqs, max_num_batched_tokens)[-1] * CUDA_GRAPH_GIB_PER_CAPTURED_TOKEN if runner == "v1" else 0.0
        return RuntimeMemory(
            non_torch_gib=NON_TORCH_GIB,
            activations_gib=activations / GIB,
            sampler_gib=max_num_seqs * spec.vocab_size * per_logit / GIB,
            cuda_graphs_gib=graphs,
            runner=f"vLLM {runner.upper()} model runner",
        )

    def moe_kernel(self, spec: ModelSpec, fmt: str, hw: Hardware, tp: int = 1) -> MoeKernel | None:
        """Its tuned fused-MoE configuration or its default (``servelab.engines.vllm_moe``)."""
        return vllm_moe.moe_kernel(spec, fmt, hw, tp)

    def mla_heads(self, spec: ModelSpec, hw: Hardware, tp: int = 1) -> int:
        """FlashMLA's 64-head tile on Hopper (``servelab.engines.vllm_moe``)."""
        return vllm_moe.mla_heads(spec, hw, tp)

    def compute_peak(self, hw: Hardware, dtype: str, moe: bool) -> float | None:
        """FP8 (online ``--quantization fp8``: Fp8PerTensorOnlineLinearMethod, CUTLASS scaled_mm;
        vLLM 0.25) at ``FP8_GAIN`` × the BF16 peak, not the datasheet's 2 ×, and a MoE model's in
        FP8 at the BF16 peak (its experts run in the Triton fused-MoE kernel, which showed no gain:
        Mixtral-8x7B fp8 was closest at 1 ×, validation/RESULTS-predict.md); other dtypes at the datasheet peak."""
        bf16 = hw.peak_flops("bf16")
        if dtype != "fp8" or not bf16:
            return hw.peak_flops(dtype)
        return bf16 * (1.0 if moe else FP8_GAIN)

    def sustained_clock(self, hw: Hardware, dtype: str, moe: bool) -> float:
        """The power-capped clock for a dense model in BF16 or FP16 only. ``FP8_GAIN`` was measured on bursts
        (8,192-token steps), where the cap already acts; a MoE model's bursts were predicted within −8…+11 %
        without it (its experts run in the Triton fused-MoE kernel, below the dense GEMMs' power:
        validation/RESULTS-predict.md, "Bursts at the power cap")."""
        return hw.power_capped_clock if dtype in ("bf16", "fp16") and not moe else 1.0

    def eager_extra_s(self, dtype: str, layers: int) -> float:
        """``FP8_EAGER_LAYER_S`` per layer in FP8 (its activation-quantization kernels outside a CUDA graph), else 0."""
        return FP8_EAGER_LAYER_S * layers if dtype == "fp8" else 0.0

    def eager_host_s(self, spec: ModelSpec, fmt: str, hw: Hardware) -> tuple[float, float]:
        """(``EAGER_HOST_LAYER_S`` a layer, and that + ``EAGER_HOST_MOE_S`` a MoE layer + ``EAGER_HOST_MLA_S`` an MLA layer), in the
        formats measured (BF16, FP8 per tensor and per block; FP16 assumed as BF16) on the machines measured (Hopper: the lent
        H100 and H200 machines' Xeon hosts); 0 elsewhere (MXFP4, NVFP4, int4 run other MoE and linear kernels; other GPUs come
        with other hosts: a DGX Spark's is an ARM Grace)."""
        if fmt not in EAGER_HOST_MOE_S or hw.compute_capability != "9.0":
            return 0.0, 0.0
        layers = EAGER_HOST_LAYER_S * len(spec.layers)
        return layers, layers + EAGER_HOST_MOE_S[fmt] * spec.moe_layers + EAGER_HOST_MLA_S * spec.count("mla")

    def step_host_s(self, hw: Hardware) -> tuple[float, float, float]:
        """(``STEP_HOST_S``, ``STEP_HOST_SEQ_S``, ``HOST_QUEUE``) on the machines measured (Hopper: the lent H100 and H200 machines'
        Xeon hosts), else (0, 0, 0)."""
        return (STEP_HOST_S, STEP_HOST_SEQ_S, HOST_QUEUE) if hw.compute_capability == "9.0" else (0.0, 0.0, 0.0)

    def moe_layer_extra_s(self, dtype: str, hidden: int, width: int) -> float:
        """FP8: ``FP8_MOE_LAYER_S`` + ``FP8_MOE_READ_S`` × (⌈``hidden`` ÷ 256⌉ + ⌈``width`` ÷ 256⌉), else 0."""
        reads = math.ceil(hidden / FP8_QUANT_THREADS) + math.ceil(width / FP8_QUANT_THREADS)
        return FP8_MOE_LAYER_S + FP8_MOE_READ_S * reads if dtype == "fp8" else 0.0

    def model_capture_size(self, spec: ModelSpec) -> int | None:
        """``MODEL_LARGEST_CAPTURE`` for the model's family (its config's model_type)."""
        return MODEL_LARGEST_CAPTURE.get(spec.family)

    def capture_sizes(
        self, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, num_spec_tokens: int = 0, sm100: bool = False, largest: int | None = None
    ) -> list[int]:
        """:func:`default_capture_sizes`."""
        return default_capture_sizes(max_num_seqs, max_num_batched_tokens, num_spec_tokens, sm100, largest)

    def kv_layout(
        self, spec: ModelSpec, kv_bytes_per_token: float, state_bytes_per_seq: float, max_num_batched_tokens: int, speculative_tokens: int = 0,
        prefix_caching: bool = False, version: str | None = None, compute_capability: str | None = None,
    ) -> HybridLayout | None:  # fmt: skip
        """``servelab.engines.vllm_kv.hybrid_layout``."""
        return hybrid_layout(spec, kv_bytes_per_token, state_bytes_per_seq, max_num_batched_tokens, speculative_tokens, prefix_caching, version,
                             compute_capability)  # fmt: skip

    def planned_version(self, version: str | None) -> str:
        """``servelab.engines.vllm_kv.rules_for``: 0.19 for releases before 0.20, else 0.25."""
        return rules_for(version)[0]

    def kv_tokens(self, budget_bytes: float, per_token: float, layout: HybridLayout | None, context: int) -> int | None:
        """``servelab.engines.vllm_kv.kv_tokens``."""
        return kv_tokens(budget_bytes, per_token, layout, context)


ENGINE = VLLM()
