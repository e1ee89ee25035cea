"""The steady state's cohorts: how many prompts ride one engine step beside the decode batch (issue 17, issue 53), as
``servelab.plan.predict`` prices them (docs/metrics.md, "mixed step", "waves"); the measured count is ``servelab.metrics.waves``."""

from __future__ import annotations

import math

MIXED_SHARE = 0.25  # where the token budget splits no cohort, this share of the steps carries prompts (:func:`cohorts`; measured 19–35 % at 32–256 streams: validation/mixed_steps.py)
WAVE = 1.25  # where the host binds, a steady state's prompts ride in cohorts of WAVE · √B (measured 5–6 at 16 streams, 9–11 at 64 on OLMoE-1B-7B and Granite-3.1-3B-A800M: validation/mixed_steps.py)


def cohorts(k: float, budget: float) -> tuple[float, float]:
    """The steady state's mixed steps (module docstring): ``(f, m)``, the share of the engine steps
    that carry prompts and the prompts each carries, at ``k`` prompts per step (≥ 0) under a token
    budget that holds ``budget`` prompts a step beside the decode batch (its free tokens ÷ the
    prompt's; ≤ 0: none). Cohorts of m₀ = k ÷ min(k, ``MIXED_SHARE``) prompts on average, exponential
    about it, each taking ⌈X ÷ budget⌉ steps: 1 + 1 ÷ (e^(budget ÷ m₀) − 1) on average; f = min(1, k ÷ m).
    (0, 1) when k is 0. Defined in docs/metrics.md, "mixed step"."""
    if k <= 0:
        return 0.0, 1.0
    natural = k / min(k, MIXED_SHARE)
    ratio = budget / natural
    steps = 1 + 1 / math.expm1(min(ratio, 50.0)) if ratio > 1e-9 else math.inf  # a cohort's steps (⌈X ÷ b⌉ averaged over X)
    share = min(1.0, k * steps / natural)
    return share, k / share
