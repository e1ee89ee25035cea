"""One request's latency metrics from its record, the percentile convention and the distribution
of a metric's values: the single definitions that the level summary (``servelab.metrics.summary``),
the per-turn figures (``servelab.metrics.turns``) and the SLOs (``servelab.metrics.slo``) all use.
Definitions: docs/metrics.md."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from servelab.values.records import RequestRecord


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) of already sorted values, linearly interpolated.

    Same convention as ``numpy.percentile(..., method="linear")`` and vLLM's benchmark
    (docs/metrics.md, "Percentiles").

    Raises:
        ValueError: ``sorted_values`` is empty.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


PERCENTILES = (50, 90, 95, 99)


class Distribution(BaseModel):
    """Mean, percentiles and range of one metric over a set of values (unit in the field name that holds it)."""

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        """Summarise ``values``; an empty input gives ``n=0`` and ``None`` everywhere."""
        data = sorted(values)
        if not data:
            return cls()
        pct = {f"p{q}": percentile(data, q) for q in PERCENTILES}
        return cls(n=len(data), mean=statistics.fmean(data), min=data[0], max=data[-1], **pct)


def ttft_ms(r: RequestRecord) -> float | None:
    """One request's TTFT, ms (docs/metrics.md); None before a first token."""
    return (r.first_token - r.start) * 1e3 if r.first_token is not None and r.start is not None else None


def e2e_ms(r: RequestRecord) -> float | None:
    """One request's E2E latency, ms (docs/metrics.md); None when it never ended."""
    return (r.end - r.start) * 1e3 if r.end is not None and r.start is not None else None


def tpot_ms(r: RequestRecord) -> float | None:
    """One request's TPOT, ms (docs/metrics.md); None with fewer than 2 tokens."""
    span = decode_span(r)
    return span * 1e3 / (r.output_tokens - 1) if span is not None else None


def itl_ms(r: RequestRecord) -> list[float]:
    """One request's inter-token latencies: the gaps between its token chunks, ms (docs/metrics.md)."""
    return [(b - a) * 1e3 for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]


def decode_span(r: RequestRecord) -> float | None:
    """Seconds from the first to the last token-bearing chunk, or None with fewer than 2 tokens
    (or no time between them): the denominator of TPOT and decode tok/s (docs/metrics.md)."""
    if not r.output_tokens or r.output_tokens < 2 or len(r.chunk_times) < 2:
        return None
    span = r.chunk_times[-1] - r.chunk_times[0]
    return span if span > 0 else None
