"""Every variant of a server priced without a launch: for each set of settings (weight format, TP,
draft tokens, acceptance, max_num_seqs, max_num_batched_tokens, MoE routing, largest CUDA-graph
capture size), the server's limits and predict's point at each closed-loop level or open-loop rate,
or why the variant does not fit (``servelab predict --vary``; the tuner prices its grid so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servelab.errors import ServelabError
from servelab.plan.calibration import Calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.drafter import Drafter
from servelab.plan.predict import Limits, Point, limits_for, predict, terms
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
    mode: Literal["stagger", "burst"] = "stagger"
    capture_sizes: list[int] | None = None  # the server's CUDA-graph capture sizes (None: vLLM's)


@dataclass
class Curve:
    """One variant's settings (its weight format by name), its limits and its points in order."""

    settings: dict
    limits: Limits
    points: list[Point | RatePoint]


def price(spec: ModelSpec, hw: Hardware, cal: Calibration, variants: list[dict], load: PredictedLoad, *, checkpoint_config: Path | None = None,
          drafter: Drafter | None = None) -> tuple[list[Curve], list[tuple[dict, str]]]:  # fmt: skip
    """Each variant's curve, and the variants that do not fit with why (plan's one-line reason:
    memory, a TP that does not divide the heads, a context the KV cannot hold). A variant is a dict
    with the keys quant, tp, draft-tokens, acceptance, max-num-seqs, max-num-batched-tokens, routing
    and max-capture-size (None: the default)."""
    curves, unfit = [], []
    for v in variants:
        fmt = weight_format(v["quant"], spec, checkpoint_config)
        named = {**v, "quant": fmt.name}
        try:
            limits = limits_for(spec, fmt, hw, tp=v["tp"], input_tokens=load.input_tokens, output_tokens=load.output_tokens, max_num_seqs=v["max-num-seqs"],
                                max_num_batched_tokens=v["max-num-batched-tokens"], capture_sizes=load.capture_sizes, draft_tokens=v["draft-tokens"],
                                max_capture_size=v["max-capture-size"])  # fmt: skip
        except ServelabError as exc:
            unfit.append((named, str(exc)))
            continue

        def point_at(c: int, v: dict = v, fmt=fmt, limits: Limits = limits) -> Point:
            step = terms(spec, fmt, hw, concurrency=c, input_tokens=load.input_tokens, output_tokens=load.output_tokens, limits=limits, tp=v["tp"],
                         draft_tokens=v["draft-tokens"], routing=v["routing"], mode="stagger" if load.rates else load.mode, drafter=drafter)  # fmt: skip
            return predict(step, cal, concurrency=c, output_tokens=load.output_tokens, acceptance=v["acceptance"])

        if load.rates:
            cap = max(1, min(limits.max_num_seqs, math.floor(limits.kv_requests)))
            points = [at_rate(point_at, r, load.output_tokens, cap) for r in load.rates]
        else:
            points = [point_at(c) for c in load.levels]
        curves.append(Curve(named, limits, points))
    return curves, unfit
