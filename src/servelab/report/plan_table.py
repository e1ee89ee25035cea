"""Terminal rendering of ``servelab plan`` results (Rich)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from servelab.engines.cudagraph import Padding
from servelab.plan.from_log import LogCheck
from servelab.plan.planner import Plan


def _gib(x: float) -> str:
    return f"{x:,.2f} GiB"


def plan_table(plan: Plan) -> Table:
    """One table: the model, memory plan, capacity and ceilings, one fact per row with its unit."""
    nodes = f", {plan.nodes} nodes" if plan.nodes > 1 else ""
    t = Table(title=escape(f"{plan.model} · {plan.quant} · {plan.tp} × {plan.hardware} (TP {plan.tp}{nodes})"), show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    kinds = ", ".join(f"{n} {k}" for k, n in plan.layer_kinds.items())
    rows = [
        ("parameters", f"{plan.total_params / 1e9:,.2f} B total, {plan.active_params / 1e9:,.2f} B active per token"),
        ("layers", kinds),
        ("read as", escape(plan.family or "–")),
        ("weights per GPU", _gib(plan.weights_gib) + (f" (of {_gib(plan.weights_total_gib)})" if plan.tp > 1 else "")),
        ("weight format", escape(plan.weights_format_source or plan.quant)),
        *([("MoE kernel", escape(plan.moe_kernel))] if plan.moe_kernel else []),
        *_checkpoint_rows(plan),
        *[(f"published checkpoint ({k})", str(v)) for k, v in plan.published_checkpoint_sizes.items()],
        ("allowed (memory × utilization)", f"{_gib(plan.usable_gib)} ({plan.gpu_memory_utilization:g})"),
        ("runtime overhead", _gib(plan.overhead_gib) + (
            f" (non-torch {r.non_torch_gib:.2f} + activations {r.activations_gib:.2f} + sampler {r.sampler_gib:.2f} + CUDA graphs "
            f"{r.cuda_graphs_gib:.2f}; {r.runner})" if (r := plan.runtime) else " (given)")),
        ("KV-cache budget", _gib(plan.kv_budget_gib) + (f" ({plan.engine_version} accounting)" if plan.engine_version else "")),
        (f"KV bytes per token ({plan.kv_dtype})", f"{plan.kv_bytes_per_token:,.0f} B"),
    ]
    if plan.state_bytes_per_seq:
        rows.append(("recurrent state per sequence", f"{plan.state_bytes_per_seq / 2**20:,.1f} MiB"))
    if lay := plan.kv_layout:
        state = f" (state {lay.state_bytes / 2**20:,.2f} MiB padded)" if lay.state_bytes else ""
        kinds = [f"{lay.attention_groups} full-attention"]
        if lay.sliding_groups:
            kinds.append(f"{lay.sliding_groups} sliding-window ({lay.sliding_blocks(plan.max_model_len):,} blocks per request)")
        if lay.recurrent_groups:
            pages = {"none": "1", "align": "2", "all": "1 per block of context"}[lay.mamba_cache_mode]
            extra = f" + {lay.speculative_blocks}" if lay.speculative_blocks else ""
            kinds.append(f"{lay.recurrent_groups} recurrent ({pages}{extra} state pages per request" + (f", mamba_cache_mode {lay.mamba_cache_mode}" if lay.mamba_cache_mode != "none" else "") + ")")
        rows.append(("hybrid KV layout (vLLM)", f"block {lay.block_size:,} tokens, page {lay.page_bytes / 2**20:,.2f} MiB{state}, "
                     f"{' + '.join(kinds)} groups of {lay.group_size} layers, {lay.padding_layers} padding"))  # fmt: skip
    rows += [
        ("KV capacity", f"{plan.kv_capacity_tokens:,} tokens" if plan.kv_capacity_tokens is not None else "–"),
        (f"max concurrency at {plan.max_model_len:,} tokens", f"{plan.max_concurrency:,.2f}×"),
    ]
    rows += [(f"longest context at {c} concurrent", f"{n:,} tokens") for c, n in plan.longest_context.items()]
    rows.append(("decode ceiling, 1 stream", f"{plan.decode_tok_s_ceiling:,.1f} tok/s"))
    rows += [
        (f"decode ceiling at batch {r.batch}", f"{r.per_stream_tok_s:,.1f} tok/s per stream, {r.aggregate_tok_s:,.0f} aggregate ({r.bound}-bound)")
        for r in plan.ceilings
    ]
    rows.append(("prefill ceiling (4096-token prompt)", f"{plan.prefill_tok_s_ceiling:,.0f} tok/s"))
    if plan.speculative:
        s = plan.speculative
        if s.get("drafter"):
            kv = f"{s['drafter_attention_layers']} attention layer(s) in the KV cache" if s["drafter_attention_layers"] else f"{s['drafter_kv_bytes_per_token']:,.0f} B of KV per token"
            rows.append(("speculative drafter (in the figures above)", f"{s['drafter']}: {_gib(s['drafter_weights_gib'])} of weights per GPU, {kv}"))
        rows.append((f"with {s['draft_tokens']} draft tokens at α={s['acceptance']}", f"{s['decode_tok_s_ceiling']:,.1f} tok/s, 1 stream"))
    rows.append(("fits", "[green]yes[/]" if plan.fits else "[red]no[/]"))
    for what, value in rows:
        t.add_row(what, value)
    for note in plan.notes:
        t.add_row("[yellow]note[/]", escape(note))
    return t


def _checkpoint_rows(plan: Plan) -> list[tuple[str, str]]:
    """The weights' source when the checkpoint's headers were read, beside the formula's figure."""
    if plan.weights_source == "formula":
        return []
    parts = ", ".join(f"{k} {v:,.2f}" for k, v in plan.weights_by_part_gib.items() if v >= 0.005)
    return [
        ("weights from", escape(plan.weights_source) + f" (formula: {_gib(plan.weights_formula_total_gib)})"),
        ("checkpoint parameters", f"{plan.checkpoint_params / 1e9:,.2f} B in the headers" if plan.checkpoint_params else "–"),
        ("checkpoint by part (GiB)", parts),
    ]


def from_log_table(checks: list[LogCheck], log: str) -> Table:
    """``plan --from-log``: each quantity planned and reported, with the plan's error in %."""
    t = Table(title=escape(f"plan vs {log}"))
    for col in ("", "planned", "reported", "error"):
        t.add_column(col, justify="left" if not col else "right")
    for c in checks:
        fmt = (lambda x: f"{x:,.2f} {c.unit}") if c.unit != "tokens" else (lambda x: f"{x:,.0f} tokens")
        err = c.error_pct
        shown = "–" if err is None else f"{err:+.1f}%"
        t.add_row(escape(c.what), "–" if c.planned is None else fmt(c.planned), "–" if c.reported is None else fmt(c.reported),
                  shown if err is None or abs(err) <= 3 else f"[yellow]{shown}[/]")  # fmt: skip
    return t


def padding_table(rows: list[Padding], sizes: list[int]) -> Table:
    """Concurrency → tokens per decode step → CUDA graph used → wasted fraction."""
    t = Table(title=f"CUDA-graph padding ({len(sizes)} capture sizes, largest {max(sizes)})")
    for col in ("concurrency", "tokens per step", "graph size", "padding waste"):
        t.add_column(col, justify="right")
    for r in rows:
        graph = str(r.graph_size) if r.graph_size else "none (eager)"
        waste = f"{r.waste:.0%}"
        t.add_row(str(r.concurrency), str(r.tokens), graph, f"[red]{waste}[/]" if r.waste else waste)
    return t
