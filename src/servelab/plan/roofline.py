"""Ceilings: the fastest a decode step or a prefill can be on given hardware (a roofline).

Decode step at batch B (sequences) and context L, per GPU of a ``tp`` group:

    time = max(bytes moved ÷ bandwidth, FLOPs ÷ peak)
    bytes = weights touched + B × cache bytes of one L-token sequence
    weights touched = every non-expert weight (the tied embedding counts as the LM head; the
                      input-embedding lookup reads B rows, ignored)
                      + MoE layers × E[distinct experts] × one expert's bytes
    E[distinct experts] = E · (1 − (1 − k/E)^(B^γ))   (B tokens, each routed to k of E experts; γ = 1:
                      uniformly, the default; γ < 1: tokens share experts as B^γ independent ones would,
                      ``servelab predict --routing γ``, 0.46 fitted on a published gpt-oss-120b DGX Spark
                      curve, validation/spark_published.py)
    a kernel that tiles each expert's tokens by M rows and reads a share s of the expert again from memory per
    further tile (``MoeKernel.tiles``: vLLM's fused MoE in its default configuration, its gate-up matrix) reads
    E[distinct experts] + s · E · Σ_{j≥1} P(n > j·M) experts, n ~ Binomial(B, k/E) the tokens one expert gets (:func:`expert_reads`)
    FLOPs = 2 · B · active parameters + attention: 4 · L_eff · heads · head_dim per attention
            layer per token (QKᵀ and AV; L_eff = min(L, window) on sliding layers; MLA decodes with
            its up-projections absorbed, attending in its latent space: 2 · L · heads · 2 · (kv_lora + rope),
            heads as the engine's kernel pads them, ``Engine.mla_heads``; its prefill takes the
            non-absorbed path, heads · (nope + rope) per query as full attention)

per-stream tok/s = 1 / time; aggregate tok/s = B / time. Prefill of P tokens: FLOPs =
2 · P · active + 2 · P² · heads · head_dim per full layer (causal half of 4·P²), bytes = all
weights touched by P tokens. The compute dtype follows the weights: fp8 formats use the fp8 peak,
nvfp4 the fp4 peak, everything else (BF16, weight-only int4, GGUF, and formats or checkpoints that
leave attention in BF16, as nvidia's Qwen3.5 NVFP4 exports and gpt-oss's MXFP4 do) the bf16 peak.

Speculative decoding with k draft tokens at acceptance rate a (accepted ÷ drafted tokens, as vLLM's
counters and ``servelab bench`` report it, docs/metrics.md): tokens per step 1 + k · a, the mean
acceptance length, by that definition; the verify step is priced as a decode step over B·(k+1)
tokens (weights read once). An MTP drafter's k passes each read its layer and the LM head
(:func:`mtp_pass_bytes`); ``servelab predict`` adds them, the ceilings here leave them out.
Interconnect time under tensor parallelism is not modelled: TP ceilings are optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from servelab.plan.quant import QuantFormat, weight_bytes
from servelab.values.specs import Hardware, ModelSpec

NON_EXPERT = ("attn", "recurrent", "mlp", "shared", "router", "norms", "lm_head")


def compute_dtype(fmt: QuantFormat) -> str:
    """Tensor-core dtype the format computes in (see the module docstring)."""
    if fmt.kept.get("attn", 0.0) >= 0.5:  # a checkpoint that keeps attention (most active FLOPs beside the experts) in BF16
        return "bf16"
    if fmt.name.startswith(("fp8", "mxfp8")):
        return "fp8"
    if fmt.name == "nvfp4":
        return "fp4"
    return "bf16"


def expected_experts(num_experts: int, top_k: int, tokens: int, routing: float = 1.0) -> float:
    """Expected number of distinct experts ``tokens`` tokens activate in one MoE layer: uniform
    routing at ``routing`` 1, tokens that share experts as ``tokens ** routing`` independent ones
    below 1 (module docstring)."""
    if not num_experts:
        return 0.0
    return num_experts * (1 - (1 - top_k / num_experts) ** (max(tokens, 1) ** routing))


@lru_cache(maxsize=4096)
def expert_reads(num_experts: int, top_k: int, tokens: int, routing: float = 1.0, tile_m: int = 0, share: float = 1.0) -> float:
    """Expected reads of one MoE layer's expert weights (in experts) by a step over ``tokens`` tokens: the distinct
    experts reached (:func:`expected_experts`, with ``routing`` γ), and with ``tile_m`` > 0, ``share`` of an expert read again per
    further tile of ``tile_m`` of its tokens: share · E · Σ_{j≥1} P(n > j · tile_m), n ~ Binomial(tokens, k/E), uniform routing
    whatever γ (module docstring; where a kernel does so and what share, the engine's ``MoeKernel.tiles``). vLLM's routing
    simulator, which dummy-weight runs use, draws a token's k experts with replacement, n ~ Binomial(tokens · k, 1/E): at 32 tokens
    of FlexOlmo's (k 5 of 7) P(n > 16) is 0.93 against 0.99 here."""
    reached = expected_experts(num_experts, top_k, tokens, routing)
    if not tile_m or not share or not top_k or tokens <= tile_m:
        return reached
    p = min(top_k / num_experts, 1.0)
    if p == 1.0:  # every expert takes every token
        return reached + share * num_experts * ((tokens - 1) // tile_m)
    log_c, log_p, log_q = math.lgamma(tokens + 1), math.log(p), math.log1p(-p)

    def pmf(n: int) -> float:
        return math.exp(log_c - math.lgamma(n + 1) - math.lgamma(tokens - n + 1) + n * log_p + (tokens - n) * log_q)

    return reached + share * num_experts * sum(pmf(n) * ((n - 1) // tile_m) for n in range(tile_m + 1, tokens + 1))


def expert_flops(spec: ModelSpec, tokens: int) -> float:
    """FLOPs (whole model, all ranks) of the routed experts' matrix products over ``tokens`` tokens: each
    token through its top-k experts in every MoE layer (shared experts are dense layers, not counted)."""
    return 2.0 * tokens * spec.moe_layers * spec.experts_per_token * spec.expert_params


@dataclass(frozen=True)
class StepCost:
    """One step's cost on one GPU: seconds, bytes moved, FLOPs, and which bound set the time."""

    time_s: float
    bytes: float
    flops: float
    bound: str


def _attention_flops_per_token(spec: ModelSpec, context: int, mla_heads: int | None = None) -> float:
    heads_dim = spec.num_heads * spec.head_dim
    window = min(context, spec.sliding_window or context)
    mla = spec.count("mla") * 2 * context * (mla_heads or spec.num_heads) * (2 * spec.mla_latent)
    return 4 * heads_dim * (spec.count("full") * context + spec.count("sliding") * window) + mla


def _cost(bytes_: float, flops: float, hw: Hardware, dtype: str, tp: int) -> StepCost:
    t_mem = bytes_ / tp / (hw.bandwidth_gbs * 1e9)
    peak = hw.peak_flops(dtype)
    t_compute = flops / tp / peak if peak else 0.0
    bound = "compute" if t_compute > t_mem else "memory"
    return StepCost(max(t_mem, t_compute), bytes_ / tp, flops / tp, bound)


def weights_touched(spec: ModelSpec, fmt: QuantFormat, tokens: int, routing: float = 1.0, tile: tuple[int, float] = (0, 0.0)) -> float:
    """Bytes of weights (whole model, all ranks) one decode step over ``tokens`` tokens reads: every
    non-expert weight (the tied embedding as the LM head) and, per MoE layer, the expected distinct
    experts those tokens reach (module docstring; ``routing`` γ), ``tile`` (M rows, share s) a share s of one read again
    per further tile of M tokens an expert gets (:func:`expert_reads`; M 0: once)."""
    dense = weight_bytes(spec, fmt, NON_EXPERT) + (weight_bytes(spec, fmt, ("embed",)) if spec.tied_embeddings else 0)
    per_expert = spec.expert_params * fmt.bits_for("experts") / 8
    return dense + spec.moe_layers * expert_reads(spec.num_experts, spec.experts_per_token, tokens, routing, *tile) * per_expert


def decode_step(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, batch: int, context: int, kv_dtype_bytes: float = 2.0,
    tp: int = 1, tokens_per_seq: int = 1, routing: float = 1.0, mla_heads: int | None = None,
) -> StepCost:  # fmt: skip
    """Cost of one decode step of ``batch`` sequences at ``context`` tokens (``tokens_per_seq`` > 1
    for a speculative verify step; ``routing`` γ of the MoE experts reached; ``mla_heads``: the query
    heads an MLA decode kernel computes, padded, ``Engine.mla_heads``; default the model's)."""
    tokens = batch * tokens_per_seq
    kv = batch * spec.seq_bytes(context, kv_dtype_bytes)
    flops = tokens * (2 * spec.active_params + _attention_flops_per_token(spec, context, mla_heads))
    return _cost(weights_touched(spec, fmt, tokens, routing) + kv, flops, hw, compute_dtype(fmt), tp)


def prefill(spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, tokens: int, tp: int = 1) -> StepCost:
    """Cost of prefilling one ``tokens``-long prompt with an empty cache."""
    dense = weight_bytes(spec, fmt, NON_EXPERT) + (weight_bytes(spec, fmt, ("embed",)) if spec.tied_embeddings else 0)
    per_expert = spec.expert_params * fmt.bits_for("experts") / 8
    experts = spec.moe_layers * expected_experts(spec.num_experts, spec.experts_per_token, tokens) * per_expert
    attn = (spec.count("full") + spec.count("mla")) * 2 * tokens**2 * spec.num_heads * spec.head_dim
    window = min(tokens, spec.sliding_window or tokens)
    attn += spec.count("sliding") * 4 * tokens * window * spec.num_heads * spec.head_dim
    flops = 2 * tokens * spec.active_params + attn
    return _cost(dense + experts, flops, hw, compute_dtype(fmt), tp)


def spec_tokens_per_step(rate: float, k: int) -> float:
    """Tokens per verify step (the mean acceptance length) with ``k`` draft tokens at acceptance
    rate ``rate`` = accepted ÷ drafted tokens (vLLM's ``spec_decode_num_accepted_tokens`` ÷
    ``…num_draft_tokens``): 1 + k · rate, the bonus token included (docs/metrics.md). The DGX
    Spark report's MTP-2 figures fit it: 63–100 % acceptance, 23.7–31.0 tok/s, the same ~96 ms a step."""
    return 1.0 + max(k, 0) * min(max(rate, 0.0), 1.0)


def mtp_pass_bytes(spec: ModelSpec, tokens: int, routing: float = 1.0) -> float:
    """Bytes (whole model) one MTP draft pass over ``tokens`` tokens reads: the MTP module in BF16
    (its projections and norms, its decoder layer's attention and shared expert, and on a MoE model
    the distinct experts the tokens reach, :func:`expected_experts`) and the LM head it shares with
    the target (BF16 in every published checkpoint). vLLM drafts K tokens as K such passes, each
    ending in the head's logits (vllm/v1/spec_decode/eagle.py ``propose``, MTP modules of
    vllm/model_executor/models/qwen3_next_mtp.py, deepseek_mtp.py). Qwen3.5-122B-A10B: 1.53 GB of
    head and 0.37 GB of layer per pass, ~7.4 ms at 254 GB/s on GB10, two passes in MTP-2."""
    layers = spec.mtp_layers
    if not layers:
        return 0.0
    experts = spec.num_experts * spec.expert_params * layers
    reached = layers * expected_experts(spec.num_experts, spec.experts_per_token, tokens, routing) * spec.expert_params
    head = spec.params["lm_head"] or spec.params["embed"]
    return 2.0 * (spec.params["mtp"] - experts + reached + head)


def decode_ceiling(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, batch: int, context: int, kv_dtype_bytes: float = 2.0,
    tp: int = 1, draft_tokens: int = 0, acceptance: float = 0.0,
) -> tuple[float, float, StepCost]:  # fmt: skip
    """(per-stream tok/s, aggregate tok/s, step cost) at the ceiling, with optional speculative decoding."""
    step = decode_step(spec, fmt, hw, batch=batch, context=context, kv_dtype_bytes=kv_dtype_bytes, tp=tp, tokens_per_seq=1 + draft_tokens)
    per_step = spec_tokens_per_step(acceptance, draft_tokens)
    per_stream = per_step / step.time_s
    return per_stream, per_stream * batch, step


def allreduce_s(spec: ModelSpec, hw: Hardware, tokens: int, tp: int) -> float:
    """Time of one step's tensor-parallel all-reduces over ``tokens`` tokens: two per layer (after
    attention and after the MLP, vLLM's RowParallelLinear; vidur prices ``2 · TP_allreduce`` per
    layer the same way), each the ring all-reduce's 2 · (tp − 1) ÷ tp of the BF16 activations
    (tokens × hidden × 2 B) over the interconnect plus a fixed latency (``Hardware.allreduce_latency_us``,
    an estimate). 0 at TP 1; not measured against a run yet."""
    if tp <= 1:
        return 0.0
    bw = (hw.interconnect_gbs or hw.bandwidth_gbs) * 1e9
    per = hw.allreduce_latency_us / 1e6 + 2 * (tp - 1) / tp * tokens * spec.hidden_size * 2 / bw
    return 2 * len(spec.layers) * per
