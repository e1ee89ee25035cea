#!/usr/bin/env python3
"""The host-bound points (issue 53): where the host's time per step is at least half the decode step's GPU time
(``servelab.plan.predict.HOST_SHARE``), the small models' steady state runs in waves and their requests wait at the host
(validation/RESULTS-predict.md, "Where the requests wait"). Fitted here on the first three kept-back sets only, and checked on
the fourth (seen before this rule was made, not fitted on), the fifth (measured before the steady state's rule was made, opened
after predict was frozen with it; seen when the burst's was made), the sixth (an H100's, opened after predict was frozen with
the burst's; seen, with the fourth and fifth, when the steady state took the bursts' queue and the host's floor), the
seventh (another H100's, opened after predict was frozen with those), the eighth (a third H100's, one job on its host) and the
ninth (a fourth H100's, one job on it); the tenth to twelfth have no scored host-bound point, the thirteenth's and fourteenth's
(five) are not in these fits:

**The host's queue** (``servelab.engines.vllm_host.HOST_QUEUE``): over the fitted sets' host-bound bursts beyond one stream,
the median of (measured mean TTFT − predicted TTFT without the queue) ÷ (B · h₁), B the running streams and h₁ the host's time
for a step of one sequence (``Engine.step_host_s``): the queue predict added ÷ ``HOST_QUEUE``. The same over their steady-state
levels priced in waves (``servelab.plan.predict.waved``; TTFT p50) is printed beside it, not shipped: the steady state takes
the bursts' constant (validation/RESULTS-predict.md, "One host's queue").

Then, per set, the host-bound points inside the band as predict now prints it (``servelab.plan.band.point_band``; the host's
band, servelab/data/bands.yaml ``host``, is validation/bands.py's: every set's host-bound points).

Usage: ``python validation/host_band.py`` (no GPU; ~4 min: every kept-back set's held-out replay).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_check as cc  # noqa: E402
import kept_back  # noqa: E402
from servelab.engines.vllm_host import HOST_QUEUE  # noqa: E402
from servelab.plan.cohorts import HOST_SHARE  # noqa: E402

FITTED = ("kept-back-h200", "kept-back2-h200", "kept-back3-h200")
CHECKED = ("kept-back4-h200", "kept-back5-h200", "kept-back6-h100", "kept-back7-h100", "kept-back8-h100", "kept-back9-h100")


def rows(folder: str) -> list[dict]:
    """The scored held-out rows (``kept_back.check``, the shipped calibration) of every model in validation/FOLDER, each with its model."""
    data = cc.ROOT / "validation" / folder
    models = sorted(p.name.removesuffix("-bursts.json") for p in data.glob("*-bursts.json"))
    return [{**r, "model": m} for m in models for r in kept_back.check(m, cc.SHIPPED, ("burst", "design", "stagger", "long"), data) if r["scored"]]


def kappa(levels: list[dict]) -> float:
    """The median over ``levels`` (each priced with the host's queue at ``HOST_QUEUE`` host steps a running stream) of the measured
    TTFT beyond the prediction without the queue, in the queue's host steps: the κ that fits them."""
    return statistics.median((r["ttft"] - (r["p_ttft"] - r["queue"])) / (r["queue"] / HOST_QUEUE) for r in levels)


def fit(fitted: list[dict]) -> tuple[float, float, int, int]:
    """From the fitted sets' host-bound rows: (the host's queue κ that the steady state's levels would take and that the bursts
    fit (shipped), the levels each κ was taken over)."""
    steady = [r for r in fitted if r["queue"] and r["kind"] != "burst"]  # the steady-state levels priced in waves, the host's queue in their TTFT
    bursts = [r for r in fitted if r["queue"] and r["kind"] == "burst"]  # the host-bound bursts beyond one stream
    return kappa(steady), kappa(bursts), len(steady), len(bursts)


def main() -> dict:
    """Print the fit and each set's host-bound points; return them."""
    by_set = {s: [r for r in rows(s) if r["host_share"] >= HOST_SHARE] for s in FITTED + CHECKED if (cc.ROOT / "validation" / s).exists()}
    fitted = [r for s in FITTED for r in by_set[s]]
    k_steady, k_burst, levels, bursts = fit(fitted)
    print(f"The host's queue, fitted on {bursts} host-bound bursts of {', '.join(FITTED)}: {k_burst:.2f} one-sequence host steps a running "
          f"stream (shipped: HOST_QUEUE {HOST_QUEUE}); their {levels} host-bound steady-state levels would take {k_steady:.2f} (not shipped)\n")  # fmt: skip
    print("| set | host-bound points | models | tok/s error median / worst | TTFT error median | inside the band: tok/s, TTFT |\n|---|---|---|---|---|---|")
    out = {"kappa": k_steady, "kappa_burst": k_burst, "sets": {}}
    for s, got in by_set.items():
        if not got:
            continue
        tok, ttft = [abs(r["e_tok"]) for r in got], [abs(r["e_ttft"]) for r in got]
        inside = (100 * sum(r["in_tok"] for r in got) / len(got), 100 * sum(r["in_ttft"] for r in got) / len(got))
        role = "fitted" if s in FITTED else "checked"
        out["sets"][s] = {"points": len(got), "tok_median": statistics.median(tok), "tok_worst": max(tok), "ttft_median": statistics.median(ttft), "inside": inside}
        print(f"| {s} ({role}) | {len(got)} | {', '.join(sorted({r['model'] for r in got}))} | {statistics.median(tok):.1f} / {max(tok):.1f} % | "
              f"{statistics.median(ttft):.1f} % | {inside[0]:.0f} %, {inside[1]:.0f} % |")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
