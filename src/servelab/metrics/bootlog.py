"""Startup-log facts of vLLM, SGLang and llama.cpp: what the server decided while it booted.

This module is engine-independent: each registered engine (``servelab.engines``) gives its line
prefix (``strip_prefix``), one table of patterns with the versions each was seen in (``rules``),
its ready line (``ready``) and its notable lines (``notable``). Lines are cleaned first: ANSI
colours, a syslog/journald or docker-compose prefix, process prefixes such as
``(EngineCore_DP0 pid=123)`` or ``(Worker_TP0 pid=9)`` (nested, as under Ray); then the first
engine whose prefix matches strips its own. Every rule that matches a line applies (one line may
hold two facts); a fact keeps its first value unless its rule says otherwise (tensor-parallel
ranks repeat lines). Lines no pattern knows are kept (up to ``KEEP_UNRECOGNISED``) and counted.
Formats and the real logs they come from: tests/fixtures/bootlogs/INDEX.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

KEEP_UNRECOGNISED = 200

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PROCESS_PREFIX = re.compile(r"^(?:\([\w:.\-]+ pid=\d+\)\s*)+")
HOST_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.\-]+\[\d+\]: "  # syslog/journald: "Dec 02 11:57:01 host llama-server[24689]: "
    r"|[\w.\-]+-\d+\s+\| )"  # docker compose: "runner-llm-1  | "
)


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
    non_default_args: dict | str | None = None
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
    ready_s: float | None = Field(None, description="From the first timestamped line to the ready line.")
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = Field(None, description="Tokens the KV cache holds: of the full-attention pool where there are several.")
    swa_kv_cache_tokens: int | None = Field(None, description="Tokens of the sliding-window pool (SGLang hybrid pools).")
    kv_pools: list[KvPool] = Field(default_factory=list, description="Each pool the log printed, when it printed several lines.")
    max_concurrency: MaxConcurrency | None = None
    cudagraph_sizes: list[int] | None = None
    attention_backend: str | None = None
    moe_backend: str | None = None
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


def _clean(line: str, engines: list) -> tuple[str, str | None, float | None, str]:
    """(message, engine hint, timestamp in s if any, level) of one raw log line."""
    line = PROCESS_PREFIX.sub("", HOST_PREFIX.sub("", ANSI.sub("", line).strip()))
    for engine in engines:
        if found := engine.strip_prefix(line):
            msg, ts, level = found
            return msg, engine.name, ts, level
    return line, None, None, "WARNING" if "WARNING" in line[:20] or line.startswith("W ") else "INFO"


def parse_bootlog(text: str) -> BootFacts:
    """Facts from a startup log's text (see the module docstring); never raises on odd lines."""
    from servelab.engines import all_engines

    engines = [e for e in all_engines() if e.rules]
    facts = BootFacts()
    hints: dict[str, int] = {}
    first_ts = last_ts = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        msg, hint, ts, level = _clean(raw, engines)
        if hint:
            hints[hint] = hints.get(hint, 0) + 1
        if ts is not None and first_ts is None:
            first_ts = ts
        ts = last_ts = ts if ts is not None else last_ts  # uvicorn's own lines carry no time: the latest seen
        known = False
        for engine in engines:
            for rule in engine.rules:  # every rule that matches (one line may hold two facts)
                if m := rule.pattern.search(msg):
                    rule.apply(facts, m)
                    hints[engine.name] = hints.get(engine.name, 0) + 2
                    known = True
            if engine.ready and engine.ready.search(msg):
                known = True
                if ts is not None and first_ts is not None and facts.ready_s is None:
                    facts.ready_s = round(ts - first_ts, 3)
        if level in ("WARNING", "ERROR") or any(engine.notable and engine.notable.search(msg) for engine in engines):
            known = True
            if msg not in facts.warnings:
                facts.warnings.append(msg)
        if known:
            facts.recognised_lines += 1
        else:
            facts.unrecognised_lines += 1
            if len(facts.unrecognised) < KEEP_UNRECOGNISED:
                facts.unrecognised.append(msg)
    if hints:
        facts.engine = max(hints, key=hints.get)
    return facts
