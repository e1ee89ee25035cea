"""The measured error of a calibration fitted by ``servelab.plan.fit``: every level predicted with the calibration fitted on the
other runs or levels (``leave_one_out``), in words (``error_summary``)."""

from __future__ import annotations

import numpy as np

from servelab.errors import ServelabError
from servelab.plan.calibration import Calibration
from servelab.plan.fit import Measured, fit
from servelab.plan.predict import BURST_REQUESTS, Point, predict


def leave_one_out(runs: list[list[Measured]], name: str, prior: Calibration | None = None, widths: dict[str, float] | None = None) -> list[tuple[int, Measured, Point]]:
    """Every level predicted with the calibration fitted (with ``prior`` and its σ ``widths``, :func:`fit`) on the *other* runs (one run: on its other
    levels): (run index, measured, predicted) per level; a run without which fewer than two
    steady-state levels remain (the only steady-state run beside bursts) is not scored.

    Raises:
        ServelabError: too few levels to fit without the one held out, or no run can be scored.
    """
    if len(runs) > 1:
        held = [(i, None) for i in range(len(runs))]
    else:
        held = [(0, j) for j in range(len(runs[0]))]
    out = []
    for i, j in held:
        train = [m for k, levels in enumerate(runs) for n, m in enumerate(levels) if (k != i if j is None else n != j)]
        if sum(m.terms.mode not in BURST_REQUESTS for m in train) < 2 and len(held) > 1:
            continue  # without it, too few steady-state levels to fit: its levels are not scored
        cal = fit(train, name, "leave-one-out", prior, widths)
        for n, m in enumerate(runs[i]):
            if j is None or n == j:
                out.append((i, m, predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance)))
    if not out:
        raise ServelabError("leave-one-out needs two runs with steady-state levels (servelab bench, --closed-loop stagger), or one with several")
    return out


def error_summary(pairs: list[tuple[int, Measured, Point]]) -> str:
    """The measured error of :func:`leave_one_out`, in words: aggregate tok/s, single-stream decode
    (levels of one stream) and TTFT (p50; a burst's mean), median and worst absolute %."""

    def stats(values: list[float]) -> str:
        return f"median {100 * float(np.median(values)):.1f} %, worst {100 * max(values):.1f} %"

    agg = [abs(p.aggregate_tok_s / m.tok_s - 1) for _, m, p in pairs]
    single = [abs(m.tpot_s / p.tpot_s - 1) for _, m, p in pairs if m.concurrency == 1]
    ttft = [abs(predicted_ttft(m, p) / m.ttft_s - 1) for _, m, p in pairs]
    return (f"aggregate output tok/s {stats(agg)} ({len(pairs)} levels)" + (f"; single-stream decode {stats(single)}" if single else "")
            + f"; TTFT {stats(ttft)}")  # fmt: skip


def predicted_ttft(m: Measured, p: Point) -> float:
    """The predicted TTFT to set beside ``m.ttft_s``: the mean for a burst, the p50 otherwise, s."""
    return p.ttft_mean_s if m.terms.mode in BURST_REQUESTS else p.ttft_s
