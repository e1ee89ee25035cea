"""Startup-log facts of vLLM, SGLang and llama.cpp: what the server decided while it booted.

Lines are cleaned first: ANSI colours, process prefixes such as ``(EngineCore_DP0 pid=123)`` or
``(Worker_TP0 pid=9)`` (nested, as under Ray), then the engine's own level/time/file prefix:
vLLM ``INFO 11-06 10:51:36 [kv_cache_utils.py:1229]`` (≥ 0.8) or ``INFO 01-30 03:18:12
gpu_model_runner.py:848]`` (older), SGLang ``[2025-11-30 12:50:10 TP0]``, llama.cpp
``0.01.744.861 I srv ...``. Each fact comes from one line format (../shared/reference/server-facts.md
§2.1 vLLM 0.6–0.33, §4 SGLang, §5 llama.cpp); the first occurrence wins (tensor-parallel ranks
repeat lines). vLLM ≤ 0.8 printed "# GPU blocks: N" (V0: "# cuda blocks: N"): its KV size is N × 16
(the default block size). Lines no pattern knows are kept (up to ``KEEP_UNRECOGNISED``) and counted.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime

from pydantic import BaseModel, Field

KEEP_UNRECOGNISED = 200
VLLM_BLOCK_TOKENS = 16  # vLLM's default --block-size, for logs that print "# GPU blocks" (≤ 0.7)

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PROCESS_PREFIX = re.compile(r"^(?:\([\w:.\-]+ pid=\d+\)\s*)+")
VLLM_PREFIX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+(?:\[[^\]]+\]|\S+\])\s*(.*)$")
SGLANG_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: [^\]]*)?\]\s*(.*)$")
LLAMA_PREFIX = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ([IWEDT]) (.*)$")
NUM = r"([\d,]+(?:\.\d+)?)"


class MaxConcurrency(BaseModel):
    """vLLM's "Maximum concurrency for N tokens per request: F x" (SGLang: tokens ÷ context length)."""

    context_tokens: int
    factor: float


class BootFacts(BaseModel):
    """Facts from one startup log. Sizes in GiB as the engine printed them (SGLang and llama.cpp's "GB"/"MiB" converted), times in s."""

    engine: str | None = None
    version: str | None = None
    model: str | None = None
    non_default_args: dict | str | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    weights_gib: float | None = None
    weights_load_s: float | None = None
    compile_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    ready_s: float | None = Field(None, description="From the first timestamped line to the ready line.")
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
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


def _n(text: str) -> float:
    return float(text.replace(",", ""))


def _int_list(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


# (engine, regex, handler(facts, match)); the first that matches a line claims it.
def _set(field: str, conv=lambda m: m.group(1)):
    def apply(f: BootFacts, m: re.Match) -> None:
        if getattr(f, field) in (None, []):
            setattr(f, field, conv(m))

    return apply


def _non_default(f: BootFacts, m: re.Match) -> None:
    try:
        f.non_default_args = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        f.non_default_args = m.group(1)
        return
    if isinstance(f.non_default_args, dict) and f.gpu_memory_utilization is None:
        f.gpu_memory_utilization = f.non_default_args.get("gpu_memory_utilization")


def _concurrency(f: BootFacts, m: re.Match) -> None:
    if f.max_concurrency is None:
        f.max_concurrency = MaxConcurrency(context_tokens=int(_n(m.group(1))), factor=_n(m.group(2)))


def _quant(f: BootFacts, m: re.Match) -> None:
    value = m.group(1) or m.group(2)
    if value not in f.quant_backends:
        f.quant_backends.append(value)


def _sglang_kv(f: BootFacts, m: re.Match) -> None:
    if f.kv_cache_tokens is None:
        f.kv_cache_tokens = int(m.group(1))
        f.kv_cache_gib = sum(_n(x) for x in re.findall(r"\b(?:K|V|KV) size: ([\d.]+) GB", m.string))


def _sglang_scheduler(f: BootFacts, m: re.Match) -> None:
    total, context = int(m.group(1)), int(m.group(2))
    f.kv_cache_tokens = f.kv_cache_tokens or total
    f.max_model_len = f.max_model_len or context
    if f.max_concurrency is None:
        f.max_concurrency = MaxConcurrency(context_tokens=context, factor=round(total / context, 2))


def _llama_slots(f: BootFacts, m: re.Match) -> None:
    f.slots, per_slot = int(m.group(1)), int(m.group(2))
    f.max_model_len = per_slot
    f.kv_cache_tokens = f.kv_cache_tokens or f.slots * per_slot


RULES: list[tuple[str, re.Pattern, object]] = [
    # vLLM
    ("vllm", re.compile(r"vLLM (?:API )?server version ([\w.+\-]+)"), _set("version")),
    ("vllm", re.compile(r"vLLM server version ([\w.+\-]+), serving model (\S+)"), _set("version")),
    ("vllm", re.compile(r"non-default args: (\{.*\})"), _non_default),
    ("vllm", re.compile(r"Initializing a V1 LLM engine \(v([\w.+\-]+)\) with config: model='([^']*)'.*?max_seq_len=(\d+)"),
     lambda f, m: (_set("version")(f, m), setattr(f, "model", f.model or m.group(2)), setattr(f, "max_model_len", f.max_model_len or int(m.group(3))))),  # fmt: skip
    ("vllm", re.compile(r"'cudagraph_capture_sizes': \[([\d, ]*)\]"), _set("cudagraph_sizes", lambda m: _int_list(m.group(1)))),
    ("vllm", re.compile(r"Using max model len (\d+)"), _set("max_model_len", lambda m: int(m.group(1)))),
    ("vllm", re.compile(r"current --gpu-memory-utilization=([\d.]+)"), _set("gpu_memory_utilization", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"max_num_batched_tokens=(\d+)"), _set("max_num_batched_tokens", lambda m: int(m.group(1)))),
    ("vllm", re.compile(r"Using (\w+) attention backend out of potential backends"), _set("attention_backend")),
    ("vllm", re.compile(r"Using (Flash Attention|FlashInfer|FlashMLA|Triton MLA|FlexAttention|XFormers|Torch SDPA)\s+backend"), _set("attention_backend")),
    ("vllm", re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) backend\.$"), _set("attention_backend")),  # forced: --attention-backend
    ("vllm", re.compile(r"█\s+version\s+([\w.+\-]+)"), _set("version")),  # the ASCII-art banner (0.2x)
    ("vllm", re.compile(r"█\s+model\s+(\S+)"), _set("model")),
    ("vllm", re.compile(r"Using '?([\w\-]+)'? (?:NvFp4|Fp8|Unquantized|Int8|Mxfp4|MxFp8|WNA16|W4A8) MoE backend"), _set("moe_backend")),
    ("vllm", re.compile(r"Using (\S+) for (?:NVFP4|MXFP4|MXFP8) GEMM|Using (\S+) for mixed-precision linear"), _quant),
    ("vllm", re.compile(r"Selected (\w+Kernel) for \w+"), _quant),  # 0.2x: the scaled-mm kernel of a quantized linear
    ("vllm", re.compile(r"Loading weights took ([\d.]+) seconds"), _set("weights_load_s", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"Model loading took ([\d.]+) ?GiB(?: memory)? and ([\d.]+) seconds"),
     lambda f, m: (setattr(f, "weights_gib", f.weights_gib or float(m.group(1))), setattr(f, "weights_load_s", f.weights_load_s or float(m.group(2))))),  # fmt: skip
    ("vllm", re.compile(r"Loading model weights took ([\d.]+) GB"), _set("weights_gib", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"torch\.compile (?:and initial profiling/warmup run together )?(?:takes|took) ([\d.]+) s in total"),
     _set("compile_s", lambda m: float(m.group(1)))),  # fmt: skip
    ("vllm", re.compile(r"Available KV cache memory: ([\d.]+) GiB"), _set("kv_cache_gib", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"KV cache size: ([\d,]+) tokens"), _set("kv_cache_tokens", lambda m: int(_n(m.group(1))))),
    ("vllm", re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x"), _concurrency),
    ("vllm", re.compile(r"# (?:GPU|cuda) blocks: (\d+)"), _set("kv_cache_tokens", lambda m: int(m.group(1)) * VLLM_BLOCK_TOKENS)),
    ("vllm", re.compile(r"model weights take ([\d.]+) ?GiB"), _set("weights_gib", lambda m: float(m.group(1)))),  # V0 worker
    ("vllm", re.compile(r"reserved for KV Cache is ([\d.]+) ?GiB"), _set("kv_cache_gib", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"gpu_memory_utilization \(([\d.]+)\)"), _set("gpu_memory_utilization", lambda m: float(m.group(1)))),
    ("vllm", re.compile(r"Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB"),
     lambda f, m: (setattr(f, "graph_capture_s", f.graph_capture_s or float(m.group(1))), setattr(f, "graph_capture_gib", f.graph_capture_gib or float(m.group(2))))),  # fmt: skip
    # SGLang
    ("sglang", re.compile(r"Load weight end\. elapsed=([\d.]+) s.*?mem usage=([\d.]+) GB"),
     lambda f, m: (setattr(f, "weights_load_s", f.weights_load_s or float(m.group(1))), setattr(f, "weights_gib", f.weights_gib or float(m.group(2))))),  # fmt: skip
    ("sglang", re.compile(r"KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (\d+)"), _sglang_kv),
    ("sglang", re.compile(r"Capture (?:\w+ )?cuda graph bs \[([\d, ]*)\]", re.I), _set("cudagraph_sizes", lambda m: _int_list(m.group(1)))),
    ("sglang", re.compile(r"Capture (?:\w+ )?cuda graph end\. (?:bs=\[([\d, ]*)\], )?(?:elapsed=|Time elapsed: )([\d.]+) s[.,] mem usage=([\d.]+) GB", re.I),
     lambda f, m: (setattr(f, "graph_capture_s", f.graph_capture_s or float(m.group(2))), setattr(f, "graph_capture_gib", f.graph_capture_gib or float(m.group(3))),
                   m.group(1) and _set("cudagraph_sizes", lambda mm: _int_list(mm.group(1)))(f, m))),  # fmt: skip
    ("sglang", re.compile(r"max_total_num_tokens=(\d+),.*context_len=(\d+)"), _sglang_scheduler),
    ("sglang", re.compile(r"attention_backend='(\w+)'"), _set("attention_backend")),
    ("sglang", re.compile(r"Memory pool end\.|Capture cuda graph begin|Load weight begin", re.I), lambda f, m: None),
    # llama.cpp
    ("llama.cpp", re.compile(r"build(?:_info)?: (b?\d+[\w\-]*(?: \(\w+\))?)"), _set("version")),
    ("llama.cpp", re.compile(r"loading model '([^']+)'"), _set("model")),
    ("llama.cpp", re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)"), _llama_slots),
    ("llama.cpp", re.compile(r"KV (?:self|buffer) size =\s*([\d.]+) MiB"), _set("kv_cache_gib", lambda m: float(m.group(1)) / 1024)),
    ("llama.cpp", re.compile(r"model buffer size =\s*([\d.]+) MiB"), _set("weights_gib", lambda m: float(m.group(1)) / 1024)),
    ("llama.cpp", re.compile(r"llama_server: model loaded|main: model loaded"), lambda f, m: None),
]
READY = {
    "vllm": re.compile(r"Application startup complete"),
    "sglang": re.compile(r"The server is fired up and ready to roll"),
    "llama.cpp": re.compile(r"listening on|server is listening on"),
}
NOTABLE = re.compile(
    r"Auto-prefetch is disabled|Mamba cache mode is set|max_num_scheduled_tokens is set to|padding layers|"
    r"CUDA graph memory profiling is enabled|not supported|is deprecated|Truncating max_cudagraph_capture_size"
)


def _clean(line: str) -> tuple[str, str | None, float | None, str]:
    """(message, engine hint, timestamp in s if any, level) of one raw log line."""
    line = PROCESS_PREFIX.sub("", ANSI.sub("", line).strip())
    if m := VLLM_PREFIX.match(line):
        ts = datetime.strptime("2000-" + m.group(2), "%Y-%m-%d %H:%M:%S").timestamp()
        return m.group(3), "vllm", ts, m.group(1)
    if m := SGLANG_PREFIX.match(line):
        return m.group(2), "sglang", datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp(), "INFO"
    if m := LLAMA_PREFIX.match(line):
        ts = int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6
        return m.group(6), "llama.cpp", ts, {"W": "WARNING", "E": "ERROR"}.get(m.group(5), "INFO")
    return line, None, None, "WARNING" if "WARNING" in line[:20] or line.startswith("W ") else "INFO"


def parse_bootlog(text: str) -> BootFacts:
    """Facts from a startup log's text (see the module docstring); never raises on odd lines."""
    facts = BootFacts()
    hints: dict[str, int] = {}
    first_ts = last_ts = None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        msg, hint, ts, level = _clean(raw)
        if hint:
            hints[hint] = hints.get(hint, 0) + 1
        if ts is not None and first_ts is None:
            first_ts = ts
        ts = last_ts = ts if ts is not None else last_ts  # uvicorn's own lines carry no time: the latest seen
        known = False
        for engine, pattern, handler in RULES:  # every rule that matches (one line may hold two facts)
            if m := pattern.search(msg):
                handler(facts, m)
                hints[engine] = hints.get(engine, 0) + 2
                known = True
        for engine, pattern in READY.items():
            if pattern.search(msg):
                known = True
                if ts is not None and first_ts is not None and facts.ready_s is None:
                    facts.ready_s = round(ts - first_ts, 3)
        if level in ("WARNING", "ERROR") or NOTABLE.search(msg):
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
