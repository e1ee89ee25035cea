"""Every variant of a server priced without a launch: for each set of settings (weight format, TP,
draft tokens, acceptance, max_num_seqs, max_num_batched_tokens, MoE routing, largest CUDA-graph
capture size, KV-cache element size, GPU memory share), the server's limits and predict's point at
each closed-loop level or open-loop rate, or why the variant does not fit (``servelab predict
--vary``); and the largest closed-loop load whose predicted level meets an SLO (``within``: where
``servelab capacity`` starts, how ``servelab tune`` ranks its grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from servelab.errors import ServelabError
from servelab.plan.calibration import Calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.drafter import Drafter
from servelab.metrics.slo import Objective
from servelab.plan.limits import Limits, limits_for
from servelab.plan.predict import Point, predict
from servelab.plan.terms import Terms, terms
from servelab.plan.rate import RatePoint, at_rate
from servelab.values.specs import Hardware, ModelSpec


@dataclass
class PredictedLoad:
    """What is predicted at each variant: prompt and output tokens, closed-loop ``levels`` (streams)
    started as ``mode``, or open-loop ``rates`` (requests/s) instead."""

    input_tokens: int
    output_tokens: int
    levels: list[int]
    rates: list[float] | None = None
    mode: Literal["stagger", "burst", "batch"] = "stagger"
    capture_sizes: list[int] | None = None  # the server's CUDA-graph capture sizes (None: vLLM's)


@dataclass
class Curve:
    """One variant's settings (its weight format by name), its limits and its points in order;
    ``at(c)`` its closed-loop point at any ``c`` streams and ``terms_at(c)`` the terms under it."""

    settings: dict
    limits: Limits
    points: list[Point | RatePoint]
    at: Callable[[int], Point] = field(repr=False, default=None)  # type: ignore[assignment]
    terms_at: Callable[[int], Terms] = field(repr=False, default=None)  # type: ignore[assignment]


def price(spec: ModelSpec, hw: Hardware, cal: Calibration, variants: list[dict], load: PredictedLoad, *, checkpoint_config: Path | None = None,
          drafter: Drafter | None = None) -> tuple[list[Curve], list[tuple[dict, str]]]:  # fmt: skip
    """Each variant's curve, and the variants that do not fit with why (plan's one-line reason:
    memory, a TP that does not divide the heads, a context the KV cannot hold). A variant is a dict
    with the keys quant, tp, draft-tokens, acceptance, max-num-seqs, max-num-batched-tokens, routing
    and max-capture-size (None: the default), and optionally kv-dtype-bytes (bytes per KV element,
    default 2) and gpu-memory-utilization (default the plan engine's)."""
    curves, unfit = [], []
    for v in variants:
        fmt = weight_format(v["quant"], spec, checkpoint_config)
        named = {**v, "quant": fmt.name}
        try:
            limits = limits_for(spec, fmt, hw, tp=v["tp"], input_tokens=load.input_tokens, output_tokens=load.output_tokens, max_num_seqs=v["max-num-seqs"],
                                max_num_batched_tokens=v["max-num-batched-tokens"], capture_sizes=load.capture_sizes, draft_tokens=v["draft-tokens"],
                                max_capture_size=v["max-capture-size"], kv_dtype_bytes=v.get("kv-dtype-bytes") or 2.0,
                                gpu_memory_utilization=v.get("gpu-memory-utilization"))  # fmt: skip
        except ServelabError as exc:
            unfit.append((named, str(exc)))
            continue

        def terms_at(c: int, v: dict = v, fmt=fmt, limits: Limits = limits) -> Terms:
            return terms(spec, fmt, hw, concurrency=c, input_tokens=load.input_tokens, output_tokens=load.output_tokens, limits=limits, tp=v["tp"],
                         draft_tokens=v["draft-tokens"], routing=v["routing"], mode="stagger" if load.rates else load.mode, drafter=drafter)  # fmt: skip

        def point_at(c: int, v: dict = v, terms_at=terms_at) -> Point:
            return predict(terms_at(c), cal, concurrency=c, output_tokens=load.output_tokens, acceptance=v["acceptance"])

        if load.rates:
            cap = max(1, min(limits.max_num_seqs, math.floor(limits.kv_requests)))
            points = [at_rate(point_at, r, load.output_tokens, cap) for r in load.rates]
        else:
            points = [point_at(c) for c in load.levels]
        curves.append(Curve(named, limits, points, point_at, terms_at))
    return curves, unfit


GROWTH = 4  # the ladder's step, as servelab capacity's (servelab.run.capacity)


def meets(point: Point, objectives: list[Objective]) -> bool:
    """Whether a predicted level is within every target: its TTFT and E2E with the wait in the
    queue (a closed loop of more streams than run at once: ``Point.queue_s``), its TPOT, and ITL
    taken as TPOT. The prediction has means, not percentiles, so this is an estimate."""
    values = {"ttft": point.ttft_s + point.queue_s, "tpot": point.tpot_s, "itl": point.tpot_s, "e2e": point.e2e_s + point.queue_s}
    return all(values[o.metric] * 1e3 <= o.target_ms for o in objectives)


def predicted(point_at: Callable[[int], Point], objectives: list[Objective], most: int) -> tuple[int | None, Point | None]:
    """The largest concurrency up to ``most`` whose predicted level (``point_at(c)``, servelab
    predict) meets the objectives, by a ×4 ladder and bisection (levels are assumed to pass up to
    one concurrency and miss above it); (None, None) if 1 does not."""
    if not meets(point_at(1), objectives):
        return None, None
    lo, hi = 1, None
    while hi is None and lo < most:
        c = min(most, lo * GROWTH)
        lo, hi = (c, hi) if meets(point_at(c), objectives) else (lo, c)
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if meets(point_at(mid), objectives) else (lo, mid)
    return lo, point_at(lo)


@dataclass(frozen=True)
class Within:
    """A variant's predicted capacity within an SLO: the streams (None: not even one stream meets it),
    the band of streams it would be with every predicted time ``band`` × shorter or longer, the
    bottleneck there, and, when not even one stream meets it, the objective missed worst and by how
    much (its predicted value ÷ target − 1 at one stream)."""

    streams: int | None
    band: tuple[int, int]
    bottleneck: str | None
    worst: tuple[str, float] | None = None


def within(curve: Curve, objectives: list[Objective], band: float) -> Within:
    """``curve``'s predicted capacity within ``objectives`` (closed-loop streams, up to 4 ×
    max_num_seqs), with its band: the capacity were every predicted time (1 ± ``band``) times
    itself, i.e. every target ÷ (1 ± band)."""

    def capacity(factor: float) -> tuple[int | None, Point | None]:
        scaled = [o.model_copy(update={"target_ms": o.target_ms / factor}) for o in objectives]
        return predicted(curve.at, scaled, most=4 * curve.limits.max_num_seqs)

    streams, point = capacity(1.0)
    lo, hi = capacity(1 + band)[0] or 0, capacity(max(1e-3, 1 - band))[0] or 0
    worst = None
    if streams is None:
        one = curve.at(1)
        values = {"ttft": one.ttft_s, "tpot": one.tpot_s, "itl": one.tpot_s, "e2e": one.e2e_s}
        worst = max(((o.key, values[o.metric] * 1e3 / o.target_ms - 1) for o in objectives), key=lambda kv: kv[1])
    return Within(streams, (lo, hi), point.bottleneck if point else None, worst)
