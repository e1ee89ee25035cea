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

Hybrid models (full attention beside sliding-window, Gated DeltaNet or Mamba-2 layers;
:func:`hybrid_layout`) follow vLLM 0.25's layout instead: one page size for every layer, blocks
shared by groups of layers, a sliding-window layer holding its window plus one prefill chunk, and
the capacity reported as (maximum concurrency × ``max_model_len``) tokens.

On a unified-memory machine the OS keeps part of the memory (``Hardware.os_reserved_gib``): without
a ``gpu_memory_utilization`` the plan takes the engine's default capped at what the OS leaves (vLLM's
0.92 does not start on a DGX Spark), and one that asks for more is flagged. There vLLM also counts
the page cache and compiler heap of its own start as non-torch memory, so the KV budget of
identical boots varies by GiBs (tests/fixtures/gb10/memory-reports.yaml): the plan says so.
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
    """vLLM's KV-cache layout of a model with more than one kind of cache layer (full attention
    with sliding-window attention and/or recurrent layers), per GPU (sizes in bytes, block size
    and window in tokens)."""

    block_size: int
    page_bytes: int
    state_bytes: int  # one recurrent layer's state, padded up to page_bytes (0: no recurrent layers)
    group_size: int
    attention_groups: int  # full-attention groups
    recurrent_groups: int
    padding_layers: int
    sliding_groups: int = 0
    sliding_window: int = 0
    max_num_batched_tokens: int = 0
    speculative_blocks: int = 0  # extra state pages per recurrent group and request with speculative decoding
    mamba_cache_mode: str = "none"  # vLLM's: none (prefix caching off), align (on; GDN), all (on; Mamba-2 hybrids)

    def blocks(self, budget_bytes: float) -> int:
        """Blocks the budget holds: every group shares one pool of ``group_size`` pages per block."""
        return int(budget_bytes // self.page_bytes // self.group_size)

    def sliding_blocks(self, context: int) -> int:
        """Blocks one request holds at most in a sliding-window group: its window plus one chunk of
        prefill, ⌈min(window − 1 + max_num_batched_tokens, context) ÷ block⌉ + 1 (vLLM 0.25
        ``SlidingWindowSpec.max_admission_blocks_per_request``: the +1 for a window that does not
        start on a block boundary)."""
        window = self.sliding_window or context
        return -(-min(window - 1 + self.max_num_batched_tokens, context) // self.block_size) + 1

    def blocks_per_request(self, context: int) -> int:
        """Blocks one request of ``context`` tokens takes: its attention blocks in each full-attention
        group, :meth:`sliding_blocks` in each sliding-window group, and in each recurrent group
        ``speculative_blocks`` state pages plus 1 (prefix caching off: ``mamba_cache_mode`` none), 2
        (``align``) or one per block of context (``all``) (vLLM 0.25 ``MambaSpec.max_memory_usage_bytes``,
        ``num_speculative_blocks`` = the speculative tokens)."""
        full = -(-context // self.block_size) * self.attention_groups
        sliding = self.sliding_blocks(context) * self.sliding_groups if self.sliding_groups else 0
        state = {"none": 1, "align": 2, "all": -(-context // self.block_size)}[self.mamba_cache_mode]
        return full + sliding + self.recurrent_groups * (state + self.speculative_blocks)

    def request_bytes(self, context: int) -> int:
        """Bytes of KV memory one request of ``context`` tokens takes (its blocks × a block's pages)."""
        return self.blocks_per_request(context) * self.page_bytes * self.group_size

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


def hybrid_layout(
    spec: ModelSpec, kv_bytes_per_token: float, state_bytes_per_seq: float, max_num_batched_tokens: int, speculative_tokens: int = 0,
    prefix_caching: bool = False,
) -> HybridLayout | None:
    """The layout vLLM 0.25 gives a model whose full-attention layers sit beside sliding-window
    layers (Gemma 3, gpt-oss) and/or recurrent ones (Gated DeltaNet, Mamba-2).

    Sources (vLLM 0.25.0): ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``
    (with recurrent layers: attention block size = 16 · ⌈state page ÷ (16 · attention bytes per
    token)⌉, 16 the FlashAttention kernel alignment; the state page is padded up to the attention
    page; otherwise 16) and ``vllm/v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size``
    (layers of each kind split into groups of ``group_size`` = the smallest kind's layer count, or
    the largest one's when it is below 1.5 × the smallest; the last group of a kind padded),
    ``get_kv_cache_config_from_groups`` (blocks = memory ÷ page ÷ group_size),
    ``get_max_concurrency_for_kv_cache_config`` (blocks ÷ the blocks a request takes in every group,
    ``vllm/v1/kv_cache_interface.py`` ``max_memory_usage_bytes`` of each spec) and
    ``get_kv_cache_capacity`` (tokens = concurrency × ``max_model_len``).

    Args:
        kv_bytes_per_token: KV bytes per token of all full-attention layers on this GPU (a
            sliding-window layer's page is taken to be a full-attention layer's: same KV shape).
        state_bytes_per_seq: recurrent state of all recurrent layers per sequence on this GPU.
        max_num_batched_tokens: the prefill chunk a sliding-window layer holds beside its window.
        speculative_tokens: draft tokens per step; a recurrent layer keeps a state page for each.
        prefix_caching: vLLM's ``--enable-prefix-caching`` (off by default for these models): the
            recurrent state is cached per block, ``mamba_cache_mode`` ``all`` for models whose
            Mamba layers support it (Mamba-2 hybrids: NemotronH, Jamba, Zamba2, GraniteMoeHybrid,
            FalconH1; ``SupportsMambaPrefixCaching``), with the block size a multiple of the scan chunk
            (``lcm(chunk, 16) · ⌈state tokens ÷ that⌉``), else ``align`` (two state pages per request;
            ``vllm/model_executor/models/config.py`` ``MambaModelConfig``, ``vllm/platforms/interface.py``).

    Returns:
        None for a model with one kind of cache layer, without full-attention layers, or with MLA
        (not modelled: the dense formula applies).
    """
    n_attn, n_sliding = spec.count("full"), spec.count("sliding")
    n_rec = spec.count("linear") + spec.count("mamba")
    counts = [n for n in (n_attn, n_sliding, n_rec) if n]
    if not n_attn or len(counts) < 2 or spec.count("mla") or not kv_bytes_per_token:
        return None
    attn_bytes_per_token = kv_bytes_per_token / n_attn  # one layer
    state_bytes = state_bytes_per_seq / n_rec if n_rec else 0.0
    mode = ("all" if spec.count("mamba") and not spec.count("linear") else "align") if prefix_caching and n_rec else "none"
    if mode == "all":
        chunk = math.lcm(spec.mamba_chunk_size or 2048, BLOCK_TOKENS)  # 2048: vLLM's default for a model without a chunk size
        block = chunk * max(1, math.ceil(math.ceil(state_bytes / attn_bytes_per_token) / chunk))
    else:
        block = BLOCK_TOKENS * max(1, math.ceil(state_bytes / (BLOCK_TOKENS * attn_bytes_per_token)))
    small, large = min(counts), max(counts)
    group = large if large < 1.5 * small else small
    groups = [-(-n // group) for n in (n_attn, n_sliding, n_rec)]
    return HybridLayout(
        block_size=block, page_bytes=int(block * attn_bytes_per_token), state_bytes=int(state_bytes), group_size=group,
        attention_groups=groups[0], sliding_groups=groups[1], recurrent_groups=groups[2],
        padding_layers=sum(g * group for g in groups) - sum(counts),
        sliding_window=(spec.sliding_window or 0) if n_sliding else 0, max_num_batched_tokens=max_num_batched_tokens if n_sliding else 0,
        speculative_blocks=speculative_tokens if n_rec else 0, mamba_cache_mode=mode,
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
    gpu_memory_utilization: float
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
    gpu_memory_utilization: float | None = None,
    tp: int = 1,
    concurrency: list[int] | None = None,
    overhead_gib: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    os_reserved_gib: float | None = None,
    drafter: Drafter | None = None,
    prefix_caching: bool = False,
) -> MemoryPlan:
    """Plan one model on one hardware profile (every GPU of a ``tp`` group alike).

    Args:
        max_model_len: context per request (default the model's ``max_position_embeddings``).
        gpu_memory_utilization: memory share (default the plan engine's, capped on unified memory,
            see the module docstring).
        concurrency: request counts for which the longest possible context is computed.
        overhead_gib: replaces the runtime-overhead estimate (GiB per GPU).
        drafter: a speculative drafter loaded beside the model: its weights and KV are added.
        prefix_caching: the server caches prefixes (``--enable-prefix-caching``): a hybrid keeps
            more recurrent state per request (:func:`hybrid_layout`).

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
    reserved = hw.os_reserved_gib if os_reserved_gib is None else os_reserved_gib
    safe = hw.safe_utilization(reserved)
    if gpu_memory_utilization is None:
        default = plan_engine().gpu_memory_utilization_default or 0.9
        gpu_memory_utilization = min(default, safe)
        if gpu_memory_utilization < default:
            notes.append(f"gpu_memory_utilization planned at {safe:.2f}, not {plan_engine().title}'s default {default}: on {hw.name} "
                         f"the OS keeps ~{reserved:g} GiB of the unified memory, and the default does not start")  # fmt: skip
    elif gpu_memory_utilization > safe:
        notes.append(
            f"gpu_memory_utilization {gpu_memory_utilization} asks for {hw.memory_gib * gpu_memory_utilization:.1f} GiB of unified memory, "
            f"but the OS keeps ~{reserved:g} GiB: the engine may refuse to start (free memory below its share) or the host swaps; at most {safe:.2f} is safe"
        )
    if hw.unified:
        notes.append("unified memory: the engine counts the OS page cache and its own compiler heap at start as its overhead, so the KV "
                     "budget of identical boots differs by 1–5 GiB there (public GB10 reports): read the KV figures as ± that")  # fmt: skip
    usable = hw.memory_gib * gpu_memory_utilization
    budget = usable - weights - overhead_gib
    kv_shard = 1 if spec.count("mla") else min(tp, spec.num_kv_heads)
    per_token = (spec.kv_bytes_per_token(kv_dtype_bytes) + (drafter.kv_bytes_per_token if drafter else 0.0)) / kv_shard
    state = spec.state_bytes_per_seq() / tp

    def seq_bytes(context: int) -> float:
        sliding = spec.seq_bytes(context, kv_dtype_bytes) - context * spec.kv_bytes_per_token(kv_dtype_bytes) - spec.state_bytes_per_seq()
        return context * per_token + sliding / kv_shard + state

    budget_bytes = max(budget, 0.0) * GIB
    layout = hybrid_layout(spec, per_token, state, mbt, drafter.num_tokens if drafter else 0, prefix_caching)
    capacity = kv_tokens(budget_bytes, per_token, layout, L)
    if layout is not None:
        max_conc = layout.concurrency(budget_bytes, L)
        request_bytes = layout.request_bytes
    else:
        max_conc = budget_bytes / seq_bytes(L) if seq_bytes(L) else 0.0
        request_bytes = seq_bytes
    longest = {c: _longest(request_bytes, budget_bytes / c, spec.max_position_embeddings or 10**7) for c in (concurrency or [])}
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
        gpu_memory_utilization=gpu_memory_utilization,
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
