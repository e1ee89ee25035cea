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

Hybrid models (full attention beside sliding-window, Gated DeltaNet or Mamba-2 layers) follow the
plan engine's layout instead (:meth:`~servelab.engines.base.Engine.kv_layout`; vLLM 0.25:
``servelab.engines.vllm_kv.hybrid_layout``): one page size for every layer, blocks
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

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from servelab.engines import plan_engine
from servelab.engines.base import RuntimeMemory
from servelab.errors import ServelabError
from servelab.plan.drafter import Drafter
from servelab.plan.quant import QuantFormat, weight_bytes
from servelab.values.specs import GIB, Hardware, ModelSpec

if TYPE_CHECKING:
    from servelab.engines.kv_layout import HybridLayout

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


def tp_heads_problem(spec: ModelSpec, tp: int) -> str | None:
    """What is wrong with splitting the model's attention heads over ``tp`` ranks, or None: vLLM refuses
    a tensor-parallel size that does not divide them before it starts (vllm/config/model.py,
    ``ModelConfig.verify_with_parallel_config``: "Total number of attention heads … must be divisible
    by tensor parallel size")."""
    if not spec.num_heads % tp:
        return None
    fits = ", ".join(str(d) for d in range(1, min(spec.num_heads, 16) + 1) if spec.num_heads % d == 0)
    return (f"{spec.name} has {spec.num_heads} attention heads, which must be divisible by the tensor-parallel size "
            f"(vLLM refuses to start otherwise); TP sizes that divide them: {fits}")  # fmt: skip


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
    checkpoint_bytes: float | None = None,
    engine_version: str | None = None,
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
            more recurrent state per request (the engine's ``kv_layout``).
        checkpoint_bytes: the model's weights as its safetensors headers give them (bytes, all
            ranks; ``servelab.plan.tensors``), used instead of the formula's.
        engine_version: the engine release planned (vLLM: ``servelab.engines.vllm_kv.rules_for``).

    Returns:
        A :class:`MemoryPlan`; ``fits`` is False when the weights leave no KV budget or not one
        ``max_model_len`` request fits.

    Raises:
        ServelabError: ``tp`` does not divide the attention heads (every plan and prediction of a
            model at a TP size passes here: ``servelab plan``, ``predict``, ``explain``, ``capacity``).
    """
    if problem := tp_heads_problem(spec, tp):
        raise ServelabError(f"--tp {tp}: {problem}")
    notes: list[str] = []
    engine = plan_engine()
    L = max_model_len or spec.max_position_embeddings or 4096
    mbt_default, seqs_default = engine.batch_defaults(hw)
    mbt = max_num_batched_tokens or mbt_default
    seqs = max_num_seqs or seqs_default
    model_bytes = weight_bytes(spec, fmt) if checkpoint_bytes is None else checkpoint_bytes
    weights_total = (model_bytes + (drafter.weight_bytes if drafter else 0.0)) / GIB
    weights = weights_total / tp
    runtime = engine.runtime_memory(spec, mbt, seqs, tp) if overhead_gib is None else None
    if runtime is not None:
        overhead_gib = runtime.total_gib
    if drafter is not None:  # its attention layers join the KV cache (servelab.plan.drafter)
        spec = replace(spec, layers=[*spec.layers, *drafter.layers])
    gpu_memory_utilization, shared_notes = _utilization(hw, gpu_memory_utilization, os_reserved_gib)
    notes += shared_notes
    usable = hw.memory_gib * gpu_memory_utilization
    budget = usable - weights - overhead_gib
    kv = _kv_cache(spec, hw, max(budget, 0.0) * GIB, kv_dtype_bytes, tp, L, mbt, drafter, prefix_caching, engine_version, concurrency or [])
    per_token, state, layout, capacity, max_conc, longest = kv
    if budget <= 0:
        notes.append(f"the weights ({weights:.1f} GiB per GPU) and runtime ({overhead_gib:.1f} GiB) exceed the {usable:.1f} GiB allowed")
    if spec.max_position_embeddings and L > spec.max_position_embeddings:
        notes.append(f"max_model_len {L} is above the model's max_position_embeddings {spec.max_position_embeddings}")
    return MemoryPlan(
        weights_gib=weights, weights_total_gib=weights_total, kv_bytes_per_token=per_token, state_bytes_per_seq=state, usable_gib=usable,
        overhead_gib=overhead_gib, budget_gib=budget, kv_capacity_tokens=capacity, max_model_len=L, gpu_memory_utilization=gpu_memory_utilization,
        max_concurrency=max_conc, longest_context=longest, fits=budget > 0 and max_conc >= 1, layout=layout, runtime=runtime, notes=notes,
    )  # fmt: skip


def _kv_cache(spec: ModelSpec, hw: Hardware, budget_bytes: float, kv_dtype_bytes: float, tp: int, L: int, mbt: int, drafter: Drafter | None,
              prefix_caching: bool, engine_version: str | None, concurrency: list[int]) -> tuple:  # fmt: skip
    """The KV cache a budget of ``budget_bytes`` per GPU holds: (bytes per token, recurrent state
    bytes per request, the engine's hybrid layout or None, the tokens it reports, requests of ``L``
    tokens at once, the longest context at each of ``concurrency``). KV heads are sharded over ``tp``
    (an MLA latent is not: every rank holds it whole)."""
    engine = plan_engine()
    kv_shard = 1 if spec.count("mla") else min(tp, spec.num_kv_heads)
    per_token = (spec.kv_bytes_per_token(kv_dtype_bytes) + (drafter.kv_bytes_per_token if drafter else 0.0)) / kv_shard
    state = spec.state_bytes_per_seq() / tp

    def seq_bytes(context: int) -> float:
        sliding = spec.seq_bytes(context, kv_dtype_bytes) - context * spec.kv_bytes_per_token(kv_dtype_bytes) - spec.state_bytes_per_seq()
        return context * per_token + sliding / kv_shard + state

    layout = engine.kv_layout(spec, per_token, state, mbt, drafter.num_tokens if drafter else 0, prefix_caching, engine_version, hw.compute_capability)
    capacity = engine.kv_tokens(budget_bytes, per_token, layout, L)
    if layout is not None:
        max_conc = layout.concurrency(budget_bytes, L)
        request_bytes = layout.request_bytes
    else:
        max_conc = budget_bytes / seq_bytes(L) if seq_bytes(L) else 0.0
        request_bytes = seq_bytes
    longest = {c: _longest(request_bytes, budget_bytes / c, spec.max_position_embeddings or 10**7) for c in (concurrency or [])}
    return per_token, state, layout, capacity, max_conc, longest


def _utilization(hw: Hardware, gpu_memory_utilization: float | None, os_reserved_gib: float | None) -> tuple[float, list[str]]:
    """The memory share planned (the plan engine's default capped at what the OS of a unified-memory
    profile leaves, or the one given) and what the user should know of it: a cap, a share the engine
    may refuse, unified memory's 1–5 GiB of boot-to-boot noise."""
    engine = plan_engine()
    notes = []
    reserved = hw.os_reserved_gib if os_reserved_gib is None else os_reserved_gib
    safe = hw.safe_utilization(reserved)
    if gpu_memory_utilization is None:
        default = engine.gpu_memory_utilization_default or 0.9
        gpu_memory_utilization = min(default, safe)
        if gpu_memory_utilization < default:
            notes.append(f"gpu_memory_utilization planned at {safe:.2f}, not {engine.title}'s default {default}: on {hw.name} "
                         f"the OS keeps ~{reserved:g} GiB of the unified memory, and the default does not start")  # fmt: skip
    elif gpu_memory_utilization > safe:
        notes.append(
            f"gpu_memory_utilization {gpu_memory_utilization} asks for {hw.memory_gib * gpu_memory_utilization:.1f} GiB of unified memory, "
            f"but the OS keeps ~{reserved:g} GiB: the engine may refuse to start (free memory below its share) or the host swaps; at most {safe:.2f} is safe"
        )
    if hw.unified:
        notes.append("unified memory: the engine counts the OS page cache and its own compiler heap at start as its overhead, so the KV "
                     "budget of identical boots differs by 1–5 GiB there (public GB10 reports): read the KV figures as ± that")  # fmt: skip
    return gpu_memory_utilization, notes


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
