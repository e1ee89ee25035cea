"""Server-side counters: scrape ``/metrics`` around a measured phase and compute what changed.

Parsed with ``prometheus_client``'s text parser. Every metric name is optional (older versions
lack some); the names per engine come from ../shared/reference/server-facts.md:

- vLLM (§1): ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:prefix_cache_{queries,hits}_total`` (≤ 0.10: ``vllm:gpu_prefix_cache_*``),
  ``vllm:num_preemptions_total``, ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total``,
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``,
  ``vllm:request_queue_time_seconds`` (histogram), ``vllm:time_to_first_token_seconds``,
  ``vllm:e2e_request_latency_seconds``; gauges ``vllm:num_requests_{running,waiting}``,
  ``vllm:kv_cache_usage_perc`` (≤ 0.10: ``vllm:gpu_cache_usage_perc``).
- SGLang (§4): ``sglang:{prompt,generation,cached}_tokens_total``, ``sglang:spec_verify_calls_total``,
  ``sglang:queue_time_seconds``, gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage``, ``sglang:num_retracted_reqs``.
- llama.cpp (§5): ``llamacpp:prompt_tokens_total`` (computed, cached excluded),
  ``llamacpp:prompt_tokens_cached_total``, ``llamacpp:tokens_predicted_total``,
  ``llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`` (+ ``_per_pos``),
  gauges ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``
  (older builds: ``llamacpp:kv_cache_usage_ratio``).

Formulas (docs/metrics.md, "Server-side metrics"): prefix-cache hit rate = Δhits ÷ Δqueries (vLLM)
or Δcached ÷ Δprompt (SGLang, llama.cpp); acceptance rate = Δaccepted ÷ Δdraft tokens; mean
acceptance length = 1 + Δaccepted ÷ Δdrafts (SGLang: Δgenerated ÷ Δverify calls); per-position
acceptance = Δaccepted at position i ÷ Δdrafts; queue time = Δsum ÷ Δcount of the histogram.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

SAMPLE_INTERVAL_S = 1.0

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    """Prometheus text → {sample name: [(labels, value), …]}.

    Raises:
        ValueError: the text is not in the Prometheus exposition format.
    """
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return dict(out)


def total(samples: Samples, *names: str, **labels: str) -> float | None:
    """Sum of the first present name's samples whose labels match ``labels``; None if absent."""
    for name in names:
        if name in samples:
            return sum(v for lab, v in samples[name] if all(lab.get(k) == want for k, want in labels.items()))
    return None


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """{label value: summed sample value} for one sample name."""
    out: dict[str, float] = defaultdict(float)
    for lab, v in samples.get(name, []):
        if label in lab:
            out[lab[label]] += v
    return dict(out)


class ServerStats(BaseModel):
    """What the server's counters say about one measured phase (deltas; peaks from 1-s samples)."""

    engine: str
    scrapes: int = Field(description="Scrapes taken (before, every second, after).")
    prompt_tokens: float | None = Field(None, description="Prompt tokens processed, cached included.")
    cached_prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prefix_cache_hit_rate: float | None = Field(None, description="Fraction of prompt tokens served from the prefix cache.")
    preemptions: float | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_acceptance: list[float] | None = None
    queue_time_mean_ms: float | None = None
    ttft_mean_ms: float | None = None
    e2e_mean_ms: float | None = None
    peak_running: float | None = None
    peak_waiting: float | None = None
    peak_kv_usage: float | None = Field(None, description="Peak KV-cache usage, fraction 0–1.")


def _delta(before: Samples, after: Samples, *names: str, **labels: str) -> float | None:
    a, b = total(after, *names, **labels), total(before, *names, **labels)
    return None if a is None or b is None else a - b


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _hist_mean_ms(before: Samples, after: Samples, base: str) -> float | None:
    mean = _ratio(_delta(before, after, base + "_sum"), _delta(before, after, base + "_count"))
    return None if mean is None else mean * 1e3


GAUGES = {
    "vllm": (("vllm:num_requests_running",), ("vllm:num_requests_waiting",), ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "sglang": (("sglang:num_running_reqs",), ("sglang:num_queue_reqs",), ("sglang:token_usage",)),
    "llama.cpp": (("llamacpp:requests_processing",), ("llamacpp:requests_deferred",), ("llamacpp:kv_cache_usage_ratio",)),
}


def compute(engine: str, before: Samples, after: Samples, during: list[Samples]) -> ServerStats:
    """Deltas between two scrapes and peaks over all of them, for one engine (see the module docstring)."""
    allscrapes = [before, *during, after]
    stats = ServerStats(engine=engine, scrapes=len(allscrapes))
    if engine == "vllm":
        stats.prompt_tokens = _delta(before, after, "vllm:prompt_tokens_total")
        stats.generation_tokens = _delta(before, after, "vllm:generation_tokens_total")
        queries = _delta(before, after, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        hits = _delta(before, after, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        stats.cached_prompt_tokens, stats.prefix_cache_hit_rate = hits, _ratio(hits, queries)
        stats.preemptions = _delta(before, after, "vllm:num_preemptions_total")
        prefix = "vllm:spec_decode_num_"
        stats.queue_time_mean_ms = _hist_mean_ms(before, after, "vllm:request_queue_time_seconds")
        stats.ttft_mean_ms = _hist_mean_ms(before, after, "vllm:time_to_first_token_seconds")
        stats.e2e_mean_ms = _hist_mean_ms(before, after, "vllm:e2e_request_latency_seconds")
    elif engine == "sglang":
        stats.prompt_tokens = _delta(before, after, "sglang:prompt_tokens_total")
        stats.generation_tokens = _delta(before, after, "sglang:generation_tokens_total")
        sources = by_label(after, "sglang:cached_tokens_total", "cache_source")
        if sources:
            keys = [k for k in sources if k != "total"] or ["total"]
            stats.cached_prompt_tokens = sum(_delta(before, after, "sglang:cached_tokens_total", cache_source=k) or 0 for k in keys)
        else:
            stats.cached_prompt_tokens = _delta(before, after, "sglang:cached_tokens_total")
        stats.prefix_cache_hit_rate = _ratio(stats.cached_prompt_tokens, stats.prompt_tokens)
        verify = _delta(before, after, "sglang:spec_verify_calls_total")
        stats.mean_acceptance_length = _ratio(stats.generation_tokens, verify) if verify else None
        stats.queue_time_mean_ms = _hist_mean_ms(before, after, "sglang:queue_time_seconds")
        stats.ttft_mean_ms = _hist_mean_ms(before, after, "sglang:time_to_first_token_seconds")
        stats.e2e_mean_ms = _hist_mean_ms(before, after, "sglang:e2e_request_latency_seconds")
        retracted = [total(s, "sglang:num_retracted_reqs") for s in allscrapes]
        stats.preemptions = max((r for r in retracted if r is not None), default=None)
        prefix = None
    elif engine == "llama.cpp":
        computed = _delta(before, after, "llamacpp:prompt_tokens_total")
        cached = _delta(before, after, "llamacpp:prompt_tokens_cached_total")
        stats.prompt_tokens = None if computed is None else computed + (cached or 0)
        stats.cached_prompt_tokens = cached
        stats.prefix_cache_hit_rate = _ratio(cached, stats.prompt_tokens)
        stats.generation_tokens = _delta(before, after, "llamacpp:tokens_predicted_total")
        prefix = "llamacpp:spec_decode_num_"
    else:
        return stats
    if prefix:
        stats.spec_drafts = _delta(before, after, prefix + "drafts_total")
        stats.spec_draft_tokens = _delta(before, after, prefix + "draft_tokens_total")
        stats.spec_accepted_tokens = _delta(before, after, prefix + "accepted_tokens_total")
        stats.acceptance_rate = _ratio(stats.spec_accepted_tokens, stats.spec_draft_tokens)
        if stats.spec_drafts:
            stats.mean_acceptance_length = 1 + (stats.spec_accepted_tokens or 0) / stats.spec_drafts
            pos_after = by_label(after, prefix + "accepted_tokens_per_pos_total", "position")
            pos_before = by_label(before, prefix + "accepted_tokens_per_pos_total", "position")
            if pos_after:
                order = sorted(pos_after, key=int)
                stats.per_position_acceptance = [(pos_after[p] - pos_before.get(p, 0)) / stats.spec_drafts for p in order]
    running, waiting, kv = GAUGES[engine]
    stats.peak_running = _peak(allscrapes, running)
    stats.peak_waiting = _peak(allscrapes, waiting)
    stats.peak_kv_usage = _peak(allscrapes, kv)
    return stats


def _peak(scrapes: list[Samples], names: tuple[str, ...]) -> float | None:
    values = [v for s in scrapes if (v := total(s, *names)) is not None]
    return max(values) if values else None


class MetricsWatch:
    """Scrapes ``/metrics`` before a phase, every ``SAMPLE_INTERVAL_S`` during it, and after it.

    Use ``await watch.start()`` before the phase and ``await watch.stop()`` after; ``stop`` returns
    the :class:`ServerStats`, or None when the endpoint has no metrics or a scrape failed.
    """

    def __init__(self, url: str | None, engine: str, headers: dict[str, str]) -> None:
        self.url, self.engine, self.headers = url, engine, headers
        self._session: aiohttp.ClientSession | None = None
        self._before: Samples | None = None
        self._during: list[Samples] = []
        self._task: asyncio.Task | None = None

    async def _scrape(self) -> Samples | None:
        assert self._session is not None
        try:
            async with self._session.get(self.url, headers=self.headers) as resp:
                return parse(await resp.text()) if resp.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None

    async def _sample(self) -> None:
        delay = SAMPLE_INTERVAL_S / 4  # the first sample soon after the start, when the queue is longest
        while True:
            await asyncio.sleep(delay)
            delay = SAMPLE_INTERVAL_S
            if (s := await self._scrape()) is not None:
                self._during.append(s)

    async def start(self) -> None:
        """Take the first scrape and start sampling (no-op without a metrics URL)."""
        if not self.url or self.engine not in GAUGES:
            return
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        self._before = await self._scrape()
        self._task = asyncio.create_task(self._sample())

    async def stop(self) -> ServerStats | None:
        """Stop sampling, take the last scrape and compute the phase's stats."""
        if self._session is None:
            return None
        try:
            if self._task is not None:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            after = await self._scrape()
            if self._before is None or after is None:
                return None
            return compute(self.engine, self._before, after, self._during)
        finally:
            await self._session.close()
            self._session = None
