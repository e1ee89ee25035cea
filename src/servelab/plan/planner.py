"""``servelab plan``: memory fit, KV capacity, concurrency and ceilings in one result.

Everything is per GPU (per node for one-GPU nodes such as the DGX Spark) of a tensor-parallel
group of ``tp``; see ``memory.py`` and ``roofline.py`` for the formulas and their sources.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from servelab.engines import plan_engine
from servelab.engines.base import RuntimeMemory
from servelab.engines.kv_layout import HybridLayout
from servelab.errors import ServelabError
from servelab.plan.drafter import Drafter
from servelab.plan.memory import plan_memory
from servelab.plan.quant import QuantFormat, weight_bytes
from servelab.plan.roofline import decode_ceiling, prefill
from servelab.plan.tensors import CheckpointWeights
from servelab.values.specs import GIB, Hardware, ModelSpec

SHORT_CONTEXT = 1024  # "single stream at short context" for the headline decode ceiling (tokens)
PREFILL_TOKENS = 4096


class CeilingRow(BaseModel):
    """Decode ceiling at one batch size: tok/s per stream and in aggregate, and the binding resource."""

    batch: int
    context: int
    per_stream_tok_s: float
    aggregate_tok_s: float
    bound: str


class Plan(BaseModel):
    """The result of ``servelab plan`` (``--json`` prints this)."""

    model: str
    hardware: str
    quant: str
    kv_dtype: str
    nodes: int
    tp: int
    total_params: int
    active_params: int
    layer_kinds: dict[str, int]
    weights_gib: float = Field(description="Weights per GPU/node, GiB.")
    weights_total_gib: float
    weights_source: str = Field("formula", description="Where the weights come from: 'formula' (parameters × bits of the format) or the checkpoint's safetensors headers.")
    weights_formula_total_gib: float = Field(description="The formula's weights, all ranks, GiB (beside the headers' when those are used).")
    checkpoint_params: int | None = Field(None, description="Parameters (tensor elements) in the checkpoint's headers, when read; packed 4-bit tensors count their bytes.")
    weights_by_part_gib: dict[str, float] = Field(default_factory=dict, description="The headers' weights by part (embed, attention, experts, mtp, vision …), all ranks, GiB.")
    family: str = Field("", description="The model_type servelab read the config as, or 'generic'.")
    published_checkpoint_sizes: dict = Field(default_factory=dict)
    weights_format_source: str = Field("", description="Where the weight format comes from: --quant's format, the catalog's published checkpoint, or a checkpoint's quantization config.")
    engine_version: str = Field("", description="The engine release whose KV accounting the plan follows (vLLM: 0.25 or 0.19 rules).")
    moe_kernel: str | None = Field(None, description="Which fused-MoE kernel configuration the engine runs for these experts, format and GPU: its tuned file, or its default (moe_kernel_case); None without routed experts or where unknown.")
    kv_bytes_per_token: float = Field(description="Per GPU, layers whose cache grows with context.")
    state_bytes_per_seq: float = Field(description="Recurrent state per sequence per GPU (linear attention, Mamba).")
    gpu_memory_utilization: float = Field(description="Memory share planned (given, or the engine's default capped on unified memory).")
    usable_gib: float
    overhead_gib: float
    runtime: RuntimeMemory | None = Field(None, description="The runtime overhead's terms, GiB per GPU (None when given with --overhead-gib).")
    kv_budget_gib: float
    kv_capacity_tokens: int | None
    max_model_len: int
    max_concurrency: float = Field(description="Requests of max_model_len tokens that fit at once.")
    kv_layout: HybridLayout | None = Field(None, description="Hybrid models: the engine's KV-cache layout (block size, page bytes, groups, padding layers).")
    longest_context: dict[int, int] = Field(description="Longest context per request at each concurrency.")
    decode_tok_s_ceiling: float = Field(description=f"Single stream at {SHORT_CONTEXT} tokens of context, tok/s.")
    ceilings: list[CeilingRow]
    prefill_tok_s_ceiling: float = Field(description=f"One {PREFILL_TOKENS}-token prompt, tok/s.")
    speculative: dict | None = None
    fits: bool
    notes: list[str]


def bench_ceiling(spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, batch: int, context: int, tp: int = 1) -> float:
    """Decode ceiling per stream (tok/s) for a bench level: ``batch`` streams at ``context`` tokens, BF16 KV."""
    per_stream, _, _ = decode_ceiling(spec, fmt, hw, batch=batch, context=context, tp=tp)
    return per_stream


def make_plan(
    spec: ModelSpec,
    fmt: QuantFormat,
    hw: Hardware,
    *,
    kv_dtype: str,
    kv_dtype_bytes: float,
    max_model_len: int | None,
    gpu_memory_utilization: float | None = None,
    nodes: int = 1,
    tp: int | None = None,
    concurrency: list[int] | None = None,
    overhead_gib: float | None = None,
    os_reserved_gib: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    drafter: Drafter | None = None,
    prefix_caching: bool = False,
    draft_tokens: int = 0,
    acceptance: float = 0.0,
    checkpoint: CheckpointWeights | None = None,
    engine_version: str | None = None,
) -> Plan:
    """Plan ``spec`` in ``fmt`` on ``nodes`` × ``hw``; with ``checkpoint`` (its safetensors
    headers), the weights are the bytes vLLM loads from them (MTP layers left out: a drafter
    adds its own); ``engine_version`` the engine release whose KV accounting is planned
    (``servelab.engines.vllm_kv.rules_for``; None: 0.25).

    Raises:
        ServelabError: inconsistent parallelism (``tp`` not a multiple of ``nodes``, or not dividing the
            attention heads: :func:`servelab.plan.memory.plan_memory`) or arguments out of range.
    """
    tp = tp or nodes
    if tp < nodes or tp % nodes:
        raise ServelabError(f"--tp {tp} must be a multiple of --nodes {nodes} (one or more GPUs per node)")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise ServelabError(f"--gpu-memory-utilization {gpu_memory_utilization}: give a fraction in (0, 1]")
    if not 0 <= acceptance <= 1:
        raise ServelabError(f"--acceptance {acceptance}: give a fraction in [0, 1]")
    conc = concurrency or [1, 4, 16, 64]
    draft_tokens = draft_tokens or (drafter.num_tokens if drafter else 0)
    mem = plan_memory(
        spec, fmt, hw, kv_dtype_bytes=kv_dtype_bytes, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
        tp=tp, concurrency=conc, overhead_gib=overhead_gib, os_reserved_gib=os_reserved_gib,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, drafter=drafter,
        prefix_caching=prefix_caching, checkpoint_bytes=checkpoint.loaded_bytes if checkpoint else None, engine_version=engine_version,
    )  # fmt: skip
    rows, single, pf, speculative = _ceilings(spec, fmt, hw, conc, kv_dtype_bytes, tp, draft_tokens, acceptance, drafter)
    kinds: dict[str, int] = {}
    for layer in spec.layers:
        kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
    if spec.mtp_layers:
        kinds["mtp"] = spec.mtp_layers
    notes = list(mem.notes) + _notes(spec, checkpoint, nodes)
    return Plan(
        model=spec.name, hardware=hw.name, quant=fmt.name, kv_dtype=kv_dtype, nodes=nodes, tp=tp,
        total_params=spec.total_params, active_params=spec.active_params, layer_kinds=kinds,
        weights_gib=mem.weights_gib, weights_total_gib=mem.weights_total_gib, published_checkpoint_sizes=spec.published_sizes,
        weights_format_source=fmt.source, engine_version=f"{plan_engine().title} {plan_engine().planned_version(engine_version)}",
        weights_source=f"safetensors headers ({checkpoint.files} files, {checkpoint.source})" if checkpoint else "formula",
        weights_formula_total_gib=weight_bytes(spec, fmt) / GIB, family=spec.family, checkpoint_params=checkpoint.params if checkpoint else None,
        weights_by_part_gib={k: v / GIB for k, v in sorted(checkpoint.by_part.items())} if checkpoint else {},
        kv_bytes_per_token=mem.kv_bytes_per_token, state_bytes_per_seq=mem.state_bytes_per_seq, usable_gib=mem.usable_gib,
        overhead_gib=mem.overhead_gib, kv_budget_gib=mem.budget_gib, kv_capacity_tokens=mem.kv_capacity_tokens,
        max_model_len=mem.max_model_len, gpu_memory_utilization=mem.gpu_memory_utilization, max_concurrency=mem.max_concurrency, longest_context=mem.longest_context,
        decode_tok_s_ceiling=single, ceilings=rows, prefill_tok_s_ceiling=PREFILL_TOKENS / pf.time_s, speculative=speculative,
        kv_layout=mem.layout, runtime=mem.runtime, fits=mem.fits, notes=notes, moe_kernel=(case := moe_kernel_case(spec, fmt, hw, tp)) and case[0],
    )  # fmt: skip


def moe_kernel_case(spec: ModelSpec, fmt: QuantFormat, hw: Hardware, tp: int) -> tuple[str, bool, float] | None:
    """Which case of the plan engine's fused-MoE kernel applies (``Engine.moe_kernel``): (in words,
    tuned, the experts' rate), the tuned configuration it ships, or its default one, which ``servelab predict`` prices
    at the experts' measured rate (``MoeKernel.rate``, × the dense matrix products') as it does a tuned one, with the default
    tiles' re-reads where the engine says so (``MoeKernel.tiles``); None without
    routed experts or where the engine, format or GPU says nothing."""
    engine = plan_engine()
    case = engine.moe_kernel(spec, fmt.name, hw, tp)
    if case is None:
        return None
    rate = f"; predict prices its experts' FLOPs at {case.rate:g} × the dense matrix products' rate, measured" if case.rate != 1 else ""
    if case.tuned:
        return f"{engine.title} ships a tuned config ({case.config}){rate}", True, case.rate
    rereads = ", ".join(f"{m} rows in steps of up to {most} tokens" for most, m, _ in case.tiles if m)  # MoeKernel.tiles
    rate += f", and reads part of an expert again for each further tile of its tokens ({rereads})" if rereads else ""
    return f"{engine.title} ships no tuned config ({case.config}): its default kernel config{rate}", False, case.rate


def _ceilings(spec: ModelSpec, fmt: QuantFormat, hw: Hardware, conc: list[int], kv_dtype_bytes: float, tp: int, draft_tokens: int, acceptance: float,
              drafter: Drafter | None) -> tuple[list[CeilingRow], float, object, dict | None]:  # fmt: skip
    """The plan's speed ceilings: decode at each batch of ``conc`` (short context), one stream's,
    prefill's, and with speculative decoding one stream's with its drafter (None without)."""
    rows = []
    for b in conc:
        per, agg, step = decode_ceiling(
            spec, fmt, hw, batch=b, context=SHORT_CONTEXT, kv_dtype_bytes=kv_dtype_bytes, tp=tp, draft_tokens=draft_tokens, acceptance=acceptance
        )
        rows.append(CeilingRow(batch=b, context=SHORT_CONTEXT, per_stream_tok_s=per, aggregate_tok_s=agg, bound=step.bound))
    single, _, _ = decode_ceiling(spec, fmt, hw, batch=1, context=SHORT_CONTEXT, kv_dtype_bytes=kv_dtype_bytes, tp=tp)
    pf = prefill(spec, fmt, hw, tokens=PREFILL_TOKENS, tp=tp)
    speculative = None
    if draft_tokens:
        with_spec, _, _ = decode_ceiling(
            spec, fmt, hw, batch=1, context=SHORT_CONTEXT, kv_dtype_bytes=kv_dtype_bytes, tp=tp, draft_tokens=draft_tokens, acceptance=acceptance
        )
        speculative = {"draft_tokens": draft_tokens, "acceptance": acceptance, "decode_tok_s_ceiling": with_spec}
        if drafter is not None:
            speculative |= {"drafter": drafter.method, "drafter_weights_gib": drafter.weight_bytes / GIB / tp,
                            "drafter_attention_layers": len(drafter.layers), "drafter_kv_bytes_per_token": drafter.kv_bytes_per_token}  # fmt: skip
    return rows, single, pf, speculative


def _notes(spec: ModelSpec, checkpoint: CheckpointWeights | None, nodes: int) -> list[str]:
    """What the plan assumed that the user should know: a model read as a generic decoder, TP over nodes."""
    notes = []
    if spec.assumptions:
        check = (f"; the checkpoint's headers hold {checkpoint.params / 1e9:,.2f} B elements against {spec.total_params / 1e9:,.2f} B counted "
                 "(packed 4-bit tensors count as stored), and the weights are the headers'") if checkpoint else \
            "; give the checkpoint (a directory or Hub id) to check it against its headers"  # fmt: skip
        notes.append(f"{spec.model_type or 'this model_type'} is not a family servelab knows: read as a generic decoder ({'; '.join(spec.assumptions)}){check}")
    if nodes > 1:
        notes.append("tensor parallel over nodes: interconnect time is not modelled, so the ceilings are optimistic")
    return notes
