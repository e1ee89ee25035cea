"""Repeats of one level (``bench --repeats N``, or the same load run again): mean ± 95 % confidence
interval of each figure, and how far the repeats spread. Definitions: docs/metrics.md, "Repeats
and confidence intervals".

The interval is Student's t over the n repeats: mean ± t(0.975, n − 1) · s / √n, with s the sample
standard deviation; the critical values below are the standard two-sided 95 % table (NIST/SEMATECH
e-Handbook of Statistical Methods, §1.3.6.7.2, "Critical values of the Student's t distribution").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from servelab.metrics.summary import LevelSummary

T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # df 1–30
T_975_LARGE = 1.960  # df > 30: the normal quantile (within 2 % of t from df 30 on)
TOK_S_SPREAD = 0.05  # repeats' aggregate tok/s apart by more than this share of their median: unstable
TTFT_SPREAD = 0.15  # … TTFT p50 (steady state on vLLM 0.25, three server starts: 2.1 % and 8.5 % at most; validation/RESULTS-waves-h100.md)


class Interval(BaseModel):
    """Mean ± half-width (95 %, Student's t) of one figure over ``n`` repeats, in the figure's unit."""

    n: int
    mean: float
    half_width: float = Field(description="t(0.975, n − 1) · s / √n; 0 for one value.")

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share a value: a difference between them is not significant."""
        return self.low <= other.high and other.low <= self.high


def interval(values: Sequence[float]) -> Interval:
    """The 95 % confidence interval of the mean of ``values`` (module docstring)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(n=n, mean=mean, half_width=0.0)
    t = T_975[n - 2] if n - 1 <= len(T_975) else T_975_LARGE
    return Interval(n=n, mean=mean, half_width=t * statistics.stdev(values) / math.sqrt(n))


class RepeatStats(BaseModel):
    """One level repeated (same concurrency or rate): intervals of its figures and their spread."""

    concurrency: int
    rate_rps: float | None = None
    runs: int
    output_tok_s: Interval
    ttft_p50_ms: Interval
    ttft_p99_ms: Interval
    tpot_p50_ms: Interval | None = None
    tpot_p99_ms: Interval | None = None
    tok_s: tuple[float, float] = Field(description="(min, max) output tok/s over the repeats.")
    ttft_ms: tuple[float, float] = Field(description="(min, max) TTFT p50 over the repeats, ms.")
    tok_s_spread: float = Field(description="(max − min) ÷ median of output tok/s.")
    ttft_spread: float = Field(description="(max − min) ÷ median of TTFT p50.")

    @property
    def unstable(self) -> bool:
        """Apart by more than ``TOK_S_SPREAD`` in tok/s or ``TTFT_SPREAD`` in TTFT p50."""
        return self.tok_s_spread > TOK_S_SPREAD or self.ttft_spread > TTFT_SPREAD


def repeat_stats(levels: Sequence[LevelSummary]) -> list[RepeatStats]:
    """Every level measured at least twice among ``levels`` (same concurrency and rate, with
    successful requests and a TTFT), in order of load."""
    groups: dict[tuple[int, float | None], list[LevelSummary]] = {}
    for lv in levels:
        if lv.ok and lv.ttft_ms.p50 and lv.output_throughput_tok_s is not None:
            groups.setdefault((lv.concurrency, lv.rate_rps), []).append(lv)
    out = []
    for (c, rate), group in sorted(groups.items(), key=lambda kv: (kv[0][1] or 0, kv[0][0])):
        if len(group) < 2:
            continue
        tok = [lv.output_throughput_tok_s for lv in group]
        ttft = [lv.ttft_ms.p50 for lv in group]
        tpot50, tpot99 = [lv.tpot_ms.p50 for lv in group], [lv.tpot_ms.p99 for lv in group]
        out.append(RepeatStats(
            concurrency=c, rate_rps=rate, runs=len(group), output_tok_s=interval(tok), ttft_p50_ms=interval(ttft),
            ttft_p99_ms=interval([lv.ttft_ms.p99 for lv in group]),
            tpot_p50_ms=interval(tpot50) if None not in tpot50 else None, tpot_p99_ms=interval(tpot99) if None not in tpot99 else None,
            tok_s=(min(tok), max(tok)), ttft_ms=(min(ttft), max(ttft)),
            tok_s_spread=(max(tok) - min(tok)) / statistics.median(tok), ttft_spread=(max(ttft) - min(ttft)) / statistics.median(ttft),
        ))  # fmt: skip
    return out
