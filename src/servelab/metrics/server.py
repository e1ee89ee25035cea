"""Server-side counters: scrape ``/metrics`` around a measured phase and compute what changed.

Parsed with ``prometheus_client``'s text parser. Which names an engine exposes (with their renames
across versions) is the engine's knowledge (``servelab.engines``: ``server_counters``, ``gauges``,
``spec_decode_prefix``); every name is optional (older versions lack some). This module keeps what
is the same for all: deltas, ratios, histogram means, peaks and the speculative-decoding counters.

Formulas (docs/metrics.md, "Server-side metrics"): prefix-cache hit rate = Δhits ÷ Δqueries or
Δcached ÷ Δprompt (per engine); acceptance rate = Δaccepted ÷ Δdraft tokens; mean acceptance
length = 1 + Δaccepted ÷ Δdrafts (or the engine's own); per-position acceptance = Δaccepted at
position i ÷ Δdrafts; queue time = Δsum ÷ Δcount of the histogram.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from servelab import engines
from servelab.engines.base import Engine

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


class Scrapes:
    """The scrapes of one phase (before, during, after), with the helpers engines compute their counters with."""

    def __init__(self, before: Samples, after: Samples, during: list[Samples]) -> None:
        self.before, self.after, self.all = before, after, [before, *during, after]

    def delta(self, *names: str, **labels: str) -> float | None:
        """After − before of the first present name (labels matched); None if absent in either."""
        a, b = total(self.after, *names, **labels), total(self.before, *names, **labels)
        return None if a is None or b is None else a - b

    @staticmethod
    def ratio(num: float | None, den: float | None) -> float | None:
        """num ÷ den, None when either is missing or den is 0."""
        return num / den if num is not None and den else None

    def hist_mean_ms(self, base: str) -> float | None:
        """Mean of a seconds histogram over the phase, in ms: Δ``_sum`` ÷ Δ``_count``."""
        mean = self.ratio(self.delta(base + "_sum"), self.delta(base + "_count"))
        return None if mean is None else mean * 1e3

    def peak(self, names: tuple[str, ...]) -> float | None:
        """Largest value of a gauge over every scrape (first present name), None if never present."""
        values = [v for s in self.all if (v := total(s, *names)) is not None]
        return max(values) if values else None

    def by_label(self, name: str, label: str, when: str = "after") -> dict[str, float]:
        """{label value: summed value} of one sample name in the ``before`` or ``after`` scrape."""
        return by_label(self.after if when == "after" else self.before, name, label)


def _spec_decode(s: Scrapes, prefix: str, stats: ServerStats) -> None:
    """Draft, draft-token and accepted-token counters named ``<prefix>drafts_total`` etc. (vLLM's
    scheme, which llama.cpp copies), with per-position acceptance from ``…accepted_tokens_per_pos_total{position}``."""
    stats.spec_drafts = s.delta(prefix + "drafts_total")
    stats.spec_draft_tokens = s.delta(prefix + "draft_tokens_total")
    stats.spec_accepted_tokens = s.delta(prefix + "accepted_tokens_total")
    stats.acceptance_rate = s.ratio(stats.spec_accepted_tokens, stats.spec_draft_tokens)
    if stats.spec_drafts:
        stats.mean_acceptance_length = 1 + (stats.spec_accepted_tokens or 0) / stats.spec_drafts
        pos_after = s.by_label(prefix + "accepted_tokens_per_pos_total", "position")
        pos_before = s.by_label(prefix + "accepted_tokens_per_pos_total", "position", when="before")
        if pos_after:
            order = sorted(pos_after, key=int)
            stats.per_position_acceptance = [(pos_after[p] - pos_before.get(p, 0)) / stats.spec_drafts for p in order]


def compute(engine: str | Engine, before: Samples, after: Samples, during: list[Samples]) -> ServerStats:
    """Deltas between two scrapes and peaks over all of them, for one engine (by name or object).

    An engine without known metrics (``gauges`` None) gives only the scrape count.
    """
    engine = engines.get(engine) if isinstance(engine, str) else engine
    s = Scrapes(before, after, during)
    stats = ServerStats(engine=engine.name, scrapes=len(s.all))
    if engine.gauges is None:
        return stats
    engine.server_counters(s, stats)
    if engine.spec_decode_prefix:
        _spec_decode(s, engine.spec_decode_prefix, stats)
    stats.peak_running = s.peak(engine.gauges.running)
    stats.peak_waiting = s.peak(engine.gauges.waiting)
    stats.peak_kv_usage = s.peak(engine.gauges.kv_usage)
    return stats


class MetricsWatch:
    """Scrapes ``/metrics`` before a phase, every ``SAMPLE_INTERVAL_S`` during it, and after it.

    Use ``await watch.start()`` before the phase and ``await watch.stop()`` after; ``stop`` returns
    the :class:`ServerStats`, or None when the endpoint has no metrics or a scrape failed.
    """

    def __init__(self, url: str | None, engine: str, headers: dict[str, str]) -> None:
        self.url, self.engine, self.headers = url, engines.get(engine), headers
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
        if not self.url or self.engine.gauges is None:
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
