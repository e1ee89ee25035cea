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

from servelab import engines
from servelab.engines.base import Engine
from servelab.engines.counters import Samples, Scrapes, ServerStats

SAMPLE_INTERVAL_S = 1.0


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

    An engine without known metrics (``gauges`` None) gives only the scrape count. Impossible values
    (NaN, ±Inf, negative deltas, above 1e15, shares above 100 %) are left out and listed in
    ``rejected`` (``ServerStats.reject_impossible``).
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
    stats.reject_impossible()
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
