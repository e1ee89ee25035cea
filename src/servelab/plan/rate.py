"""``servelab predict --rate``: an open-loop level (requests arriving at λ per second) from the
closed-loop prediction (``servelab.plan.predict``), by Little's law.

In a steady state the requests in flight N and the arrival rate λ satisfy N = λ · E2E(N), E2E(N)
being the closed-loop E2E latency at N streams (arrivals spread in time, as ``stagger``). Starting
from N = 1, N ← ⌈λ · E2E(N)⌉ grows until it holds (E2E grows with N, so the first N where
⌈λ · E2E(N)⌉ ≤ N is the fixed point, to the request). When N would pass what the server runs at once
(max_num_seqs, or the requests the KV cache holds) the server is **saturated**: requests arrive faster
than it completes them (at most ``cap ÷ E2E(cap)`` per second), its queue grows for as long as the
arrivals last, and TTFT and E2E with it; the level reports the server's ceiling instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from servelab.plan.predict import Point


@dataclass(frozen=True)
class RatePoint:
    """One open-loop level: the arrival rate (requests/s), the closed-loop point at the requests in
    flight it settles to (``point.concurrency``), and whether the server keeps up."""

    rate_rps: float
    point: Point
    saturated: bool


def at_rate(point_at: Callable[[int], Point], rate_rps: float, output_tokens: int, cap: int) -> RatePoint:
    """The open-loop level at ``rate_rps`` (module docstring).

    Args:
        point_at: the closed-loop prediction at a number of streams.
        output_tokens: O per request (aggregate tok/s = λ · O while the server keeps up).
        cap: requests the server runs at once (max_num_seqs, or the requests the KV cache holds).
    """
    streams = 1
    while True:
        point = point_at(streams)
        needed = max(1, math.ceil(rate_rps * point.e2e_s))
        if needed > cap:
            top = point_at(cap)
            return RatePoint(rate_rps, replace(top, bottleneck=f"saturated above {cap / top.e2e_s:,.2f} req/s ({top.bottleneck})"), True)
        if needed <= streams:
            return RatePoint(rate_rps, replace(point, aggregate_tok_s=rate_rps * output_tokens), False)
        streams = needed
