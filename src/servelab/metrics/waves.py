"""Synchronized waves in a closed loop: are the sends of one level clustered in bursts?

With identical prompt and output lengths, N requests that start together are prefilled together,
decode together and finish together; the closed loop then sends the next N at once, and the burst
repeats (issue 20; measured on vLLM 0.25 at 256 streams: TTFT p50 by wave 3,507 / 2,599 / 635 /
3,197 ms). TTFT at such a level depends on where each wave falls, not only on the server.

Definitions (docs/metrics.md, "Synchronized waves"): the measured requests in send order are cut
into waves of ``concurrency`` consecutive sends. A wave's *send spread* is the time from its first
to its last send divided by the level's median E2E latency; the level's is the median over waves.
In a steady closed loop, N sends are spread over one request's duration (≈ (N−1)/N); in locked
waves they come within milliseconds (≈ 0). The *densest-10% share* is the largest fraction of the
level's sends that fall within any interval of 10% of the window (uniform sends: ≈ 0.1).

Sends spread over a request's duration can still bunch inside the engine: prompts whose first tokens came out of one
engine step form a *cohort*, and where the steps that carry prompts are slow (on vLLM 0.25, a small MoE's steps above the
largest CUDA-graph capture size, host-bound) the cohorts merge as the load runs, until the streams run in waves of many
prompts a step (DeepSeek-V2-Lite at 64 streams: 3.6 prompts a step in its first 10 s, 10.7 in its sixth; OLMoE-1B-7B and
Granite-3.1-3B-A800M: 7.5–11.4 from the start; validation/RESULTS-predict.md). *Prompts per step* (docs/metrics.md, "prompts
per step"): the measured requests' first tokens in time order, a new step wherever two are more than ``COHORT_GAP`` × the
level's median inter-token latency (one decode step) apart; the measured requests ÷ the steps, over the level and over each
third of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from servelab.values.records import RequestRecord

MIN_CONCURRENCY = 2  # one stream cannot form waves
MIN_WAVES = 2
SYNC_SPREAD = 0.25  # a median wave send spread below this is "synchronized" (steady state ≈ (N−1)/N)
DENSE_FRACTION = 0.1
DENSE_SHARE = 0.2  # twice the uniform 0.1: a level this dense is bursty even if its later waves drifted apart
DENSE_MIN_SENDS = 64  # below this the densest-10% share of uniform sends is too noisy to judge
COHORT_GAP = 0.5  # first tokens closer than this share of one decode step (the median inter-token latency) came out of one engine step
BUNCHED = 3.0  # prompts per step at or above this: the level's prompts rode in cohorts (finding bunched_prompts)


class WaveStats(BaseModel):
    """How clustered one closed-loop level's sends were (module docstring; docs/metrics.md)."""

    concurrency: int = Field(0, description="Streams of the level (the size of a wave); 0 in runs written before it was recorded.")
    waves: int = Field(description="Waves of `concurrency` consecutive sends among the measured requests.")
    send_spread: float = Field(description="Median over waves of (last − first send) ÷ median E2E latency; ≈0 locked, ≈(N−1)/N steady.")
    densest_share: float = Field(description="Largest fraction of sends within any 10% of the window (uniform ≈ 0.1).")
    ttft_p50_ms_by_wave: list[float | None] = Field(description="TTFT p50 of the successful requests of each wave, ms.")
    prompts_per_step: float | None = Field(None, description="Measured requests ÷ the engine steps their first tokens came out of (module docstring); None before it was recorded.")
    prompts_per_step_by_third: list[float] = Field(default_factory=list, description="The same over each third of the level, in time order: cohorts that merge as the load runs grow.")

    @property
    def synchronized(self) -> bool:
        """True when the waves are locked (``send_spread`` below ``SYNC_SPREAD``), or, with at least
        ``DENSE_MIN_SENDS`` sends, when a tenth of the window holds ``DENSE_SHARE`` of them (waves
        that were locked for part of the level: measured on vLLM 0.25, burst levels gave 0.25 and
        steady ones 0.13–0.15, validation/RESULTS-waves-h100.md)."""
        dense = self.waves * self.concurrency >= DENSE_MIN_SENDS and self.densest_share >= DENSE_SHARE
        return self.send_spread < SYNC_SPREAD or dense

    @property
    def ttft_spread(self) -> float | None:
        """Highest ÷ lowest wave TTFT p50 (1 = the waves agree), or None without two waves with a TTFT."""
        values = [v for v in self.ttft_p50_ms_by_wave if v]
        return max(values) / min(values) if len(values) >= 2 else None


def wave_stats(concurrency: int, records: Sequence[RequestRecord], window_s: float | None) -> WaveStats | None:
    """Wave statistics of one closed-loop level's measured records, or None where waves cannot be
    told (fewer than 2 streams, fewer than 2 full waves, or no successful request to time).

    Args:
        concurrency: the level's streams.
        records: the level's records (only ``phase == "measured"`` ones with a send time count).
        window_s: the level's measured window, s (for the densest-10% share).
    """
    sent = sorted((r for r in records if r.phase == "measured" and r.start is not None), key=lambda r: r.start)
    e2e = [r.end - r.start for r in sent if r.status == "ok" and r.end is not None]
    if concurrency < MIN_CONCURRENCY or len(sent) < MIN_WAVES * concurrency or not e2e:
        return None
    cycle = statistics.median(e2e)
    waves = [sent[i : i + concurrency] for i in range(0, len(sent) - concurrency + 1, concurrency)]
    spreads = [(w[-1].start - w[0].start) / cycle for w in waves] if cycle > 0 else [0.0]
    ttfts = []
    for wave in waves:
        values = sorted((r.first_token - r.start) * 1e3 for r in wave if r.status == "ok" and r.first_token is not None)
        ttfts.append(round(statistics.median(values), 1) if values else None)  # = the linear p50 (docs/metrics.md)
    per_step, by_third = prompts_per_step(sent)
    return WaveStats(
        concurrency=concurrency,
        waves=len(waves),
        send_spread=round(statistics.median(spreads), 4),
        densest_share=round(_densest_share([r.start for r in sent], DENSE_FRACTION * (window_s or cycle)), 4),
        ttft_p50_ms_by_wave=ttfts,
        prompts_per_step=per_step,
        prompts_per_step_by_third=by_third,
    )


def bunched(per_step: float, expected: float) -> bool:
    """Whether a staggered level's ``per_step`` prompts a step (:func:`prompts_per_step`) bunched beyond ``expected``, the
    prompts a step predict's cohorts carry at its load: at least ``BUNCHED`` and twice ``expected`` (cohorts that merged as the
    load ran: the finding ``bunched_prompts``, docs/metrics.md "prompts per step")."""
    return per_step >= max(BUNCHED, 2 * expected)


def prompts_per_step(records: Sequence[RequestRecord]) -> tuple[float | None, list[float]]:
    """Prompts per engine step of the successful ``records`` with a first token (module docstring), over all of them and over
    each third of their first tokens' span (:func:`cohorts`); (None, []) without two such records or a median inter-token latency."""
    ok = [r for r in records if r.status == "ok" and r.first_token is not None]
    gaps = [b - a for r in ok for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    if len(ok) < 2 or not gaps or statistics.median(gaps) <= 0:
        return None, []
    per_step, by_third = cohorts([r.first_token for r in ok], COHORT_GAP * statistics.median(gaps))
    return round(per_step, 2), [round(x, 2) for x in by_third]


def cohorts(firsts: Sequence[float], gap: float) -> tuple[float, list[float]]:
    """Prompts per step of first tokens at ``firsts`` (s, any order; at least one), a new step wherever two are more than ``gap``
    (s) apart: over all of them, and over each third of their span in time order, each step in the third its first token falls
    in (thirds without a step left out; [] when the span is 0: one step)."""
    times = sorted(firsts)
    steps: list[list[float]] = [[times[0]]]
    for a, b in zip(times, times[1:], strict=False):
        if b - a > gap:
            steps.append([])
        steps[-1].append(b)
    span = times[-1] - times[0]
    thirds: list[list[list[float]]] = [[], [], []]
    for step in steps:
        thirds[min(2, int(3 * (step[0] - times[0]) / span)) if span > 0 else 0].append(step)
    by_third = [sum(map(len, part)) / len(part) for part in thirds if part] if span > 0 else []
    return len(times) / len(steps), by_third


def _densest_share(starts: list[float], width: float) -> float:
    """Largest fraction of the sorted ``starts`` inside any interval of ``width`` seconds."""
    best, lo = 0, 0
    for hi, t in enumerate(starts):
        while t - starts[lo] > width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best / len(starts)
