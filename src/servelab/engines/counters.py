"""What a server's Prometheus counters say about one measured phase (:class:`ServerStats`), and
the scrapes (:class:`Scrapes`) engines compute it from.

Which names an engine exposes is the engine's (``Engine.server_counters``); scraping ``/metrics``
and the steps every engine shares (speculative-decoding counters, gauge peaks) are
``servelab.metrics.server``. Formulas: docs/metrics.md, "Server-side metrics".
"""

from __future__ import annotations

import math
from collections import defaultdict

from pydantic import BaseModel, Field

Samples = dict[str, list[tuple[dict[str, str], float]]]
MAX_FIGURE = 1e15  # no counter of one phase, gauge or mean in ms comes near it (10^15 tokens); 7e300 is a lie
SHARES = {"prefix_cache_hit_rate", "acceptance_rate", "peak_kv_usage"}  # fractions 0–1


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
    rejected: dict[str, str] = Field(default_factory=dict, description="Figures the server's /metrics gave impossible values for "
                                     "(not finite, negative, above 1e15, a share above 100 %): left out (None), with the value seen.")

    def reject_impossible(self) -> None:
        """Leave out (set to None, note in ``rejected``) every figure no server can mean: not finite,
        negative (a counter that went back: a restart), above :data:`MAX_FIGURE`, or a share
        (:data:`SHARES`) above 1. A server's numbers are reported, never believed."""
        if self.spec_drafts and self.spec_draft_tokens is not None and self.mean_acceptance_length is not None and not (
                self.mean_acceptance_length <= 1 + self.spec_draft_tokens / self.spec_drafts + 1e-9):  # more accepted than drafted
            self.rejected["mean_acceptance_length"], self.mean_acceptance_length = repr(self.mean_acceptance_length), None
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "per_position_acceptance" and value is not None:
                if any(not 0 <= v <= 1 for v in value):  # NaN fails both comparisons
                    self.rejected[name], self.per_position_acceptance = str(value)[:200], None
            elif isinstance(value, int | float) and not isinstance(value, bool) and not (0 <= value <= (1 + 1e-9 if name in SHARES else MAX_FIGURE)):
                self.rejected[name] = repr(value)
                setattr(self, name, None)


class Scrapes:
    """The scrapes of one phase (before, during, after), with the helpers engines compute their counters with."""

    def __init__(self, before: Samples, after: Samples, during: list[Samples]) -> None:
        self.before, self.after, self.all = before, after, [before, *during, after]

    def delta(self, *names: str, **labels: str) -> float | None:
        """After − before of the first present name (labels matched); None if absent in either."""
        a, b = total(self.after, *names, **labels), total(self.before, *names, **labels)
        if a is None or b is None:
            return None
        return a - b if 0 <= a <= MAX_FIGURE and 0 <= b <= MAX_FIGURE else math.nan  # 7e300 − 7e300 is no 0 tokens: NaN, rejected

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
        if any(v != v for v in values):  # a NaN sample: max() would keep or drop it by its place; NaN, for reject_impossible
            return math.nan
        return max(values) if values else None

    def by_label(self, name: str, label: str, when: str = "after") -> dict[str, float]:
        """{label value: summed value} of one sample name in the ``before`` or ``after`` scrape."""
        return by_label(self.after if when == "after" else self.before, name, label)
