"""A grid of server configurations priced by ``servelab predict`` for ``servelab tune``: each
point's settings as predict's variant, its capacity within the SLO with its band and bottleneck, or
why it does not fit; the calibration and each objective's percentile factor refitted on measured
probes (``Pricer.refit``); what the launches measured beyond those predictions, attributed to the
grid's values (``value_effects``); whether any point can meet the SLO at all (``unreachable``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.errors import ServelabError
from servelab.metrics.slo import Objective
from servelab.metrics.summary import LevelSummary
from servelab.plan.band import Band
from servelab.plan.calibration import Calibration
from servelab.plan.curves import Curve, PredictedLoad, Within, price, within
from servelab.plan.fit import Measured, fit, fittable, prior_widths
from servelab.plan.quant import kv_dtype_bytes
from servelab.store.results import load_run
from servelab.store.tuning import TuneDocument, TunePoint
from servelab.values.specs import Hardware, ModelSpec

PRIOR_BAND = 0.3  # before any launch, each predicted time × (1 ± 0.3) where the model's family class has no band (servelab.plan.band gives one: Pricer.prior_band); a capacity within TTFT/TPOT objectives moves with it
FLOOR_BAND = 0.1  # the band never narrows below ± 10 %: capacity's own search stops within 10 % (servelab.run.capacity.PRECISION)


def class_band(band: Band) -> float:
    """The half-width a capacity is priced with before any launch: the family class's tok/s band
    (``servelab.plan.band``), at least ``FLOOR_BAND`` (servelab tune's prior, capacity's predicted start)."""
    return max(FLOOR_BAND, band.tok_s)


EFFECT_PRIOR = 1.0  # value_effects' ridge λ: a launch's log residual is spread over its values and this prior, so one launch moves a value it holds by at most 1 ÷ (values + 1) of it
ACCEPTANCE = 0.7  # speculative decoding's acceptance rate where a point drafts tokens (predict's default)
ASSUMPTIONS = ("a point's capacity is the largest closed-loop concurrency whose predicted means (TTFT with the queue's wait) meet the percentiles' targets; "
               f"speculative acceptance {ACCEPTANCE}; uniform MoE routing; every engine's scheduler priced as vLLM's")  # fmt: skip


def _variant(settings: dict[str, str | None]) -> dict:
    """A point's settings as predict's variant (``servelab.plan.curves.price``).

    Raises:
        ServelabError: a weight format or KV-cache dtype servelab does not know.
    """

    def number(key: str, kind: type) -> int | float | None:
        return kind(settings[key]) if settings.get(key) is not None else None

    kv = settings.get("kv-cache-dtype")
    return {"quant": settings["quantization"], "tp": int(settings["tp"] or 1), "draft-tokens": int(settings.get("draft-tokens") or 0),
            "acceptance": ACCEPTANCE, "max-num-seqs": number("max-num-seqs", int), "max-num-batched-tokens": number("max-num-batched-tokens", int),
            "routing": 1.0, "max-capture-size": number("max-capture-size", int), "kv-dtype-bytes": kv_dtype_bytes(kv) if kv and kv != "auto" else 2.0,
            "gpu-memory-utilization": number("gpu-memory-utilization", float)}  # fmt: skip


@dataclass
class Pricer:
    """Prices grid points with ``servelab predict`` for one model on one hardware profile at the load's
    prompt and output tokens; ``cal`` is refitted as launches are measured (:meth:`refit`)."""

    spec: ModelSpec
    hw: Hardware
    cal: Calibration
    load: PredictedLoad
    objectives: list[Objective]
    factors: dict[str, float] = field(default_factory=dict)  # objective key → measured percentile ÷ predicted mean (refit)
    prior_band: float = PRIOR_BAND  # before any launch: the family class's tok/s band (servelab.plan.band), at least FLOOR_BAND
    host_band: float = 0.0  # … at least, a host-bound point's (its predicted capacity host-bound: servelab.plan.band.point_band; the refit fits the host's scale only where a probe is host-bound)
    prior: Calibration = field(init=False)  # the calibration tune started from: every refit's prior

    def __post_init__(self) -> None:
        self.prior = self.cal

    def curve(self, settings: dict[str, str | None]) -> Curve | str:
        """The point's curve, or why it does not fit (plan's one line).

        Raises:
            ServelabError: a weight format or KV-cache dtype servelab does not know.
        """
        curves, unfit = price(self.spec, self.hw, self.cal, [_variant(settings)], self.load)
        return curves[0] if curves else unfit[0][1]

    def within(self, settings: dict[str, str | None], band: float) -> Within | str:
        """The point's predicted capacity within the objectives, each target ÷ its factor
        (``servelab.plan.curves.within``), its bracket ``band`` wide, at least ``host_band`` where that capacity is host-bound (as
        predict and capacity show it: the calibration's refit on launches fits the host's scale only where a probe is host-bound); or why it does not fit."""
        curve = self.curve(settings)
        if isinstance(curve, str):
            return curve
        targets = [o.model_copy(update={"target_ms": o.target_ms / self.factors.get(o.key, 1.0)}) for o in self.objectives]
        got = within(curve, targets, band)
        if 0 < band < self.host_band and got.streams and curve.at(got.streams).host_bound:  # band 0: the capacity alone is asked for
            got = within(curve, targets, self.host_band)
        return got

    def refit(self, launched: list[tuple[TunePoint, Path]]) -> None:
        """Fit the calibration on every probe level measured at the launched points (their run
        directories under each point's directory), as ``servelab calibrate`` does, with the calibration tune started from as the
        prior (``servelab.plan.fit.fit``; its efficiencies held narrowly where the GPU tuned is of the generation it was fitted on,
        ``fit.prior_widths``): what the probes cannot pin (a MoE or MLA layer's times, the host's
        scale where the host binds no probe, the floor's share where no probe has a step with prompts without CUDA graphs, the cohorts'
        share where no probe counted its prompts a step) stays the prior's, as a refit without one reset them (kept as it is when fewer than two levels were measured); then each objective's factor: the median over
        the probes of its measured percentile ÷ the calibrated prediction (TTFT and E2E with the
        queue's wait, ITL as TPOT)."""
        probes = []
        for point, directory in launched:
            for run_json in sorted(directory.glob("*/run.json")):
                run, _ = load_run(run_json.parent)
                probes += [(point, lv) for lv in run.levels if fittable(lv)]
        curves = {p.label: self.curve(p.settings) for p, _ in launched}
        rows = [Measured(lv.concurrency, c.terms_at(lv.concurrency), self.load.output_tokens, lv.tpot_ms.p50 / 1e3, lv.ttft_ms.p50 / 1e3,
                         lv.output_throughput_tok_s, _acceptance(p, lv), lv.waves.prompts_per_step if lv.waves else None)
                for p, lv in probes if not isinstance(c := curves[p.label], str)]  # fmt: skip
        try:
            self.cal = fit(rows, "tune", f"servelab tune, fitted on {len(rows)} probes of {len(launched)} launches, prior {self.prior.name}", self.prior,
                           prior_widths(self.hw, self.prior)).model_copy(update={"gpu": self.hw.generation})  # fmt: skip
        except ServelabError:
            return
        curves = {p.label: self.curve(p.settings) for p, _ in launched}  # with the fitted calibration
        ratios: dict[str, list[float]] = {}
        for point, lv in probes:
            curve = curves[point.label]
            if isinstance(curve, str) or lv.slo is None:
                continue
            at = curve.at(lv.concurrency)
            predicted = {"ttft": at.ttft_s + at.queue_s, "tpot": at.tpot_s, "itl": at.tpot_s, "e2e": at.e2e_s + at.queue_s}
            checks = {c.key: c for c in lv.slo.checks}
            for o in self.objectives:
                if (check := checks.get(o.key)) is not None and check.measured_ms and predicted[o.metric] > 0:
                    ratios.setdefault(o.key, []).append(check.measured_ms / (predicted[o.metric] * 1e3))
        self.factors = {key: round(statistics.median(values), 4) for key, values in ratios.items()}


def _acceptance(point: TunePoint, lv: LevelSummary) -> float:
    """A probe's speculative acceptance rate for the refit: the server's counters' where the point drafts tokens (``ACCEPTANCE``,
    as the point was priced, where they gave none), else 0."""
    if not int(point.settings.get("draft-tokens") or 0):
        return 0.0
    return (lv.server.acceptance_rate if lv.server else None) or ACCEPTANCE


def price_points(doc: TuneDocument, pricer: Pricer, tick: Callable[[], None] = lambda: None) -> None:
    """Price every candidate point (not launched, refused or pruned: a pruned one keeps the prediction
    that pruned it), with ``doc``'s band (``tick`` after each)."""
    for p in doc.points:
        if p.status in ("priced", "not priced"):
            got = pricer.within(p.settings, doc.band)
            if isinstance(got, str):
                p.status, p.why = "unfit", got
            else:
                p.status, p.predicted, p.band, p.bottleneck = "priced", got.streams or 0, got.band, got.bottleneck
        tick()


def value_effects(doc: TuneDocument) -> dict[str, float]:
    """What the launches measured beyond their calibrated predictions, attributed to the grid's values:
    a ridge regression (λ = ``EFFECT_PRIOR``, no intercept: the refit's calibration and factors carry
    what all points share) of each launched point's log(measured ÷ predicted capacity) on its values,
    one-hot ``KEY=VALUE``. It is what predict cannot price (on vLLM 0.25, H100, Qwen3-30B-A3B FP8:
    max_num_batched_tokens 2048 halved the capacity that 8192 gave, predicted alike:
    validation/RESULTS-tune.md); a value that fell short weighs on every point holding it.

    Returns ``{"KEY=VALUE": effect}``, the effect in log capacity (×e^effect); empty before a launch
    whose capacity was found (a capped or SLO-missing launch says nothing of the ratio)."""
    launched = [p for p in doc.points if p.status == "launched" and p.measured and not p.capped and p.predicted]
    if not launched:
        return {}
    values = sorted({kv for p in launched for kv in p.values.items()})
    x = np.array([[float(p.values.get(k) == v) for k, v in values] for p in launched])
    r = np.log([p.measured / p.predicted for p in launched])
    beta = x.T @ np.linalg.solve(x @ x.T + EFFECT_PRIOR * np.eye(len(launched)), r)  # ridge, in its dual form
    return {f"{k}={v}": round(float(b), 4) for (k, v), b in zip(values, beta)}


def apply_effects(doc: TuneDocument, effects: dict[str, float]) -> None:
    """Scale every candidate's predicted capacity and band by e^(sum of its values' effects)."""
    for p in doc.points:
        if p.status == "priced" and p.predicted is not None:
            scale = math.exp(sum(effects.get(f"{k}={v}", 0.0) for k, v in p.values.items()))
            p.predicted = round(p.predicted * scale, 1)
            p.band = (round(p.band[0] * scale, 1), round(p.band[1] * scale, 1)) if p.band else None


def unreachable(doc: TuneDocument, pricer: Pricer) -> str | None:
    """Why no point can meet the SLO before any launch (no point fits, or none meets it even at the
    band's optimistic end: the nearest point and how far its one stream misses), or None."""
    fitting = [p for p in doc.points if p.status == "priced"]
    if not fitting:
        first = next((p for p in doc.points if p.why), None)
        return f"no point of the grid fits: {first.label}: {first.why}" if first else "the grid is empty"
    if any(p.band and p.band[1] >= 1 for p in fitting):
        return None
    misses = [(w.worst, p.label) for p in fitting if not isinstance(w := pricer.within(p.settings, 0.0), str) and w.worst]
    (key, miss), label = min(misses, key=lambda m: m[0][1])
    return (f"no point meets the SLO even at one stream, within predict's band (± {doc.band:.0%}): the nearest is {label}, whose {key} is predicted "
            f"{miss:+.0%} over its target; loosen the SLO or vary other settings")  # fmt: skip
