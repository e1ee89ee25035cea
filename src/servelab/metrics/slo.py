"""Service-level objectives on a level: which requests met them (goodput) and whether the level's
percentiles pass. Definitions: docs/metrics.md, "SLOs and goodput".

An SLO string (``--slo``) is a comma-separated list of ``METRIC_pPCT=VALUE`` with METRIC one of
``ttft``, ``tpot``, ``itl``, ``e2e``, PCT a percentile from 50 to 99.9, and VALUE a positive number
with unit ``ms`` or ``s``: ``ttft_p99=2s,tpot_p99=50ms``.

- A request **meets** the SLOs (DistServe's goodput, Zhong et al., OSDI 2024) when it succeeded
  and each of its own values is within every target: its TTFT, TPOT and E2E; for an ITL objective,
  its own PCT-th percentile gap between token chunks.
- **Attainment**: the share of the level's finished measured requests (successful or failed) that
  meet them. **Goodput**: the level's request and output-token throughputs times the share of
  successful requests (or of their output tokens) that meet them.
- **A level passes** an objective when the level's PCT-th percentile of the metric, over its
  successful requests, is within the target.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from servelab.errors import ServelabError
from servelab.metrics.request import e2e_ms, itl_ms, percentile, tpot_ms, ttft_ms
from servelab.values.records import RequestRecord

Metric = Literal["ttft", "tpot", "itl", "e2e"]
GRAMMAR = "METRIC_pPCT=VALUE[,…] with METRIC ttft, tpot, itl or e2e, PCT 50 to 99.9, VALUE in ms or s: ttft_p99=2s,tpot_p99=50ms"
_ITEM = re.compile(r"(ttft|tpot|itl|e2e)_p(\d{2}(?:\.\d{1,3})?)=(\d+(?:\.\d+)?)(ms|s)")


class Objective(BaseModel):
    """One objective: the ``percentile`` (50–99.9) of ``metric`` within ``target_ms``."""

    metric: Metric
    percentile: float = Field(ge=50, le=99.9)
    target_ms: float = Field(gt=0)

    @property
    def key(self) -> str:
        """Its name as written: ``ttft_p99``."""
        return f"{self.metric}_p{self.percentile:g}"


def parse_slo(text: str, option: str = "--slo") -> list[Objective]:
    """Objectives from an SLO string (module docstring).

    Raises:
        ServelabError: a malformed item, a percentile outside 50–99.9, a zero target or one metric
            and percentile given twice; the one line shows the grammar.
    """
    out: dict[str, Objective] = {}
    for item in (s.strip() for s in text.split(",")):
        m = _ITEM.fullmatch(item)
        pct = float(m.group(2)) if m else 0.0
        value = float(m.group(3)) * (1000 if m and m.group(4) == "s" else 1) if m else 0.0
        if not m or not 50 <= pct <= 99.9 or value <= 0:
            raise ServelabError(f"{option} {text!r}: {item!r} is not an objective; give {GRAMMAR}")
        obj = Objective(metric=m.group(1), percentile=pct, target_ms=value)
        if obj.key in out:
            raise ServelabError(f"{option} {text!r}: {obj.key} is given twice; give each metric and percentile once")
        out[obj.key] = obj
    return list(out.values())


class Check(BaseModel):
    """One objective at one level: the level's percentile against the target, ms."""

    key: str
    target_ms: float
    measured_ms: float | None = Field(description="The level's percentile over its successful requests; None without any.")
    passed: bool


class SloResult(BaseModel):
    """The SLOs at one level (docs/metrics.md, "SLOs and goodput")."""

    attainment: float | None = Field(description="Share of finished measured requests (ok or failed) that met every objective.")
    good_requests: int = Field(description="Successful measured requests that met every objective.")
    goodput_rps: float | None = Field(description="Request throughput × the share of successful requests that met every objective, req/s.")
    goodput_tok_s: float | None = Field(description="Output throughput × the share of successful requests' output tokens from those that met every objective, tok/s.")
    checks: list[Check]

    @property
    def passed(self) -> bool:
        """Every objective's percentile within its target, over at least one request that met them
        all: a level in which no request completed (or none met them) never passes."""
        return self.good_requests > 0 and all(c.passed for c in self.checks)


def _values(metric: Metric, q: float) -> Callable[[RequestRecord], float | None]:
    """A request's own value of ``metric`` (for ITL its ``q``-th percentile gap), ms; None when it has none."""
    if metric == "itl":
        return lambda r: percentile(sorted(gaps), q) if (gaps := itl_ms(r)) else None
    return {"ttft": ttft_ms, "tpot": tpot_ms, "e2e": e2e_ms}[metric]


def evaluate(objectives: Sequence[Objective], records: Sequence[RequestRecord], request_rps: float | None, output_tok_s: float | None) -> SloResult:
    """The SLOs at one level: its measured ``records`` and its request and output throughputs
    (``LevelSummary.request_throughput_rps``, ``output_throughput_tok_s``)."""
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.status == "ok"]
    finished = ok + [r for r in measured if r.status == "failed"]

    def meets(r: RequestRecord) -> bool:
        for o in objectives:
            value = _values(o.metric, o.percentile)(r)
            if (value is None and o.metric == "ttft") or (value is not None and value > o.target_ms):  # no first token: no TTFT met
                return False
        return True

    good = [r for r in ok if meets(r)]
    tokens = sum(r.output_tokens or 0 for r in ok)
    checks = []
    for o in objectives:
        per_request = _values(o.metric, o.percentile)
        values = sorted(v for gaps in (itl_ms(r) for r in ok) for v in gaps) if o.metric == "itl" else sorted(
            v for r in ok if (v := per_request(r)) is not None)  # fmt: skip
        measured_ms = percentile(values, o.percentile) if values else None
        checks.append(Check(key=o.key, target_ms=o.target_ms, measured_ms=measured_ms, passed=measured_ms is not None and measured_ms <= o.target_ms))
    return SloResult(
        attainment=len(good) / len(finished) if finished else None,
        good_requests=len(good),
        goodput_rps=request_rps * len(good) / len(ok) if ok and request_rps is not None else None,
        goodput_tok_s=output_tok_s * sum(r.output_tokens or 0 for r in good) / tokens if tokens and output_tok_s is not None else None,
        checks=checks,
    )  # fmt: skip
