"""Terminal rendering of boot-log facts (Rich)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from servelab.engines.bootfacts import BootFacts


def bootlog_table(f: BootFacts) -> Table:
    """One row per fact found; warnings listed after; recognised/unrecognised line counts in the caption."""
    t = Table(title=escape(f"boot log: {f.engine or 'unknown engine'}{' ' + f.version if f.version else ''}"), show_header=False,
              caption=f"{f.recognised_lines} lines recognised, {f.unrecognised_lines} not")  # fmt: skip
    t.add_column("fact")
    t.add_column("value")

    def row(name: str, value: object, unit: str = "") -> None:
        if value not in (None, [], {}):
            t.add_row(name, escape(f"{value}{unit}"))

    row("model", f.model)
    row("non-default args", f.non_default_args)
    row("max model len", f.max_model_len, " tokens")
    row("max num batched tokens", f.max_num_batched_tokens)
    row("weights", f.weights_gib, " GiB")
    row("weights load", f.weights_load_s, " s")
    row("torch.compile", f.compile_s, " s")
    row("CUDA-graph capture", f.graph_capture_s, " s")
    row("CUDA-graph memory", f.graph_capture_gib, " GiB")
    if f.graph_estimate_gib is not None:
        row("CUDA-graph memory reserved before the KV cache", f.graph_estimate_gib, f" GiB (the pool took {f.graph_pool_gib} GiB)")
    row("CUDA-graph sizes", f.cudagraph_sizes)
    row("time to ready", f.ready_s, " s")
    row("KV-cache memory", f.kv_cache_gib, " GiB")
    full = " (full-attention pool)" if f.swa_kv_cache_tokens is not None else ""
    row("KV-cache size", f"{f.kv_cache_tokens:,}" if f.kv_cache_tokens else None, f" tokens{full}")
    row("KV-cache size, sliding-window pool", f"{f.swa_kv_cache_tokens:,}" if f.swa_kv_cache_tokens else None, " tokens")
    if f.max_concurrency:
        row(f"max concurrency at {f.max_concurrency.context_tokens:,} tokens", f.max_concurrency.factor, "x")
    row("slots", f.slots)
    row("attention backend", f.attention_backend)
    row("MoE backend", f.moe_backend)
    if f.moe_config:
        row("MoE kernel config", f.moe_config, " (tuned)" if f.moe_config_tuned else " not found: the engine's default (finding untuned_moe_kernels)")
    row("model code", f.modeling_backend, " modeling backend, not the engine's own (finding transformers_backend)")
    if f.moe_routing_simulation:
        row("MoE routing", f"simulated ({f.moe_routing_simulation})",
            ", the router outside the MoE layer: void (finding void_routing_simulation)" if f.moe_external_routing else "")
    row("quantized-linear kernels", ", ".join(f.quant_backends) or None)
    for w in f.warnings:
        t.add_row("[yellow]warning[/]", escape(w))
    return t
