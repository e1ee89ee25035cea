"""The open loop (``--rate``): requests arrive at a rate, gamma-distributed gaps of shape
``--burstiness`` (1 = Poisson), whatever the server's pace; ``--max-concurrency`` caps the requests
in flight (the rest wait on the client side, reported apart from TTFT).

A level is a closed-loop warm-up of one stream, then the arrivals.
"""

from __future__ import annotations

import math

from servelab.load.client import StreamClient
from servelab.run.levels import Levels
from servelab.run.mode import LoadMode
from servelab.run.options import BenchOptions


class OpenLoop(LoadMode):
    """Open-loop levels of single requests, one per rate (module docstring)."""

    @classmethod
    def applies(cls, options: BenchOptions) -> bool:
        return bool(options.rates)

    def asked(self, options: BenchOptions) -> list[tuple[float | None, int]]:
        return [(rate, options.max_concurrency or 0) for rate in options.rates]

    async def run(self, levels: Levels, client: StreamClient, rate: float | None, concurrency: int) -> None:
        o = levels.opts
        levels.begin()
        n_warm = o.warmup if o.warmup is not None else 1
        if n_warm:
            await levels.phase(client, 1, "warmup", n_warm, None, n_warm)
        count = o.requests_at_rate(rate)
        pool = count if count is not None else math.ceil(1.5 * rate * o.duration_s) + 4
        measured = await levels.phase(client, concurrency, "measured", count, o.duration_s, pool, rate=rate)
        levels.conclude_open(concurrency, rate, measured)
