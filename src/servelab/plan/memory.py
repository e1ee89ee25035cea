"""Memory plan: weights, KV-cache budget, KV capacity and concurrency, per GPU (node).

Following vLLM's accounting (``vllm/v1/worker/gpu_worker.py``, ``vllm/v1/core/kv_cache_utils.py``),
with the batch defaults of the plan's engine (``servelab.engines.plan_engine``):

    budget = memory × gpu_memory_utilization − weights − runtime overhead
    KV capacity (tokens) = budget ÷ KV bytes per token, rounded down to whole 16-token blocks
    maximum concurrency at L = budget ÷ bytes of one L-token sequence

where a sequence's bytes are ``L ×`` (full-attention and MLA KV per token) ``+ min(L, window) ×``
(sliding-window KV per token) ``+`` the constant recurrent state of linear-attention / Mamba
layers (``ModelSpec.seq_bytes``).

Runtime overhead (overridable with ``overhead_gib``): the plan engine's
:meth:`~servelab.engines.base.Engine.runtime_memory` (vLLM 0.25: non-torch memory, the profiling
run's activations and dummy sampler, CUDA-graph memory; each term measured and sourced in
``servelab.engines.vllm``).

Hybrid models (attention + Gated DeltaNet or Mamba-2 layers; :func:`hybrid_layout`) follow vLLM
0.25's layout instead: one page size for every layer, blocks shared by groups of layers, and the
capacity it reports as (maximum concurrency × ``max_model_len``) tokens.

On a unified-memory machine the OS keeps part of the memory (``Hardware.os_reserved_gib``); a
``gpu_memory_utilization`` that asks for more than the rest is flagged.
Tensor parallel over ``tp`` GPUs divides weights, recurrent state and GQA KV heads (KV heads no
further than ``num_kv_heads``); the MLA latent cache is replicated on every rank (vLLM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from servelab.engines import plan_engine
from servelab.engines.base import RuntimeMemory
from servelab.plan.drafter import Drafter
from servelab.plan.hardware import GIB, Hardware
from servelab.plan.model_spec import ModelSpec
from servelab.plan.quant import QuantFormat, weight_bytes

BLOCK_TOKENS = 16


@dataclass
class HybridLayout:
    """vLLM's KV-cache layout of a hybrid model, per GPU (sizes in bytes, block size in tokens)."""

    block_size: int
    page_bytes: int
    state_bytes: int
    group_size: int
    attention_groups: int
    recurrent_groups: int
    padding_layers: int

    def blocks(self, budget_bytes: float) -> int:
        """Blocks the budget holds: every group shares one pool of ``group_size`` pages per block."""
        return int(budget_bytes // self.page_bytes // self.group_size)

    def blocks_per_request(self, context: int) -> int:
        """Blocks one request of ``context`` tokens takes: its attention blocks in each attention
        group, one state page in each recurrent group (prefix caching off: ``mamba_cache_mode`` none)."""
        return -(-context // self.block_size) * self.attention_groups + self.recurrent_groups

    def concurrency(self, budget_bytes: float, context: int) -> float:
        """Requests of ``context`` tokens the budget holds at once (vLLM's "Maximum concurrency")."""
        return self.blocks(budget_bytes) / self.blocks_per_request(context)


def kv_tokens(budget_bytes: float, per_token: float, layout: HybridLayout | None, context: int) -> int | None:
    """KV-cache tokens as vLLM 0.25 reports them for ``budget_bytes`` of KV memory: whole 16-token
    blocks of ``per_token`` bytes; for a hybrid, maximum concurrency × ``context`` (``get_kv_cache_capacity``).
    None when nothing grows with context."""
    if layout is not None:
        return int(layout.concurrency(budget_bytes, context) * context)
    return int(budget_bytes // (per_token * BLOCK_TOKENS)) * BLOCK_TOKENS if per_token else None


def hybrid_layout(spec: ModelSpec, kv_bytes_per_token: float, state_bytes_per_seq: float) -> HybridLayout | None:
    """The layout vLLM 0.25 gives a model with full-attention and recurrent (GDN, Mamba) layers.

    Sources (vLLM 0.25.0): ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``
    (attention block size = 16 · ⌈state page ÷ (16 · attention bytes per token)⌉, 16 the
    FlashAttention kernel alignment; the state page is padded up to the attention page) and
    ``vllm/v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size`` (layers of each
    type split into groups of ``group_size`` = the smaller type's layer count, or the larger one's when
    it is below 1.25 × the smaller; the last group padded), ``get_kv_cache_config_from_groups``
    (blocks = memory ÷ page ÷ group_size), ``get_max_concurrency_for_kv_cache_config`` and
    ``get_kv_cache_capacity`` (tokens = concurrency × ``max_model_len``).

    Args:
        kv_bytes_per_token: KV bytes per token of all attention layers on this GPU.
        state_bytes_per_seq: recurrent state of all recurrent layers per sequence on this GPU.

    Returns:
        None for a model without both kinds of layers (or with sliding-window layers: not modelled).
    """
    n_attn = spec.count("full")
    n_rec = spec.count("linear") + spec.count("mamba")
    if not n_attn or not n_rec or spec.count("sliding") or spec.count("mla") or not kv_bytes_per_token:
        return None
    attn_bytes_per_token, state_bytes = kv_bytes_per_token / n_attn, state_bytes_per_seq / n_rec  # one layer of each
    align = BLOCK_TOKENS
    block = align * math.ceil(state_bytes / (align * attn_bytes_per_token))
    small, large = min(n_attn, n_rec), max(n_attn, n_rec)
    group = large if large < 1.25 * small else small
    attn_groups, rec_groups = -(-n_attn // group), -(-n_rec // group)
    return HybridLayout(
        block_size=block, page_bytes=int(block * attn_bytes_per_token), state_bytes=int(state_bytes), group_size=group,
        attention_groups=attn_groups, recurrent_groups=rec_groups,
        padding_layers=attn_groups * group - n_attn + rec_groups * group - n_rec,
    )  # fmt: skip


@dataclass
class MemoryPlan:
    """The result, per GPU. Sizes in GiB unless the name says bytes; contexts and capacities in tokens."""

    weights_gib: float
    weights_total_gib: float
    kv_bytes_per_token: float
    state_bytes_per_seq: float
    usable_gib: float
    overhead_gib: float
    budget_gib: float
    kv_capacity_tokens: int | None
    max_model_len: int
    max_concurrency: float
    longest_context: dict[int, int]
    fits: bool
    layout: HybridLayout | None = None
    runtime: RuntimeMemory | None = None  # what overhead_gib is made of (None when the caller gave it)
    notes: list[str] = field(default_factory=list)


def plan_memory(
    spec: ModelSpec,
    fmt: QuantFormat,
    hw: Hardware,
    *,
    kv_dtype_bytes: float = 2.0,
    max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.9,
    tp: int = 1,
    concurrency: list[int] | None = None,
    overhead_gib: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    os_reserved_gib: float | None = None,
    drafter: Drafter | None = None,
) -> MemoryPlan:
    """Plan one model on one hardware profile (every GPU of a ``tp`` group alike).

    Args:
        max_model_len: context per request (default the model's ``max_position_embeddings``).
        concurrency: request counts for which the longest possible context is computed.
        overhead_gib: replaces the runtime-overhead estimate (GiB per GPU).
        drafter: a speculative drafter loaded beside the model: its weights and KV are added.

    Returns:
        A :class:`MemoryPlan`; ``fits`` is False when the weights leave no KV budget or not one
        ``max_model_len`` request fits.
    """
    notes: list[str] = []
    L = max_model_len or spec.max_position_embeddings or 4096
    mbt_default, seqs_default = plan_engine().batch_defaults(hw)
    mbt = max_num_batched_tokens or mbt_default
    seqs = max_num_seqs or seqs_default
    weights_total = (weight_bytes(spec, fmt) + (drafter.weight_bytes if drafter else 0.0)) / GIB
    weights = weights_total / tp
    runtime = plan_engine().runtime_memory(spec, mbt, seqs, tp) if overhead_gib is None else None
    if runtime is not None:
        overhead_gib = runtime.total_gib
    if drafter is not None:  # its attention layers join the KV cache (servelab.plan.drafter)
        spec = replace(spec, layers=[*spec.layers, *drafter.layers])
    usable = hw.memory_gib * gpu_memory_utilization
    reserved = hw.os_reserved_gib if os_reserved_gib is None else os_reserved_gib
    if hw.unified and usable > hw.memory_gib - reserved:
        safe = (hw.memory_gib - reserved) / hw.memory_gib
        notes.append(
            f"gpu_memory_utilization {gpu_memory_utilization} asks for {usable:.1f} GiB of unified memory, but the OS keeps "
            f"~{reserved:.0f} GiB: at most {safe:.2f} is safe"
        )
    budget = usable - weights - overhead_gib
    kv_shard = 1 if spec.count("mla") else min(tp, spec.num_kv_heads)
    per_token = (spec.kv_bytes_per_token(kv_dtype_bytes) + (drafter.kv_bytes_per_token if drafter else 0.0)) / kv_shard
    state = spec.state_bytes_per_seq() / tp

    def seq_bytes(context: int) -> float:
        sliding = spec.seq_bytes(context, kv_dtype_bytes) - context * spec.kv_bytes_per_token(kv_dtype_bytes) - spec.state_bytes_per_seq()
        return context * per_token + sliding / kv_shard + state

    budget_bytes = max(budget, 0.0) * GIB
    layout = hybrid_layout(spec, per_token, state)
    capacity = kv_tokens(budget_bytes, per_token, layout, L)
    if layout is not None:
        max_conc = layout.concurrency(budget_bytes, L)
    else:
        max_conc = budget_bytes / seq_bytes(L) if seq_bytes(L) else 0.0
    longest = {c: _longest(seq_bytes, budget_bytes / c, spec.max_position_embeddings or 10**7) for c in (concurrency or [])}
    if budget <= 0:
        notes.append(f"the weights ({weights:.1f} GiB per GPU) and runtime ({overhead_gib:.1f} GiB) exceed the {usable:.1f} GiB allowed")
    if spec.max_position_embeddings and L > spec.max_position_embeddings:
        notes.append(f"max_model_len {L} is above the model's max_position_embeddings {spec.max_position_embeddings}")
    return MemoryPlan(
        weights_gib=weights,
        weights_total_gib=weights_total,
        kv_bytes_per_token=per_token,
        state_bytes_per_seq=state,
        usable_gib=usable,
        overhead_gib=overhead_gib,
        budget_gib=budget,
        kv_capacity_tokens=capacity,
        max_model_len=L,
        max_concurrency=max_conc,
        longest_context=longest,
        fits=budget > 0 and max_conc >= 1,
        layout=layout,
        runtime=runtime,
        notes=notes,
    )


def _longest(seq_bytes, budget_bytes: float, limit: int) -> int:
    """Largest context L ≤ limit with seq_bytes(L) ≤ budget_bytes (binary search; 0 if none)."""
    lo, hi = 0, limit
    if seq_bytes(hi) <= budget_bytes:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if seq_bytes(mid) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
