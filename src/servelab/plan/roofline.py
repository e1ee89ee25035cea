"""Ceilings: the fastest a decode step or a prefill can be on given hardware (a roofline).

Decode step at batch B (sequences) and context L, per GPU of a ``tp`` group:

    time = max(bytes moved ÷ bandwidth, FLOPs ÷ peak)
    bytes = weights touched + B × cache bytes of one L-token sequence
    weights touched = every non-expert weight (the tied embedding counts as the LM head; the
                      input-embedding lookup reads B rows, ignored)
                      + MoE layers × E[distinct experts] × one expert's bytes
    E[distinct experts] = E · (1 − (1 − k/E)^(B^γ))   (B tokens, each routed to k of E experts; γ = 1:
                      uniformly, the default; γ < 1: tokens share experts as B^γ independent ones would,
                      ``servelab predict --routing γ``, 0.5 fitted on published gpt-oss-120b DGX Spark
                      runs, validation/RESULTS-predict.md)
    FLOPs = 2 · B · active parameters + attention: 4 · L_eff · heads · head_dim per attention
            layer per token (QKᵀ and AV; L_eff = min(L, window) on sliding layers; MLA attends in
            its latent space, 2 · L · heads · (2·kv_lora + rope))

per-stream tok/s = 1 / time; aggregate tok/s = B / time. Prefill of P tokens: FLOPs =
2 · P · active + 2 · P² · heads · head_dim per full layer (causal half of 4·P²), bytes = all
weights touched by P tokens. The compute dtype follows the weights: fp8 formats use the fp8 peak,
nvfp4 the fp4 peak, everything else (BF16, weight-only int4, GGUF) the bf16 peak.

Speculative decoding with k draft tokens at per-token acceptance α: tokens per step
``(1 − α^(k+1)) / (1 − α)`` (Leviathan et al., 2023, "Fast Inference from Transformers via
Speculative Decoding", eq. 1); the verify step is priced as a decode step over B·(k+1) tokens
(weights read once), the drafter's own cost is left out (an MTP head is one layer).
Interconnect time under tensor parallelism is not modelled: TP ceilings are optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.plan.quant import QuantFormat, weight_bytes
from servelab.specs import Hardware, ModelSpec

NON_EXPERT = ("attn", "recurrent", "mlp", "shared", "router", "norms", "lm_head")


def compute_dtype(fmt: QuantFormat) -> str:
    """Tensor-core dtype the format computes in (see the module docstring)."""
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


@dataclass(frozen=True)
class StepCost:
    """One step's cost on one GPU: seconds, bytes moved, FLOPs, and which bound set the time."""

    time_s: float
    bytes: float
    flops: float
    bound: str


def _attention_flops_per_token(spec: ModelSpec, context: int) -> float:
    heads_dim = spec.num_heads * spec.head_dim
    window = min(context, spec.sliding_window or context)
    mla = spec.count("mla") * 2 * context * spec.num_heads * (2 * spec.mla_latent)
    return 4 * heads_dim * (spec.count("full") * context + spec.count("sliding") * window) + mla


def _cost(bytes_: float, flops: float, hw: Hardware, dtype: str, tp: int) -> StepCost:
    t_mem = bytes_ / tp / (hw.bandwidth_gbs * 1e9)
    peak = hw.peak_flops(dtype)
    t_compute = flops / tp / peak if peak else 0.0
    bound = "compute" if t_compute > t_mem else "memory"
    return StepCost(max(t_mem, t_compute), bytes_ / tp, flops / tp, bound)


def weights_touched(spec: ModelSpec, fmt: QuantFormat, tokens: int, routing: float = 1.0) -> float:
    """Bytes of weights (whole model, all ranks) one decode step over ``tokens`` tokens reads: every
    non-expert weight (the tied embedding as the LM head) and, per MoE layer, the expected distinct
    experts those tokens reach (module docstring; ``routing`` γ)."""
    dense = weight_bytes(spec, fmt, NON_EXPERT) + (weight_bytes(spec, fmt, ("embed",)) if spec.tied_embeddings else 0)
    per_expert = spec.expert_params * fmt.bits_for("experts") / 8
    return dense + spec.moe_layers * expected_experts(spec.num_experts, spec.experts_per_token, tokens, routing) * per_expert


def decode_step(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, batch: int, context: int, kv_dtype_bytes: float = 2.0,
    tp: int = 1, tokens_per_seq: int = 1, routing: float = 1.0,
) -> StepCost:  # fmt: skip
    """Cost of one decode step of ``batch`` sequences at ``context`` tokens (``tokens_per_seq`` > 1
    for a speculative verify step; ``routing`` γ of the MoE experts reached)."""
    tokens = batch * tokens_per_seq
    kv = batch * spec.seq_bytes(context, kv_dtype_bytes)
    flops = tokens * (2 * spec.active_params + _attention_flops_per_token(spec, context))
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


def spec_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens per verify step with k draft tokens at acceptance α (Leviathan et al. 2023, eq. 1)."""
    if k <= 0:
        return 1.0
    if alpha >= 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def decode_ceiling(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, batch: int, context: int, kv_dtype_bytes: float = 2.0,
    tp: int = 1, draft_tokens: int = 0, acceptance: float = 0.0,
) -> tuple[float, float, StepCost]:  # fmt: skip
    """(per-stream tok/s, aggregate tok/s, step cost) at the ceiling, with optional speculative decoding."""
    step = decode_step(spec, fmt, hw, batch=batch, context=context, kv_dtype_bytes=kv_dtype_bytes, tp=tp, tokens_per_seq=1 + draft_tokens)
    per_step = spec_tokens_per_step(acceptance, draft_tokens)
    per_stream = per_step / step.time_s
    return per_stream, per_stream * batch, step
