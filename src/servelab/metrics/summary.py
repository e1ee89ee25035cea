"""RequestRecords → per-level summary. Every metric here is defined once, in ``docs/metrics.md``.

Latency statistics use only requests that succeeded (``status == "ok"``); failed and incomplete
requests are counted in every summary (``failed``, ``incomplete``, ``error_kinds``) and make the
level's ``failed`` flag true, so an overloaded server cannot look better by dropping requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field, model_validator

from servelab.engines.counters import ServerStats
from servelab.metrics.gpu import GpuStats
from servelab.metrics.waves import WaveStats
from servelab.metrics.request import Distribution, decode_span, e2e_ms, itl_ms, ttft_ms
from servelab.metrics.slo import SloResult
from servelab.metrics.turns import SessionStats
from servelab.values.records import RequestRecord

class LevelSummary(BaseModel):
    """Summary of the measured requests at one concurrency level (docs/metrics.md)."""

    concurrency: int = Field(ge=0, description="Requests kept in flight (closed loop), or the in-flight cap of an open-loop level (0: none).")
    rate_rps: float | None = Field(None, description="Open loop: target arrival rate, requests/s.")
    achieved_rate_rps: float | None = Field(None, description="Open loop: requests started per second, first to last start.")
    ok: int = Field(ge=0, description="Requests that finished successfully.")
    failed_requests: int = Field(ge=0, description="Requests that got an HTTP, connection, timeout or stream error.")
    incomplete: int = Field(ge=0, description="Requests cut off by the end of the run or an interruption.")
    error_kinds: dict[str, int] = Field(default_factory=dict)
    window_s: float | None = Field(None, description="Measured window (s): the duration, first to last measured send (stagger), or first start to last end (docs/metrics.md).")
    prompt_tokens: int = 0
    output_tokens: int = Field(0, description="Output tokens of the measured requests (an incomplete one: the token chunks it received).")
    window_output_tokens: int = Field(
        0, description="Output tokens delivered inside the window by any request, ramp requests included: the numerator of output throughput."
    )
    output_throughput_tok_s: float | None = Field(None, ge=0)
    request_throughput_rps: float | None = Field(None, ge=0)
    client_wait_ms: Distribution = Field(default_factory=Distribution)
    ttft_ms: Distribution = Field(default_factory=Distribution)
    ttfc_ms: Distribution = Field(default_factory=Distribution)
    e2e_ms: Distribution = Field(default_factory=Distribution)
    tpot_ms: Distribution = Field(default_factory=Distribution)
    itl_ms: Distribution = Field(default_factory=Distribution)
    decode_tok_s: Distribution = Field(default_factory=Distribution)
    prefill_tok_s: Distribution = Field(default_factory=Distribution)
    server: ServerStats | None = Field(None, description="What the server's /metrics counters say about the measured phase.")
    gpu: GpuStats | None = Field(None, description="NVML telemetry of the measured phase, where NVML is available.")
    ramp_requests: int = Field(0, description="Closed loop, stagger: requests sent while the streams ramped up; not measured, but in the server's counters.")
    ramp_prompt_tokens: int = 0
    ramp_output_tokens: int = 0
    waves: WaveStats | None = Field(None, description="Closed loop: how clustered the sends were (metrics/waves.py).")
    client_cpu: float | None = Field(None, description="CPU time of servelab's own process over the measured phase's wall time (1.0 = one core busy throughout).")
    short_outputs: int = Field(0, description="With ignore_eos: successful requests that returned fewer tokens than max_tokens (the server did not honour it).")
    stream_anomalies: dict[str, int] = Field(default_factory=dict, description="Measured requests per kind of stream anomaly: what the server sent that was not believed (records.Anomaly).")
    slo: SloResult | None = Field(None, description="With --slo: goodput, attainment and each objective's check at this level (metrics/slo.py).")
    client_cached_prompt_tokens: int = Field(0, description="Prompt tokens the server's usage said came from its prefix cache (usage.prompt_tokens_details.cached_tokens), successful measured requests.")
    sessions: SessionStats | None = Field(None, description="Multi-turn sessions: how they ended and each turn's TTFT, context and prefix-cache hit rate (metrics/turns.py).")
    record_span: tuple[int, int] | None = Field(None, description="First and last record index of the level (warm-up included).")
    jit_kernels: list[str] = Field(default_factory=list, description="Kernels the server's log says it compiled (JIT) during the measured phase: not a measurement (finding jit_compile, docs/metrics.md).")
    cut_short: bool = Field(False, description="The level did not finish (the server stopped answering, or Ctrl-C): it covers what ran; a resumed run measures it again.")
    decode_ceiling_tok_s: float | None = Field(
        None, description="Roofline decode ceiling per stream at this batch (servelab plan), when model and hardware are known."
    )

    @property
    def pct_of_ceiling(self) -> float | None:
        """Median per-request decode tok/s as a percentage of the decode ceiling (docs/metrics.md)."""
        if not self.decode_ceiling_tok_s or self.decode_tok_s.p50 is None:
            return None
        return 100.0 * self.decode_tok_s.p50 / self.decode_ceiling_tok_s

    @property
    def phase_prompt_tokens(self) -> int:
        """Prompt tokens of every request of the measured phase, ramp included: what the server's counters saw."""
        return self.prompt_tokens + self.ramp_prompt_tokens

    @property
    def phase_output_tokens(self) -> int:
        """Output tokens of every request of the measured phase, ramp included: what the server's counters saw."""
        return self.output_tokens + self.ramp_output_tokens

    @property
    def failed(self) -> bool:
        """True when any request at this level failed. (Requests still in flight at the end of a
        duration are ``incomplete``, expected and counted.) A level cut short counts as failed."""
        return self.failed_requests > 0 or self.cut_short

    @model_validator(mode="after")
    def _times_not_negative(self) -> LevelSummary:
        """TTFT, TPOT, ITL and E2E are durations: a negative one (a run.json edited by hand) is refused
        where it is read (``store.results.read_document``), never compared or explained."""
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            stats = getattr(self, name)
            if any(v is not None and v < 0 for v in (stats.mean, stats.p50, stats.p90, stats.p95, stats.p99, stats.min)):
                raise ValueError(f"{name} holds a negative duration")
        return self


def summarize(
    concurrency: int, records: Sequence[RequestRecord], window: tuple[float, float] | None = None
) -> LevelSummary:
    """Summarise the measured ``records`` of one concurrency level.

    Args:
        concurrency: the level (requests kept in flight).
        records: the level's measured records (warm-up and calibration records are ignored).
        window: (start, end) in run seconds for throughput; default first ``start`` (or ``queued``)
            to last ``end`` of the records. Duration-bounded runs pass their fixed window.

    Returns:
        A :class:`LevelSummary`; latency distributions cover successful requests only.
    """
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.status == "ok"]
    failed = [r for r in measured if r.status == "failed"]
    incomplete = [r for r in measured if r.status == "incomplete"]
    if window is None and measured:
        starts = [r.start if r.start is not None else r.queued for r in measured]
        ends = [r.end for r in measured if r.end is not None]
        window = (min(starts), max(ends)) if ends else None
    window_s = (window[1] - window[0]) if window else None
    out_tokens = _delivered(ok + incomplete)
    ramp = [r for r in records if r.phase == "warmup"]
    in_window = round(sum(_delivered_in(r, window) for r in ok + incomplete + ramp)) if window else out_tokens
    finished_inside = [r for r in ok + ramp if r.status == "ok" and r.end is not None and window[0] <= r.end <= window[1]] if window else []
    spans = {id(r): decode_span(r) for r in ok}
    with_ttft = [r for r in ok if r.first_token is not None and r.start is not None]
    summary = LevelSummary(
        concurrency=concurrency,
        ok=len(ok),
        failed_requests=len(failed),
        incomplete=len(incomplete),
        error_kinds=dict(Counter(r.error_kind or "unknown" for r in failed + incomplete)),
        window_s=window_s,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        output_tokens=out_tokens,
        window_output_tokens=in_window,
        ramp_requests=len(ramp),
        ramp_prompt_tokens=sum(r.prompt_tokens or 0 for r in ramp if r.status == "ok"),
        ramp_output_tokens=_delivered([r for r in ramp if r.status != "failed"]),
        output_throughput_tok_s=in_window / window_s if window_s else None,
        request_throughput_rps=len(finished_inside) / window_s if window_s else None,
        client_wait_ms=Distribution.of((r.start - r.queued) * 1e3 for r in measured if r.start is not None),
        ttft_ms=Distribution.of(ttft_ms(r) for r in with_ttft),
        ttfc_ms=Distribution.of(
            (r.first_content - r.start) * 1e3 for r in ok if r.first_content is not None and r.start is not None
        ),
        e2e_ms=Distribution.of(v for r in ok if (v := e2e_ms(r)) is not None),
        tpot_ms=Distribution.of(
            spans[id(r)] * 1e3 / (r.output_tokens - 1) for r in ok if spans[id(r)] is not None
        ),
        itl_ms=Distribution.of(v for r in ok for v in itl_ms(r)),
        decode_tok_s=Distribution.of((r.output_tokens - 1) / spans[id(r)] for r in ok if spans[id(r)] is not None),
        prefill_tok_s=Distribution.of(
            r.prompt_tokens / (r.first_token - r.start) for r in with_ttft if r.prompt_tokens and r.first_token > r.start
        ),
        stream_anomalies=dict(Counter(a for r in measured for a in r.anomalies)),
        client_cached_prompt_tokens=sum(r.cached_prompt_tokens or 0 for r in ok),
    )
    return summary


def _delivered(records: Sequence[RequestRecord]) -> int:
    """Output tokens of successful and incomplete requests: an incomplete one never got a usage
    chunk, so what it delivered is its chunk count."""
    return sum((r.output_tokens or 0) if r.status == "ok" else len(r.chunk_times) for r in records)


def _delivered_in(r: RequestRecord, window: tuple[float, float]) -> float:
    """Output tokens one request delivered inside ``window`` (run seconds): its tokens
    (``_delivered``) times the share of its token chunks that arrived inside; a failed request
    delivers none (docs/metrics.md, output throughput)."""
    if r.status == "failed" or r.start is None:
        return 0.0
    tokens = _delivered([r])
    if not r.chunk_times:
        return float(tokens) if window[0] <= r.start <= window[1] else 0.0
    inside = sum(window[0] <= r.start + t <= window[1] for t in r.chunk_times)
    return tokens * inside / len(r.chunk_times)
