"""SGLang: everything servelab knows about it (the engine interface: ``servelab.engines.base``).

Facts from ../shared/reference/server-facts.md §4: discovery (``owned_by: "sglang"``, version in
``GET /server_info``), request fields (``ignore_eos`` + ``min_tokens``), Prometheus names, its
flags (``sglang/srt/server_args.py``) and its startup log (fixtures in tests/fixtures/bootlogs/INDEX.yaml).

Startup-log line prefix: ``[2025-11-30 12:50:10 TP0] …`` (the rank is dropped: tensor-parallel ranks repeat lines).

KV pools: a model with sliding-window layers gets two pools (``SWAKVPool`` in SGLang's
``python/sglang/srt/mem_cache/swa_memory_pool.py``: the SWA pool is created first, then the
full-attention pool), each printing ``KV Cache is allocated. #tokens: N, K size: …, V size: …``;
the summary lines ``Use sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S`` and
``SWAKVPool mem usage: M GB, swa size: S, full size: F`` say which is which. The capacity a user
plans with is the full-attention pool (the scheduler's ``max_total_num_tokens``):
``kv_cache_tokens``; the SWA pool is ``swa_kv_cache_tokens``; ``kv_cache_gib`` is all pools together.
"""

from __future__ import annotations

import re
from datetime import datetime

from servelab.engines.base import Engine, Flags, Gauges, JsonGet
from servelab.engines.bootfacts import BootFacts, KvPool, MaxConcurrency, Rule, int_list, set_fact, set_facts
from servelab.engines.counters import Scrapes, ServerStats

NAME = "sglang"
PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: [^\]]*)?\]\s*(.*)$")


def strip_prefix(line: str) -> tuple[str, float | None, str] | None:
    """(message, timestamp in s, level) of an SGLang log line, or None if it is not one."""
    if m := PREFIX.match(line):
        return m.group(2), datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp(), "INFO"
    return None


def _label_pools(f: BootFacts) -> None:
    """Name the pools once the log has said the model is hybrid: the SWA pool first, then the full one."""
    if f.swa_kv_cache_tokens is not None and len(f.kv_pools) == 2:
        f.kv_pools[0].kind, f.kv_pools[1].kind = "swa", "full"


def _kv_pool(f: BootFacts, m: re.Match) -> None:
    """One ``KV Cache is allocated`` line: a pool (ranks repeat the same line: kept once)."""
    pool = KvPool(tokens=int(m.group(1)), gib=round(sum(float(x) for x in re.findall(r"\b(?:K|V|KV) size: ([\d.]+) GB", m.string)), 4))
    if (pool.tokens, pool.gib) in {(p.tokens, p.gib) for p in f.kv_pools}:
        return
    f.kv_pools.append(pool)
    f.kv_cache_gib = round(sum(p.gib for p in f.kv_pools), 4)
    if f.swa_kv_cache_tokens is None and len(f.kv_pools) == 1:
        f.kv_cache_tokens = pool.tokens  # a single pool, until the log says otherwise
    _label_pools(f)


def _hybrid(f: BootFacts, m: re.Match) -> None:
    """``full_layer_tokens=F, swa_layer_tokens=S`` or ``swa size: S, full size: F``: the pools named."""
    full, swa = (int(m.group("full")), int(m.group("swa")))
    f.kv_cache_tokens, f.swa_kv_cache_tokens = full, swa
    if m.groupdict().get("mem"):
        f.kv_cache_gib = float(m.group("mem"))
    _label_pools(f)


def _scheduler(f: BootFacts, m: re.Match) -> None:
    total, context = int(m.group(1)), int(m.group(2))
    f.kv_cache_tokens = total  # max_total_num_tokens: the full-attention pool, whatever the KV lines said
    f.max_model_len = f.max_model_len or context
    if f.max_concurrency is None:
        f.max_concurrency = MaxConcurrency(context_tokens=context, factor=round(total / context, 2))


RULES: list[Rule] = [
    Rule(re.compile(r"Load weight end\. elapsed=([\d.]+) s.*?mem usage=([\d.]+) GB"),
         set_facts(weights_load_s=lambda m: float(m.group(1)), weights_gib=lambda m: float(m.group(2))), "0.4–0.5"),  # fmt: skip
    Rule(re.compile(r"KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (\d+)"), _kv_pool, "0.4–0.5 (one line per pool)"),
    Rule(re.compile(r"Use sliding window memory pool\. full_layer_tokens=(?P<full>\d+), swa_layer_tokens=(?P<swa>\d+)"), _hybrid, "0.5 (2026-01)"),
    Rule(re.compile(r"SWAKVPool mem usage: (?P<mem>[\d.]+) GB, swa size: (?P<swa>\d+), full size: (?P<full>\d+)"), _hybrid, "0.5 (2025-12)"),
    Rule(re.compile(r"Capture (?:\w+ )?cuda graph bs \[([\d, ]*)\]", re.I), set_fact("cudagraph_sizes", lambda m: int_list(m.group(1))), "0.4–0.5"),
    Rule(re.compile(r"Capture (?:\w+ )?cuda graph end\. (?:bs=\[([\d, ]*)\], )?(?:elapsed=|Time elapsed: )([\d.]+) s[.,] mem usage=([\d.]+) GB", re.I),
         set_facts(graph_capture_s=lambda m: float(m.group(2)), graph_capture_gib=lambda m: float(m.group(3)),
                   cudagraph_sizes=lambda m: int_list(m.group(1)) if m.group(1) else None), "0.4–0.5"),  # fmt: skip
    Rule(re.compile(r"max_total_num_tokens=(\d+),.*context_len=(\d+)"), _scheduler, "0.4–0.5"),
    Rule(re.compile(r"attention_backend='(\w+)'"), set_fact("attention_backend"), "0.4–0.5 (server_args)"),
    Rule(re.compile(r"Memory pool end\.|Capture cuda graph begin|Load weight begin", re.I), lambda f, m: None, "0.4–0.5"),
]
READY = re.compile(r"The server is fired up and ready to roll")


class SGLang(Engine):
    """SGLang's OpenAI-compatible server (``python -m sglang.launch_server``)."""

    name = NAME
    title = "SGLang"
    owned_by = ("sglang",)
    exact_output_length = True
    gauges = Gauges(("sglang:num_running_reqs",), ("sglang:num_queue_reqs",), ("sglang:token_usage",))
    rules = RULES
    ready = READY
    strip_prefix = staticmethod(strip_prefix)
    launchers = (("python", "-m", "sglang.launch_server"),)  # SGLang docs, "Server arguments"
    ready_path = "/health"  # 503 until its warm-up request has run (server-facts.md, SGLang endpoints)
    ready_timeout_s = 900.0
    default_port = 30000
    cluster_backends = ("native",)
    # sglang/srt/server_args.py (--tp-size/--tp, --ep-size/--expert-parallel-size)
    flags = Flags(
        max_model_len="--context-length", max_num_seqs="--max-running-requests", max_num_batched_tokens="--chunked-prefill-size",
        eager="--disable-cuda-graph", gpu_memory="--mem-fraction-static", speculative="--speculative-algorithm",
        prefix_cache_off="--disable-radix-cache", kv_cache_dtype="--kv-cache-dtype", quantization="--quantization",
        tp=("--tp-size", "--tp", "--tensor-parallel-size"), ep=("--ep-size", "--expert-parallel-size"), ep_takes_size=True,
    )  # fmt: skip
    max_num_seqs_floor = 256  # flagged as for vLLM (README "servelab lint"): its default depends on the memory

    async def describe(self, get: JsonGet, card: dict) -> tuple[str | None, int | None]:
        """Version from ``GET /server_info``; context from the card's ``max_model_len``."""
        body = await get("/server_info")
        _, context = await super().describe(get, card)
        return (body.get("version") if isinstance(body, dict) else None), context

    def request_fields(self, *, max_tokens: int, ignore_eos: bool, cold: bool) -> dict:
        """``ignore_eos`` and ``min_tokens = max_tokens`` for an exact output length."""
        return {"ignore_eos": True, "min_tokens": max_tokens} if ignore_eos else {}

    def server_counters(self, s: Scrapes, stats: ServerStats) -> None:
        """Tokens; cached tokens summed over ``cache_source`` labels when it has them (not the
        ``total`` one); mean acceptance length = Δgenerated ÷ Δ``sglang:spec_verify_calls_total``;
        preemptions = the peak of the ``sglang:num_retracted_reqs`` gauge; histogram means."""
        stats.prompt_tokens = s.delta("sglang:prompt_tokens_total")
        stats.generation_tokens = s.delta("sglang:generation_tokens_total")
        sources = s.by_label("sglang:cached_tokens_total", "cache_source")
        if sources:
            keys = [k for k in sources if k != "total"] or ["total"]
            stats.cached_prompt_tokens = sum(s.delta("sglang:cached_tokens_total", cache_source=k) or 0 for k in keys)
        else:
            stats.cached_prompt_tokens = s.delta("sglang:cached_tokens_total")
        stats.prefix_cache_hit_rate = s.ratio(stats.cached_prompt_tokens, stats.prompt_tokens)
        verify = s.delta("sglang:spec_verify_calls_total")
        stats.mean_acceptance_length = s.ratio(stats.generation_tokens, verify) if verify else None
        stats.queue_time_mean_ms = s.hist_mean_ms("sglang:queue_time_seconds")
        stats.ttft_mean_ms = s.hist_mean_ms("sglang:time_to_first_token_seconds")
        stats.e2e_mean_ms = s.hist_mean_ms("sglang:e2e_request_latency_seconds")
        stats.preemptions = s.peak(("sglang:num_retracted_reqs",))

    def cluster_flags(self, nodes: int, rank: int, head: str, port: int) -> list[str]:
        """``--nnodes N --node-rank R --dist-init-addr HEAD:P`` (sglang/srt/server_args.py)."""
        return ["--nnodes", str(nodes), "--node-rank", str(rank), "--dist-init-addr", f"{head}:{port}"]

    def check_recipe(self, tensor_parallel: int, cluster_backend: str | None) -> tuple[str, str] | None:
        """Several nodes only natively (``--nnodes``), never over Ray."""
        if cluster_backend == "ray":
            return "cluster", "SGLang runs several nodes natively (--nnodes); use backend: native"
        return None


ENGINE = SGLang()
