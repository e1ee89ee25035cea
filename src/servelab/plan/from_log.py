"""``servelab plan --from-log``: plan what a real boot log booted, and put the plan beside what the log reports.

The log gives the model, the weight quantization, ``max_model_len``, ``gpu_memory_utilization``,
the tensor-parallel size, the KV-cache dtype, ``max_num_seqs`` / ``max_num_batched_tokens`` where
set, its speculative decoding as ``--speculative mtp:K`` / ``ngram:K``, and whether it caches prefixes
(``servelab.metrics.bootlog``); the plan is made with those, and compared line by line
with what the engine printed (each error in %):

- weights per GPU ("Model loading took X GiB");
- KV-cache memory per GPU ("Available KV cache memory: X GiB");
- KV-cache tokens ("GPU KV cache size: N tokens");
- maximum concurrency at ``max_model_len`` ("Maximum concurrency for L tokens per request: F×");
- KV-cache tokens recomputed from the *reported* KV memory with the plan's layout
  (the plan engine's ``kv_tokens``, vLLM's ``servelab.engines.vllm_kv.kv_tokens``: bytes per token, blocks, hybrid groups): this isolates the
  layout from the memory model (weights, overheads).

The KV accounting follows the log's engine version (vLLM: 0.19's rules before 0.20, ``servelab.engines.vllm_kv``).
The log does not name the GPU; its memory does: the weights and KV cache it reports plus the planned
runtime overhead, divided by its ``gpu_memory_utilization``, is the memory per GPU the engine saw
(:func:`implied_memory_gib`). Without ``--hardware``, the profile nearest to it (within
``HARDWARE_MATCH``) is planned, and the plan says which and why (:func:`pick_hardware`).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from servelab import engines
from servelab.engines.bootfacts import BootFacts
from servelab.errors import ServelabError
from servelab.plan.model_spec import catalog
from servelab.plan.planner import Plan
from servelab.values.specs import GIB, Hardware

QUANT_SUFFIX = re.compile(r"[-_](?:nvfp4|mxfp4|fp8(?:-dynamic|-block)?|fp4|awq|gptq(?:-int4)?|int4|int8|w4a16|w8a8|gguf)$", re.IGNORECASE)
HARDWARE_MATCH = 0.05  # a profile whose memory is within 5 % of what the log implies is taken for the log's GPU


class LogInputs(BaseModel):
    """The plan's inputs as read from a boot log (None: not printed there; the CLI's value is used)."""

    model: str | None
    quant: str | None
    max_model_len: int | None
    gpu_memory_utilization: float | None
    tp: int | None
    kv_dtype: str | None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    speculative: str | None = None  # plan's --speculative (mtp:K, ngram:K) for the log's speculative_config
    prefix_caching: bool = False
    version: str | None = None  # the engine release the log names


class LogCheck(BaseModel):
    """One quantity, planned and reported; ``error_pct`` = (planned − reported) ÷ reported × 100."""

    what: str
    unit: str
    planned: float | None
    reported: float | None

    @property
    def error_pct(self) -> float | None:
        """Signed error of the plan, % of the reported value (None when either side is missing)."""
        if self.planned is None or not self.reported:
            return None
        return 100.0 * (self.planned - self.reported) / self.reported


def log_inputs(facts: BootFacts) -> LogInputs:
    """What to plan, from the log (the engine's quantization name mapped to a servelab format).

    Raises:
        ServelabError: not a log of the plan's engine, or a quantization servelab has no format for.
    """
    engine = engines.get(facts.engine or engines.GENERIC)
    if engine is not engines.plan_engine():
        raise ServelabError(f"a boot log of {facts.engine or 'an unknown engine'}: the plan follows {engines.plan_engine().title}'s memory accounting; give one of its boot logs")
    quant = None if facts.quantization is None else engine.quant_formats.get(facts.quantization)
    if facts.quantization is not None and quant is None:
        raise ServelabError(f"the log's quantization {facts.quantization!r} has no servelab format; pass --quant")
    model = facts.model.rstrip("/").rsplit("/", 1)[-1] if facts.model else None  # a path or a hub name: its last part
    if model is not None and model.lower() not in catalog():  # a quantized export: Qwen3.5-122B-A10B-NVFP4 is the catalog's qwen3.5-122b-a10b
        base = QUANT_SUFFIX.sub("", model).lower()
        model = base if base in catalog() else model
    if quant is None and facts.tensor_parallel_size is not None:  # the engine-config line was read: quantization=None
        quant = "bf16"
    return LogInputs(model=model, quant=quant, max_model_len=facts.max_model_len, gpu_memory_utilization=facts.gpu_memory_utilization,
                     tp=facts.tensor_parallel_size, kv_dtype=facts.kv_cache_dtype, max_num_seqs=facts.max_num_seqs,
                     max_num_batched_tokens=facts.max_num_batched_tokens, speculative=_speculative(facts), prefix_caching=bool(facts.prefix_caching),
                     version=facts.version)  # fmt: skip


def _speculative(facts: BootFacts) -> str | None:
    """``--speculative`` for the log's speculative decoding: ``mtp:K`` / ``ngram:K``.

    Raises:
        ServelabError: a drafter model (EAGLE, draft model) whose config the log does not give.
    """
    method, tokens = facts.speculative_method, facts.speculative_tokens
    if method is None or tokens is None:
        return None
    if method in ("mtp", "ngram"):
        return f"{method}:{tokens}"
    raise ServelabError(f"the log runs speculative decoding with a {method} drafter; pass --speculative eagle3:DRAFT_CONFIG (its config.json)")


def implied_memory_gib(facts: BootFacts, overhead_gib: float, utilization: float) -> float | None:
    """The memory per GPU (GiB) the engine saw: (reported weights + reported KV cache +
    ``overhead_gib``, the plan's runtime estimate) ÷ the log's ``gpu_memory_utilization``, else
    ``utilization`` (the engine's default the plan used) (vLLM sizes the KV cache as utilization ×
    total − weights − overheads). None when the log lacks the weights or the KV memory."""
    if not (facts.weights_gib and facts.kv_cache_gib):
        return None
    return (facts.weights_gib + facts.kv_cache_gib + overhead_gib) / (facts.gpu_memory_utilization or utilization)


def pick_hardware(implied_gib: float | None, given: str | None, default: str, profiles: dict[str, Hardware]) -> tuple[str, str]:
    """The hardware profile to plan a log with, and a note that says which and why: ``given``
    (``--hardware``) if any, warned when the log implies another memory; else the profile
    nearest to ``implied_gib`` within ``HARDWARE_MATCH`` (unified-memory machines too); else ``default``."""
    near = min(profiles.items(), key=lambda kv: abs(kv[1].memory_gib - implied_gib)) if implied_gib else None
    off = (lambda hw: abs(hw.memory_gib - implied_gib) / implied_gib) if implied_gib else (lambda hw: 0.0)
    implied = f"the log's weights, KV cache and the planned runtime at its utilization make ~{implied_gib:.1f} GiB per GPU" if implied_gib else ""
    if given:
        hw = profiles.get(given)
        if hw is not None and implied_gib and off(hw) > HARDWARE_MATCH:
            return given, f"hardware {given} ({hw.name}, {hw.memory_gib:g} GiB) as given, but {implied}: check --hardware"
        return given, f"hardware {given} as given"
    if near is not None and off(near[1]) <= HARDWARE_MATCH:
        return near[0], f"hardware {near[0]} ({near[1].name}, {near[1].memory_gib:g} GiB), inferred: {implied}"
    why = f"{implied}, no profile within {HARDWARE_MATCH:.0%}" if implied_gib else "the log does not give the weights and the KV memory"
    return default, f"hardware {default}, the default: {why}; pass --hardware (a profile or a YAML file with the GPU's memory)"


def compare(plan: Plan, facts: BootFacts) -> list[LogCheck]:
    """The plan beside the log (see the module docstring)."""
    layout = None
    if facts.kv_cache_gib is not None:
        layout = engines.plan_engine().kv_tokens(facts.kv_cache_gib * GIB, plan.kv_bytes_per_token, plan.kv_layout, plan.max_model_len)
    conc = facts.max_concurrency
    return [
        LogCheck(what="weights per GPU", unit="GiB", planned=plan.weights_gib, reported=facts.weights_gib),
        LogCheck(what="KV-cache memory per GPU", unit="GiB", planned=plan.kv_budget_gib, reported=facts.kv_cache_gib),
        LogCheck(what="KV-cache tokens", unit="tokens", planned=plan.kv_capacity_tokens, reported=facts.kv_cache_tokens),
        LogCheck(what=f"max concurrency at {plan.max_model_len:,} tokens", unit="×", planned=plan.max_concurrency,
                 reported=conc.factor if conc and conc.context_tokens == plan.max_model_len else None),  # fmt: skip
        LogCheck(what="KV-cache tokens from the reported KV memory (layout only)", unit="tokens", planned=layout, reported=facts.kv_cache_tokens),
    ]
