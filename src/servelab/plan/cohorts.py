"""The steady state's cohorts: how many prompts ride one engine step beside the decode batch (issue 17, issue 53), as
``servelab.plan.predict`` prices them (docs/metrics.md, "mixed step", "waves": where the host binds, in waves), with predict's
``MIXED_SHARE`` or the share ``servelab calibrate`` measured on the server (:func:`recohorted`); the measured count is
``servelab.metrics.waves``."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

MIXED_SHARE = 0.25  # where the token budget splits no cohort, this share of the steps carries prompts (:func:`cohorts`; measured 19–35 % at 32–256 streams: validation/mixed_steps.py)
WAVE = 5.75  # where the host binds, a steady state's wave carries one prompt for every WAVE running streams: the median of B ÷ the prompts per step over OLMoE-1B-7B's and Granite-3.1-3B-A800M's levels at 16 and 64 streams (the third kept-back set: 3.1 and 5.0 at 16, 9.9 and 10.1 at 64; validation/api_servers.py)
HOST_SHARE = 0.5  # a point is host-bound where the host's time per step is at least this share of its decode step's GPU time: its TTFT adds the host's queue (a steady state's, a burst's), its band is the host's (servelab.plan.band; validation/bands.py)
HOST_RAMP = 0.05  # … fully so from HOST_SHARE + HOST_RAMP (host_weight: a ramp keeps the curve continuous)


def cohorts(k: float, budget: float, mixed_share: float = MIXED_SHARE) -> tuple[float, float]:
    """The steady state's mixed steps (module docstring): ``(f, m)``, the share of the engine steps
    that carry prompts and the prompts each carries, at ``k`` prompts per step (≥ 0) under a token
    budget that holds ``budget`` prompts a step beside the decode batch (its free tokens ÷ the
    prompt's; ≤ 0: none). Cohorts of m₀ = k ÷ min(k, ``mixed_share``) prompts on average (``MIXED_SHARE``, or the share a
    server's calibration measured: :func:`recohorted`), exponential about it, each taking ⌈X ÷ budget⌉ steps: 1 + 1 ÷ (e^(budget ÷ m₀) − 1) on
    average; f = min(1, k ÷ m). (0, 1) when k is 0. Defined in docs/metrics.md, "mixed step"."""
    if k <= 0:
        return 0.0, 1.0
    natural = k / min(k, mixed_share)
    ratio = budget / natural
    steps = 1 + 1 / math.expm1(min(ratio, 50.0)) if ratio > 1e-9 else math.inf  # a cohort's steps (⌈X ÷ b⌉ averaged over X)
    share = min(1.0, k * steps / natural)
    return share, k / share


def recohorted(t: Any, mixed_share: float) -> Any:
    """``t`` (a steady-state level's ``servelab.plan.terms.Terms``) with its cohorts under ``mixed_share`` (in (0, 1]) in place of
    ``MIXED_SHARE`` (:func:`cohorts`; ``Calibration.mixed_share``, what ``servelab calibrate`` measured on the server: docs/metrics.md,
    "mixed step"), its mixed step priced again for them over the running batch's decode tokens and the cohort's prompts, as
    ``terms`` prices it (``Terms.step_at``); ``t`` itself with draft tokens, one stream, no prompts a step or no ``step_at``."""
    if t.draft_tokens or t.running < 2 or t.prompts_per_step <= 0 or not t.step_at:
        return t
    share, m = cohorts(t.prompts_per_step, (t.max_num_batched_tokens - (t.running - 1)) / t.input_tokens, mixed_share)
    return _riding(t, share, m, t.running)


def _riding(t: Any, share: float, m: float, decode: int) -> Any:
    """``t`` with a share ``share`` of its steps carrying ``m`` prompts each beside ``decode`` decode tokens, that mixed step
    priced (``Terms.step_at``)."""
    x = t.step_at(decode, round(m * t.input_tokens))
    return replace(t, mixed_share=share, mixed_bytes_s=x.bytes_s, mixed_flops_s=x.flops_s, mixed_eager=x.eager)


def host_weight(t: Any, host_share: float) -> float:
    """How far a steady-state level (``t``: its ``servelab.plan.terms.Terms``) runs as host-bound (docs/metrics.md, "waves"), 0–1: 0 up to ``HOST_SHARE`` of the host's
    time per step over its decode step's GPU time, 1 from ``HOST_SHARE`` + ``HOST_RAMP``, linear between; times 1 up to half
    a prompt a decode step (k ≤ ½), 0 from one (waves need decode-only steps between them), linear between. A ramp, not a
    threshold, so that the curve stays continuous in the streams and the lengths."""
    return host_ramp(host_share) * min(1.0, max(0.0, 2 * (1 - t.prompts_per_step))) if t.running > 1 else 0.0


def host_ramp(host_share: float) -> float:
    """How far a level with ``host_share`` (the host's time per step over its decode step's GPU time) is host-bound, 0–1: 0 up
    to ``HOST_SHARE``, 1 from ``HOST_SHARE`` + ``HOST_RAMP``, linear between (a ramp keeps the curve continuous)."""
    return min(1.0, max(0.0, (host_share - HOST_SHARE) / HOST_RAMP))


def waved(t: Any, weight: float = 1.0) -> Any:
    """``t`` (a level's ``servelab.plan.terms.Terms``) with the steady state's prompts in waves (docs/metrics.md, "waves"): where the host binds (``weight``,
    :func:`host_weight`), the streams bunch into cohorts of one prompt for every ``WAVE`` running streams, blended with
    :func:`cohorts`' m₀ by ``weight`` and no more than a step's token budget holds, each riding one mixed step
    (``Terms.step_at``); ``t`` itself where that is no more than m₀, or with draft tokens or no ``step_at``."""
    if weight <= 0 or t.draft_tokens or not t.step_at or not t.mixed_share:
        return t
    natural, decode = t.prompts_per_step / t.mixed_share, t.running - 1
    room = math.floor((t.max_num_batched_tokens - decode) / t.input_tokens)
    m = min(natural + weight * max(0.0, t.running / WAVE - natural), room)
    if m <= natural:
        return t
    return _riding(t, t.prompts_per_step / m, m, decode)
