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
"""

from __future__ import annotations

from pydantic import BaseModel

from servelab import engines
from servelab.engines.bootfacts import BootFacts
from servelab.errors import ServelabError
from servelab.plan.planner import Plan
from servelab.specs import GIB


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
    if quant is None and facts.tensor_parallel_size is not None:  # the engine-config line was read: quantization=None
        quant = "bf16"
    return LogInputs(model=model, quant=quant, max_model_len=facts.max_model_len, gpu_memory_utilization=facts.gpu_memory_utilization,
                     tp=facts.tensor_parallel_size, kv_dtype=facts.kv_cache_dtype, max_num_seqs=facts.max_num_seqs,
                     max_num_batched_tokens=facts.max_num_batched_tokens, speculative=_speculative(facts), prefix_caching=bool(facts.prefix_caching))  # fmt: skip


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
