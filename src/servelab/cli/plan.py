"""``servelab plan`` and ``servelab plan cudagraph``: memory fit, KV capacity, ceilings, graph padding."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.common import console, one_line_errors, read_model
from servelab.settings import parse_int_list
from servelab.engines import plan_engine
from servelab.engines.cudagraph import padding, recommend
from servelab.errors import ServelabError
from servelab.metrics.bootlog import parse_bootlog
from servelab.plan.checkpoint import weight_format
from servelab.plan.drafter import parse_drafter
from servelab.plan.from_log import compare, implied_memory_gib, log_inputs, pick_hardware
from servelab.plan.hardware import load_hardware, profiles
from servelab.plan.planner import make_plan
from servelab.plan.quant import kv_dtype_bytes
from servelab.plan.tensors import checkpoint_weights
from servelab.report.plan_table import from_log_table, padding_table, plan_table
from servelab.guards import jsonfile
from servelab.guards.files import head_text

DEFAULT_HARDWARE = "h100-sxm"
plan_app = typer.Typer(help="Memory fit, KV capacity, concurrency and speed ceilings before launching a server.")


@plan_app.callback(invoke_without_command=True)
@one_line_errors
def plan(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="A config.json or its directory, a catalog name (qwen3-8b, gpt-oss-120b …), or a Hugging Face Hub id (org/name: the local cache first, else config.json and the safetensors headers from the Hub, never the weights).")] = None,
    revision: Annotated[str | None, typer.Option(help="The Hub id's branch, tag or commit (default main).")] = None,
    from_log: Annotated[Path | None, typer.Option(help="A vLLM boot log: plan what it booted (model, quant, context, utilization, TP, KV dtype, max_num_seqs, max_num_batched_tokens; options given override) and show planned vs reported with the error in %.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Profile name (dgx-spark, h100-sxm, h200, b200, rtx-pro-6000, rtx-5090, m3-ultra, ryzen-ai-max-395) or a YAML file (default h100-sxm; with --from-log, the profile the log's memory implies).")] = None,
    quant: Annotated[str | None, typer.Option(help="Weight format: bf16 (default), fp8, fp8-block, mxfp8, nvfp4, nvfp4-experts, mxfp4, mxfp4-all, gptq-int4, awq-int4, gguf-q4_k_m, gguf-q8_0; a catalog model's published checkpoint of that format where there is one.")] = None,
    checkpoint_config: Annotated[Path | None, typer.Option(help="Another checkpoint than the published one: its config.json (with quantization_config, or hf_quant_config.json beside it) or its directory (its safetensors headers, or model.safetensors.index.json, give the weights).")] = None,
    vllm_version: Annotated[str | None, typer.Option(help="The vLLM release whose KV accounting to plan: 0.25 (default) or 0.19 (hybrids: blocks ÷ groups reported, 64-token blocks); --from-log takes the log's.")] = None,
    kv_dtype: Annotated[str | None, typer.Option(help="KV-cache dtype: auto (bf16, default) or fp8.")] = None,
    max_model_len: Annotated[int | None, typer.Option(min=1, help="Context per request (default the model's maximum).")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(help="Fraction of memory the server may take (vLLM's flag; default its default, 0.92 since 0.2x, capped on unified memory at what the OS leaves).")] = None,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes (machines) the TP group spans; --tp defaults to one GPU per node.")] = 1,
    tp: Annotated[int | None, typer.Option(min=1, help="Tensor-parallel size (default = nodes).")] = None,
    concurrency: Annotated[str, typer.Option(help="Batch sizes for ceilings and longest context.")] = "1,4,16,64",
    max_num_seqs: Annotated[int | None, typer.Option(min=1, help="The server's max_num_seqs (default the engine's for the hardware): sizes the sampler's and CUDA graphs' memory.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(min=1, help="The server's max_num_batched_tokens (default the engine's for the hardware): sizes the activations.")] = None,
    overhead_gib: Annotated[float | None, typer.Option(min=0, help="Runtime overhead per GPU, GiB (default estimated).")] = None,
    os_reserved_gib: Annotated[float | None, typer.Option(min=0, help="Unified memory the OS keeps, GiB (default per profile).")] = None,
    speculative: Annotated[str | None, typer.Option(help="A speculative drafter loaded beside the model: mtp:K (the model's MTP layers), eagle3:PATH (a draft config.json) or ngram:K; adds its weights and KV.")] = None,
    prefix_caching: Annotated[bool, typer.Option("--prefix-caching", help="The server runs with --enable-prefix-caching (off by default for hybrids in vLLM 0.25): a hybrid keeps more recurrent state per request.")] = False,
    draft_tokens: Annotated[int, typer.Option(min=0, help="Speculative decoding: draft tokens per step (default K of --speculative).")] = 0,
    acceptance: Annotated[float, typer.Option(help="Speculative decoding: acceptance rate per draft token.")] = 0.7,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Does it fit, how many tokens of KV cache, how many concurrent requests, and how fast at best."""
    if ctx.invoked_subcommand is not None:
        return
    if vllm_version is not None and not re.fullmatch(r"\d+\.\d+(?:\.[\w.+-]*)?", vllm_version):
        raise ServelabError(f"--vllm-version {vllm_version!r}: give a vLLM release such as 0.19 or 0.25.0")
    facts = None
    if from_log is not None:
        facts, logged = _read_log(from_log)
        model, quant, kv_dtype, max_model_len, tp = model or logged.model, quant or logged.quant, kv_dtype or logged.kv_dtype, max_model_len or logged.max_model_len, tp or logged.tp
        gpu_memory_utilization, speculative, vllm_version = gpu_memory_utilization or logged.gpu_memory_utilization, speculative or logged.speculative, vllm_version or logged.version
        max_num_seqs, max_num_batched_tokens = max_num_seqs or logged.max_num_seqs, max_num_batched_tokens or logged.max_num_batched_tokens
        prefix_caching = prefix_caching or logged.prefix_caching
    if model is None:
        raise ServelabError("--model is required: a catalog name such as qwen3-8b, a config.json, or a Hub id such as Qwen/Qwen3-8B" + (" (the log names none)" if facts else ""))
    spec, kv_dtype = read_model(model, revision), kv_dtype or "auto"
    drafter = parse_drafter(speculative, spec, kv_dtype_bytes(kv_dtype), draft_tokens) if speculative else None
    fmt = weight_format(quant, spec, checkpoint_config)
    weights = _weights(spec, quant, checkpoint_config)

    def planned(profile: str):
        return make_plan(
            spec, fmt, load_hardware(profile), kv_dtype=kv_dtype, kv_dtype_bytes=kv_dtype_bytes(kv_dtype),
            max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, nodes=nodes, tp=tp,
            concurrency=parse_int_list(concurrency, "--concurrency"), overhead_gib=overhead_gib, os_reserved_gib=os_reserved_gib,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, drafter=drafter, prefix_caching=prefix_caching,
            draft_tokens=draft_tokens, acceptance=acceptance, checkpoint=weights, engine_version=vllm_version,
        )  # fmt: skip

    result = planned(hardware or DEFAULT_HARDWARE)
    if facts is not None:
        profile, why = pick_hardware(implied_memory_gib(facts, result.overhead_gib, result.gpu_memory_utilization), hardware, DEFAULT_HARDWARE, profiles())
        result = planned(profile) if profile != (hardware or DEFAULT_HARDWARE) else result
        result.notes.insert(0, why)
    _show(result, compare(result, facts) if facts is not None else None, from_log, json_out)


def _weights(spec, quant: str | None, checkpoint_config: Path | None):
    """The checkpoint's weights from its safetensors headers (``--checkpoint-config``, or the model's
    own where it is found); None with ``--quant`` alone, a what-if the formula answers."""
    if quant and not checkpoint_config:
        return None
    folder = checkpoint_config if checkpoint_config is None or checkpoint_config.is_dir() else checkpoint_config.parent
    return checkpoint_weights(spec, folder=folder)


def _show(result, checks: list | None, from_log: Path | None, json_out: bool) -> None:
    """The plan as JSON or a table, with planned vs reported beside a boot log."""
    if json_out:
        doc = result.model_dump(mode="json")
        if checks is not None:
            doc["from_log"] = [{**c.model_dump(), "error_pct": c.error_pct} for c in checks]
        print(jsonfile.dumps(doc, indent=2))
        return
    console.print(plan_table(result))
    if checks is not None:
        console.print(from_log_table(checks, str(from_log)))


def _read_log(path: Path) -> tuple:
    """A vLLM boot log's facts and the plan inputs it gives (``--from-log``).

    Raises:
        ServelabError: the log does not say what a plan needs, naming the file.
    """
    facts = parse_bootlog(head_text(path, "--from-log"))
    try:
        return facts, log_inputs(facts)
    except ServelabError as exc:
        raise ServelabError(f"--from-log {path}: {exc}") from None


@plan_app.command("cudagraph")
@one_line_errors
def plan_cudagraph(
    concurrency: Annotated[str, typer.Option(help="Target concurrency levels, e.g. 1,2,4,5,8,10,16,32.")] = "1,2,4,5,8,10,16,32,64",
    capture_sizes: Annotated[str | None, typer.Option(help="The server's capture list (default vLLM's for the settings below).")] = None,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="vLLM --max-num-seqs.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, help="vLLM --max-num-batched-tokens.")] = 8192,
    num_spec_tokens: Annotated[int, typer.Option(min=0, help="Speculative tokens per step.")] = 0,
    sm100: Annotated[bool, typer.Option(help="Data-center Blackwell (B200): default largest size 1024.")] = False,
) -> None:
    """CUDA-graph padding: which graph each concurrency runs, the waste, and a capture list without it."""
    levels = parse_int_list(concurrency, "--concurrency")
    sizes = (
        parse_int_list(capture_sizes, "--capture-sizes")
        if capture_sizes
        else plan_engine().capture_sizes(max_num_seqs, max_num_batched_tokens, num_spec_tokens, sm100)
    )
    console.print(padding_table(padding(sizes, levels, num_spec_tokens), sizes))
    best = recommend(sizes, levels, num_spec_tokens)
    console.print(f"no padding at these levels with: --compilation-config '{{\"cudagraph_capture_sizes\": {best}}}'", soft_wrap=True)
