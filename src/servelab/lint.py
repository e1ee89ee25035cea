"""``servelab lint``: a recipe checked against the field's known pitfalls, each with its reason.

Every rule looks at a resolved variant (the exact server command) and the recipe's bench plan.
Facts and defaults come from ../shared/reference/server-facts.md (vLLM 0.33 unless said) and
``servelab plan``; the rules are listed with their reasons in README "servelab lint".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from servelab.errors import ServelabError
from servelab.plan.cudagraph import default_capture_sizes, padding, recommend
from servelab.plan.hardware import Hardware, load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.planner import make_plan
from servelab.plan.quant import FORMATS, get_format, kv_dtype_bytes
from servelab.recipes import READY_TIMEOUT_S, Recipe, Resolved, flag_value, has_flag

# vLLM's --gpu-memory-utilization default (vllm/config/cache.py; 0.9 before 0.2x) and the smallest
# max_num_seqs default of `vllm serve` (DGX Spark, A100, RTX 5090: server-facts.md §2.3).
VLLM_GPU_UTIL_DEFAULT = 0.92
VLLM_SMALL_TIER_MAX_NUM_SEQS = 256


@dataclass(frozen=True)
class LintFinding:
    """One pitfall found: rule id, severity, what in this recipe, and why it matters."""

    rule: str
    severity: Literal["info", "warning", "error"]
    message: str
    why: str


def flag_values(argv: list[str], name: str) -> list[str]:
    """Every value after ``name`` up to the next flag (``--x 1 2 4``, ``--x=1,2,4``, ``--x 1,2``)."""
    for i, a in enumerate(argv):
        if a == name or a.startswith(name + "="):
            tail = [a.split("=", 1)[1]] if "=" in a else _until_flag(argv[i + 1 :])
            return [v for t in tail for v in t.replace(",", " ").split()]
    return []


def _until_flag(args: list[str]) -> list[str]:
    out = []
    for a in args:
        if a.startswith("-"):
            break
        out.append(a)
    return out


def _spec_tokens(argv: list[str]) -> int:
    """``num_speculative_tokens`` from vLLM's ``--speculative-config`` JSON (0 when absent or unreadable)."""
    raw = flag_value(argv, "--speculative-config")
    try:
        return int(json.loads(raw).get("num_speculative_tokens", 0)) if raw else 0
    except (ValueError, AttributeError, TypeError):
        return 0


def _concurrencies(recipe: Recipe) -> list[int]:
    plan = recipe.bench
    return [plan.max_concurrency] if plan.rates and plan.max_concurrency else ([] if plan.rates else plan.concurrency)


def _eager(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    flag = {"vllm": "--enforce-eager", "sglang": "--disable-cuda-graph"}.get(recipe.engine)
    if not flag or not has_flag(argv, flag):
        return []
    return [LintFinding(
        "enforce-eager", "warning", f"{flag} turns CUDA graphs off",
        "Without CUDA graphs every decode step launches each kernel from the CPU; small-batch decode becomes "
        "launch-bound and loses a large part of its throughput. Keep it for debugging, or measure both with "
        f"--vary {flag.lstrip('-').replace('-', '_')}=true,false.",
    )]  # fmt: skip


def _max_num_seqs(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    flag = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests"}.get(recipe.engine)
    peak = recipe.bench.max_in_flight()
    if not flag or not peak:
        return []
    value = flag_value(argv, flag)
    if value is None and peak > VLLM_SMALL_TIER_MAX_NUM_SEQS:
        return [LintFinding(
            "max-num-seqs", "warning", f"the bench plan keeps up to {peak} requests in flight but {flag} is not set",
            "The default depends on the GPU (vLLM 0.33: 1024 on ≥70 GiB GPUs, 256 on DGX Spark, A100 and RTX 5090), so the "
            "same recipe runs a different batch on each machine; requests beyond it wait in the queue and their TTFT "
            f"includes the wait. Set {flag} explicitly.",
        )]  # fmt: skip
    if value is not None and value.isdigit() and int(value) < peak:
        return [LintFinding(
            "max-num-seqs", "warning", f"{flag} {value} is below the plan's {peak} requests in flight",
            f"Only {value} requests run at once; the other {peak - int(value)} queue in the server, so the levels above "
            f"{value} measure queueing (TTFT grows, throughput stays flat). Intended for a saturation test; otherwise raise it.",
        )]  # fmt: skip
    return []


def _capture_sizes(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    if recipe.engine != "vllm" or has_flag(argv, "--enforce-eager"):
        return []
    conc = _concurrencies(recipe)
    k = _spec_tokens(argv)
    seqs = flag_value(argv, "--max-num-seqs")
    seqs_n = int(seqs) if seqs and seqs.isdigit() else None
    if seqs_n:  # no decode batch is larger than max_num_seqs, whatever the plan's concurrency
        conc = sorted({min(c, seqs_n) for c in conc})
    given = flag_values(argv, "--cudagraph-capture-sizes") or flag_values(argv, "--cuda-graph-sizes")
    if given and all(v.isdigit() for v in given):
        sizes, source = sorted({int(v) for v in given}), "the recipe's capture sizes"
    else:
        tokens = flag_value(argv, "--max-num-batched-tokens")
        tokens_n = int(tokens) if tokens and tokens.isdigit() else 2048
        sizes, source = default_capture_sizes(seqs_n or VLLM_SMALL_TIER_MAX_NUM_SEQS, tokens_n, k), "vLLM's default capture sizes"
    padded = [p for p in padding(sizes, conc, k) if p.graph_size is None or p.waste > 0]
    if not padded:
        return []
    parts = [
        f"c={p.concurrency} runs without a graph (above the largest size {max(sizes)})" if p.graph_size is None
        else f"c={p.concurrency} pads {p.tokens} → {p.graph_size} ({100 * p.waste:.0f} % wasted)"
        for p in padded
    ]  # fmt: skip
    fix = ",".join(str(s) for s in recommend([s for s in sizes if s <= max(conc)], conc, k))
    return [LintFinding(
        "capture-sizes", "warning", f"plan concurrencies are not {source}: " + "; ".join(parts),
        "A decode batch runs the CUDA graph of the smallest captured size ≥ its tokens (vllm/v1/cudagraph_dispatcher.py), "
        "so the padding is computed for nothing and per-stream tok/s dips at exactly these levels. Capture them, e.g. "
        f"--cudagraph-capture-sizes {fix.replace(',', ' ')} (servelab plan cudagraph), or measure the levels users run.",
    )]  # fmt: skip


def _spec_with_prefix(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    if recipe.engine == "vllm":
        spec, prefix_off = has_flag(argv, "--speculative-config"), has_flag(argv, "--no-enable-prefix-caching")
    elif recipe.engine == "sglang":
        spec, prefix_off = has_flag(argv, "--speculative-algorithm"), has_flag(argv, "--disable-radix-cache")
    else:
        return []
    if not spec or prefix_off:
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
    flag = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}.get(recipe.engine)
    raw = flag_value(argv, flag) if flag else None
    if raw is None and recipe.engine != "vllm":
        return []
    try:
        util = float(raw) if raw is not None else VLLM_GPU_UTIL_DEFAULT
    except ValueError:
        return []
    left = hw.memory_gib * (1 - util)
    if left >= hw.os_reserved_gib:
        return []
    shown = f"{flag} {raw}" if raw is not None else f"vLLM's default {flag} {VLLM_GPU_UTIL_DEFAULT}"
    return [LintFinding(
        "unified-memory", "warning", f"{shown} leaves {left:.1f} GiB of {hw.name}'s {hw.memory_gib:.1f} GiB for the OS and everything else",
        f"On a unified-memory machine the GPU's share comes out of the same memory the OS and the CPU side use; with less than "
        f"{hw.os_reserved_gib:g} GiB left the host swaps, OOM-kills the engine or wedges (vLLM #46307, spark-vllm-docker "
        f"#321/#377). Lower it to ≤ {1 - hw.os_reserved_gib / hw.memory_gib:.2f}.",
    )]  # fmt: skip


def quant_of(recipe: Recipe, argv: list[str]) -> str:
    """The weight format for the plan: ``--quantization``, else a format named in the model id, else bf16."""
    given = flag_value(argv, "--quantization")
    if given and given.lower() in FORMATS:
        return given.lower()
    words = (recipe.model or "").lower().replace("_", "-").split("/")[-1].split("-")
    return next((w for w in words if w in FORMATS), "bf16")


def _max_model_len(recipe: Recipe, resolved: Resolved, hw: Hardware | None) -> list[LintFinding]:
    argv = resolved.argv
    raw = flag_value(argv, "--max-model-len" if recipe.engine == "vllm" else "--context-length")
    if hw is None or recipe.model is None or raw is None or not raw.isdigit() or recipe.engine not in ("vllm", "sglang"):
        return []
    try:
        spec = load_model(recipe.model)
        fmt = get_format(quant_of(recipe, argv), spec)
        kv = flag_value(argv, "--kv-cache-dtype") or "auto"
        util = float(flag_value(argv, "--gpu-memory-utilization") or VLLM_GPU_UTIL_DEFAULT)
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


def _ready_timeout(recipe: Recipe, resolved: Resolved) -> list[LintFinding]:
    floor = READY_TIMEOUT_S[recipe.engine]
    if resolved.ready_timeout_s >= floor:
        return []
    return [LintFinding(
        "ready-timeout", "warning", f"ready.timeout_s {resolved.ready_timeout_s:g} s is below {floor:g} s for {recipe.engine}",
        "Loading weights, torch.compile and CUDA-graph capture take 5-15 minutes for large models on the first start "
        "(less once the compile cache is warm); a slow but healthy start would be recorded as a failure to start.",
    )]  # fmt: skip


def _llama_metrics(recipe: Recipe, argv: list[str]) -> list[LintFinding]:
    if recipe.engine != "llama.cpp" or has_flag(argv, "--metrics"):
        return []
    return [LintFinding(
        "llama-metrics", "warning", "llama-server runs without --metrics",
        "llama-server serves /metrics only with --metrics; without it the runs have no server-side counters "
        "(prompt/generated tokens, queue, KV use) to check the client's numbers against.",
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
        for f in (*_eager(recipe, v.argv), *_max_num_seqs(recipe, v.argv), *_capture_sizes(recipe, v.argv),
                  *_spec_with_prefix(recipe, v.argv), *_unified_memory(recipe, v.argv, hw), *_max_model_len(recipe, v, hw),
                  *_ready_timeout(recipe, v), *_llama_metrics(recipe, v.argv)):  # fmt: skip
            labelled = f if len(variants) == 1 else LintFinding(f.rule, f.severity, f"{v.label}: {f.message}", f.why)
            if labelled not in found:
                found.append(labelled)
    return found
