"""The closed loop (``--concurrency``, ``--closed-loop stagger|burst``): a level keeps ``concurrency``
requests in flight, each stream sending its next request when one ends.

A level is a warm-up (recorded, not counted), then the measured phase: ``stagger`` ramps its
streams up over one request's duration (the warm-up's median E2E; the ramp's requests count as
warm-up), ``burst`` starts them together (waves may stay synchronized: ``metrics.waves``).
"""

from __future__ import annotations

import math
import statistics

from servelab.load.client import StreamClient
from servelab.metrics.summary import summarize
from servelab.metrics.waves import wave_stats
from servelab.run.levels import Levels
from servelab.run.mode import LoadMode
from servelab.run.options import BenchOptions


class ClosedLoop(LoadMode):
    """Closed-loop levels of single requests (module docstring); the default mode."""

    @classmethod
    def applies(cls, options: BenchOptions) -> bool:
        return True

    async def run(self, levels: Levels, client: StreamClient, rate: float | None, concurrency: int) -> None:
        o = levels.opts
        level = concurrency
        levels.begin()
        n_warm = o.warmup if o.warmup is not None else level
        e2e_s = None
        if n_warm:
            warm_phase = await levels.phase(client, level, "warmup", n_warm, None, n_warm)
            done = [r.end - r.start for r in warm_phase.records if r.status == "ok" and r.start is not None]
            e2e_s = statistics.median(done) if done else None
        count = o.requests_at(level)
        # stagger: the measured phase ramps its streams up over one request's duration (the warm-up's
        # median E2E); the ramp's requests are warm-up, so the pool holds them too
        stagger_s = e2e_s if o.closed_loop == "stagger" and e2e_s and level > 1 else 0.0
        if count is not None:
            pool = count + (2 * level if stagger_s else 0)
        else:
            # Enough unique prompts for the whole duration at the warm-up's pace, with 50% to spare.
            per_slot = o.duration_s / e2e_s if e2e_s else 16
            pool = max(2 * level, math.ceil(1.5 * level * per_slot) + level)
        measured = await levels.phase(client, level, "measured", count, o.duration_s, pool, stagger_s=stagger_s)
        summary = summarize(level, measured.records, measured.window)
        summary.waves = wave_stats(level, measured.records, summary.window_s)
        levels.conclude(summary, measured, level)
