"""What a server's startup log says (:class:`BootFacts`), and the rules engines read it with.

Each engine (``servelab.engines``) states its log formats as a table of :class:`Rule`: a pattern,
the action that sets facts from a match (built with :func:`set_fact` / :func:`set_facts`), and the
versions the format was seen in. Reading a whole log with every engine's rules is
``servelab.metrics.bootlog``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field


class MaxConcurrency(BaseModel):
    """vLLM's "Maximum concurrency for N tokens per request: F x" (SGLang: tokens ÷ context length)."""

    context_tokens: int
    factor: float


class KvPool(BaseModel):
    """One KV-cache pool of an engine that keeps several (SGLang: the sliding-window and the full-attention pool)."""

    kind: Literal["full", "swa"] | None = Field(None, description="None until the log says which pool it is.")
    tokens: int
    gib: float


class BootFacts(BaseModel):
    """Facts from one startup log. Sizes in GiB as the engine printed them (SGLang and llama.cpp's "GB"/"MiB" converted), times in s."""

    engine: str | None = None
    version: str | None = None
    model: str | None = None
    non_default_args: dict | str | None = Field(None, description="The engine's arguments as its log prints them, secret-named ones masked (servelab.guards.redaction.mask_keys).")
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = Field(None, description="Only when the log prints it (vLLM: set on the command line).")
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    quantization: str | None = Field(None, description="The engine's own name of the weight quantization (vLLM: fp8, modelopt_fp4, …); None when unquantized or not printed.")
    kv_cache_dtype: str | None = None
    prefix_caching: bool | None = Field(None, description="Whether the engine caches prefixes (vLLM: enable_prefix_caching of the engine config).")
    speculative_method: str | None = Field(None, description="Speculative decoding method as the engine names it (vLLM: mtp, ngram, eagle3, …).")
    speculative_tokens: int | None = Field(None, description="Speculative (draft) tokens per step.")
    weights_gib: float | None = None
    weights_load_s: float | None = None
    compile_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    graph_pool_gib: float | None = Field(None, description="The CUDA-graph pool's memory after capture (vLLM ≥ 0.21), GiB.")
    graph_estimate_gib: float | None = Field(None, description="What the engine reserved for CUDA graphs before sizing the KV cache (vLLM ≥ 0.21: its profiled estimate), GiB.")
    ready_s: float | None = Field(None, description="From the first timestamped line to the ready line.")
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = Field(None, description="Tokens the KV cache holds: of the full-attention pool where there are several.")
    swa_kv_cache_tokens: int | None = Field(None, description="Tokens of the sliding-window pool (SGLang hybrid pools).")
    kv_pools: list[KvPool] = Field(default_factory=list, description="Each pool the log printed, when it printed several lines.")
    max_concurrency: MaxConcurrency | None = None
    cudagraph_sizes: list[int] | None = None
    attention_backend: str | None = None
    moe_backend: str | None = None
    moe_config: str | None = Field(None, description="The tuned MoE kernel config the engine looked for (vLLM: the file name, E=…,N=…,device_name=…[,dtype=…].json).")
    moe_config_tuned: bool | None = Field(None, description="Whether it found that config (False: it ran its MoE layers with its default kernel config; finding untuned_moe_kernels).")
    modeling_backend: str | None = Field(None, description="Whose model code the engine ran when not its own (vLLM: 'transformers', its Transformers modeling backend; finding transformers_backend).")
    moe_routing_simulation: str | None = Field(None, description="The routing strategy the engine simulated in place of the model's router (vLLM: VLLM_MOE_ROUTING_SIMULATION_STRATEGY, e.g. uniform_random).")
    moe_external_routing: bool | None = Field(None, description="True when the model's router ran outside the engine's MoE layer, handing it each token's chosen experts (vLLM's Transformers backend; finding void_routing_simulation).")
    quant_backends: list[str] = Field(default_factory=list)
    slots: int | None = None
    warnings: list[str] = Field(default_factory=list)
    recognised_lines: int = 0
    unrecognised_lines: int = 0
    unrecognised: list[str] = Field(default_factory=list)


class Rule(NamedTuple):
    """One line format of one engine: the pattern, what it sets, and the versions it was seen in."""

    pattern: re.Pattern
    apply: Callable[[BootFacts, re.Match], None]
    seen_in: str


def num(text: str) -> float:
    """A number as engines print it (``1,234.5``)."""
    return float(text.replace(",", ""))


def int_list(text: str) -> list[int]:
    """Every integer in ``text``."""
    return [int(x) for x in re.findall(r"\d+", text)]


def set_fact(field: str, conv: Callable[[re.Match], object] = lambda m: m.group(1)) -> Callable[[BootFacts, re.Match], None]:
    """A rule action: ``field`` = ``conv(match)`` unless it already has a value."""
    return set_facts(**{field: conv})


def set_facts(**convs: Callable[[re.Match], object]) -> Callable[[BootFacts, re.Match], None]:
    """A rule action for several fields of one line; each keeps an earlier value, and a ``None`` sets nothing."""

    def apply(f: BootFacts, m: re.Match) -> None:
        for field, conv in convs.items():
            if getattr(f, field) in (None, []) and (value := conv(m)) is not None:
                setattr(f, field, value)

    return apply
