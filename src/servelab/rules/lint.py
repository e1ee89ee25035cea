"""``servelab lint``: a recipe checked against the field's known pitfalls, each with its reason.

Every rule looks at a resolved variant (the exact server command) and the recipe's bench plan.
The rules here are shared: they read the engine's flags and defaults (``servelab.engines``:
``flags``, ``gpu_memory_utilization_default``, ``max_num_seqs_floor``, ``ready_timeout_s``); an
engine adds its own (``lint_rules``). Memory rules use ``servelab plan``. The rules are listed
with their reasons in README "servelab lint".
"""

from __future__ import annotations

from servelab import engines
from servelab.values.argv import flag_value, has_flag
from servelab.engines.base import LintFinding
from servelab.errors import ServelabError
from servelab.plan.hardware import load_hardware
from servelab.plan.memory import tp_heads_problem
from servelab.plan.model_spec import load_model
from servelab.plan.planner import make_plan
from servelab.plan.quant import FORMATS, get_format, kv_dtype_bytes
from servelab.recipes import Recipe, Resolved
from servelab.values.specs import Hardware


def plan_concurrencies(recipe: Recipe) -> list[int]:
    """The closed-loop levels of the recipe's bench plan, or its open-loop cap (none when uncapped)."""
    plan = recipe.bench
    return [plan.max_concurrency] if plan.rates and plan.max_concurrency else ([] if plan.rates else plan.streams())


def _eager(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    flag = engines.get(recipe.engine).flags.eager
    if not flag or not has_flag(argv, flag):
        return []
    return [LintFinding(
        "enforce-eager", "warning", f"{flag} turns CUDA graphs off",
        "Without CUDA graphs every decode step launches each kernel from the CPU; small-batch decode becomes "
        "launch-bound and loses a large part of its throughput. Keep it for debugging, or measure both with "
        f"--vary {flag.lstrip('-').replace('-', '_')}=true,false.",
    )]  # fmt: skip


def _max_num_seqs(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    engine = engines.get(recipe.engine)
    flag, floor = engine.flags.max_num_seqs, engine.max_num_seqs_floor
    peak = recipe.bench.max_in_flight()
    if not flag or not peak:
        return []
    value = flag_value(argv, flag)
    if value is None and floor is not None and peak > floor:
        return [LintFinding(
            "max-num-seqs", "warning", f"the bench plan keeps up to {peak} requests in flight but {flag} is not set",
            "The default depends on the GPU (vLLM 0.33: 1024 on ≥70 GiB GPUs, 256 on DGX Spark, A100 and RTX 5090), so the "
            "same recipe runs a different batch on each machine; requests beyond it wait in the queue and their TTFT "
            f"includes the wait. Set {flag} explicitly.",
        )]  # fmt: skip
    if value is not None and value.isdecimal() and int(value) < peak:
        return [LintFinding(
            "max-num-seqs", "warning", f"{flag} {value} is below the plan's {peak} requests in flight",
            f"Only {value} requests run at once; the other {peak - int(value)} queue in the server, so the levels above "
            f"{value} measure queueing (TTFT grows, throughput stays flat). Intended for a saturation test; otherwise raise it.",
        )]  # fmt: skip
    return []


def _spec_with_prefix(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    flags = engines.get(recipe.engine).flags
    if not flags.speculative or not has_flag(argv, flags.speculative):
        return []
    if flags.prefix_cache_off and has_flag(argv, flags.prefix_cache_off):
        return []
    return [LintFinding(
        "spec-with-prefix-cache", "warning", "speculative decoding runs together with prefix caching (on by default)",
        "The two are reported not to compose: gains measured apart do not add up, and some engine versions and models "
        "(hybrid/Mamba with MTP) restrict or slow one when the other is on. Measure the combinations with a sweep "
        "(--vary with and without each) and a cold prefix cache, so cache hits do not pass for speculation gains.",
    )]  # fmt: skip


def _unified_memory(recipe: Recipe, argv: list[str], hw: Hardware | None) -> list[LintFinding]:
    if hw is None or not hw.unified:
        return []
    engine = engines.get(recipe.engine)
    flag, default = engine.flags.gpu_memory, engine.gpu_memory_utilization_default
    raw = flag_value(argv, flag) if flag else None
    if raw is None and default is None:
        return []
    try:
        util = float(raw) if raw is not None else default
    except ValueError:
        return []
    left = hw.memory_gib * (1 - util)
    if left >= hw.os_reserved_gib:
        return []
    shown = f"{flag} {raw}" if raw is not None else f"{engine.title}'s default {flag} {default}"
    return [LintFinding(
        "unified-memory", "warning", f"{shown} leaves {left:.1f} GiB of {hw.name}'s {hw.memory_gib:.1f} GiB for the OS and everything else",
        f"On a unified-memory machine the GPU's share comes out of the same memory the OS and the CPU side use; with less than "
        f"{hw.os_reserved_gib:g} GiB left the host swaps, OOM-kills the engine or wedges (vLLM #46307, spark-vllm-docker "
        f"#321/#377), and vLLM refuses to start when its share exceeds the memory free at start. Lower it to ≤ {hw.safe_utilization():.2f}.",
    )]  # fmt: skip


def quant_of(recipe: Recipe, argv: list[str]) -> str:
    """The weight format for the plan: ``--quantization``, else a format named in the model id, else bf16."""
    flag = engines.get(recipe.engine).flags.quantization
    given = flag_value(argv, flag) if flag else None
    if given and given.lower() in FORMATS:
        return given.lower()
    words = (recipe.model or "").lower().replace("_", "-").split("/")[-1].split("-")
    return next((w for w in words if w in FORMATS), "bf16")


def _max_model_len(recipe: Recipe, resolved: Resolved, hw: Hardware | None) -> list[LintFinding]:
    argv, engine = resolved.argv, engines.get(recipe.engine)
    flags = engine.flags
    raw = flag_value(argv, flags.max_model_len) if flags.max_model_len else None
    if hw is None or recipe.model is None or raw is None or not raw.isdecimal():
        return []
    try:
        spec = load_model(recipe.model, online=False)
        fmt = get_format(quant_of(recipe, argv), spec)
        kv = (flag_value(argv, flags.kv_cache_dtype) if flags.kv_cache_dtype else None) or "auto"
        given = flag_value(argv, flags.gpu_memory) if flags.gpu_memory else None
        util = float(given or engine.gpu_memory_utilization_default or engines.plan_engine().gpu_memory_utilization_default)
        nodes = len(recipe.cluster.hosts) if recipe.cluster else 1
        plan = make_plan(spec, fmt, hw, kv_dtype=kv, kv_dtype_bytes=kv_dtype_bytes(kv), max_model_len=int(raw),
                         gpu_memory_utilization=util, nodes=nodes, tp=max(resolved.tensor_parallel, nodes))  # fmt: skip
    except (ServelabError, ValueError):
        return []  # not in the catalog, or a format plan does not know: nothing to check against
    cap = plan.kv_capacity_tokens
    if cap is None or int(raw) <= cap:
        return []
    return [LintFinding(
        "max-model-len", "error", f"max_model_len {int(raw):,} is above the KV capacity servelab plan estimates: {cap:,} tokens "
        f"({spec.name} {fmt.name}, KV {kv}, TP {plan.tp} on {hw.name}, utilization {util:g})",
        "One request of max_model_len tokens would not fit in the KV cache; vLLM refuses to start ('To serve at least one "
        "request with the models's max seq len … more than the available KV cache memory'). Lower --max-model-len, use an "
        "fp8 KV cache, raise the memory share, or add GPUs (servelab plan shows each).",
    )]  # fmt: skip


def _tensor_parallel(recipe: Recipe, resolved: Resolved) -> list[LintFinding]:
    tp_flags = engines.get(recipe.engine).flags.tp
    given = flag_value(resolved.argv, *tp_flags) if tp_flags else None  # the command's own flag wins over the recipe's tensor_parallel
    tp = int(given) if given and given.isdecimal() else resolved.tensor_parallel
    if tp <= 1 or recipe.model is None:
        return []
    try:
        spec = load_model(recipe.model, online=False)
    except ServelabError:
        return []  # the model is not at hand offline: nothing to check against
    if (problem := tp_heads_problem(spec, tp)) is None:
        return []
    return [LintFinding(
        "tensor-parallel", "error", f"tensor parallel {tp}: {problem}",
        "The attention heads are split evenly over the tensor-parallel ranks; vLLM checks it before loading anything and "
        "exits (vllm/config/model.py, ModelConfig.verify_with_parallel_config), so the variant never serves.",
    )]  # fmt: skip


def _ready_timeout(recipe: Recipe, resolved: Resolved) -> list[LintFinding]:
    floor = engines.get(recipe.engine).ready_timeout_s
    if resolved.ready_timeout_s >= floor:
        return []
    return [LintFinding(
        "ready-timeout", "warning", f"ready.timeout_s {resolved.ready_timeout_s:g} s is below {floor:g} s for {recipe.engine}",
        "Loading weights, torch.compile and CUDA-graph capture take 5-15 minutes for large models on the first start "
        "(less once the compile cache is warm); a slow but healthy start would be recorded as a failure to start.",
    )]  # fmt: skip


def lint(recipe: Recipe, variants: list[Resolved], hardware: str | None = None) -> list[LintFinding]:
    """All findings for ``variants`` of ``recipe`` (duplicates across variants once).

    Args:
        recipe: the recipe.
        variants: its resolved variants.
        hardware: a profile name or YAML (default the recipe's ``hardware``); enables the
            unified-memory and max_model_len rules.

    Raises:
        ServelabError: an unknown hardware profile.
    """
    hw = load_hardware(hardware or recipe.hardware) if (hardware or recipe.hardware) else None
    found: list[LintFinding] = [LintFinding("import", "warning", note, "servelab launches the image as it is.") for note in recipe.notes]
    for v in variants:
        for f in (*_eager(recipe, v.argv), *_max_num_seqs(recipe, v.argv), *engines.get(recipe.engine).lint_rules(v.argv, plan_concurrencies(recipe)),
                  *_spec_with_prefix(recipe, v.argv), *_unified_memory(recipe, v.argv, hw), *_max_model_len(recipe, v, hw),
                  *_tensor_parallel(recipe, v), *_ready_timeout(recipe, v)):  # fmt: skip
            labelled = f if len(variants) == 1 else LintFinding(f.rule, f.severity, f"{v.label}: {f.message}", f.why)
            if labelled not in found:
                found.append(labelled)
    return found
