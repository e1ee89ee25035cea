#!/usr/bin/env python3
"""predict's band by family class (issue 53; servelab/data/bands.yaml, docs/metrics.md "predict's band"), from every held-out
point of the class: the relative error b (|predicted ÷ measured − 1|, as every table here scores it) that ≥ 90 % of them fall
within, on tok/s and on TTFT.

The held-out points:

- the cold tables (validation/predict_cold.py: the blocks that leave a model or a GPU out of the calibration): dense and MoE;
- the MLA models held out by model (validation/predict_arch.py);
- every kept-back set (validation/kept_back.py, the shipped calibration; sets 1–9, each measured after predict was frozen and
  opened after; the eighth and ninth were checked blind against the band from sets 1–7 first: validation/RESULTS-predict.md): a point goes to its model's class (``servelab.plan.band.family_class``), or to ``host`` where the host binds
  it (``host_share`` ≥ ``HOST_SHARE``: the host's band, whatever the class; ``servelab.plan.band.point_band``).

The cold tables score a burst's TTFT on its mean and p99, the kept-back sets on its mean; the steady state on its p50. The hybrid class and the wide ``unseen`` band are not
computed here (bands.yaml says where theirs come from).

Usage: ``python validation/bands.py`` (no GPU; ~4 min: every kept-back set's held-out replay). tests/test_kept_back.py holds
bands.yaml to it.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_check as cc  # noqa: E402
import host_band  # noqa: E402
import predict_arch  # noqa: E402
import predict_cold  # noqa: E402
from servelab.plan.band import family_class  # noqa: E402
from servelab.plan.cohorts import HOST_SHARE  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402

SETS = ("kept-back-h200", "kept-back2-h200", "kept-back3-h200", "kept-back4-h200", "kept-back5-h200", "kept-back6-h100", "kept-back7-h100",
        "kept-back8-h100", "kept-back9-h100")  # every set opened: 1–7 before the band was first set this way (eda5322), the eighth and ninth checked blind against it, then added


def held_out(kept: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """Per class (``dense``, ``moe``, ``mla``, ``host``): the absolute relative errors (fractions) of the held-out points' tok/s,
    and of their TTFT. ``kept``: the kept-back sets' scored rows (``host_band.rows``: each with its model)."""
    with contextlib.redirect_stdout(io.StringIO()):
        out = predict_cold.class_points(predict_cold.main())
        arch = predict_arch.main()
    out["mla"] = tuple([v / 100 for m, r in arch.items() if m in predict_arch.MLA for v in r["held"][k]] for k in ("tok_s", "ttft"))
    out["host"] = ([], [])
    classes = {m: family_class(load_model(str(cc.ROOT / "validation" / "configs" / m))) for m in {r["model"] for r in kept}}
    for r in kept:
        tok, ttft = out["host" if r["host_share"] >= HOST_SHARE else classes[r["model"]]]
        tok.append(abs(r["e_tok"]) / 100)
        ttft.append(abs(r["e_ttft"]) / 100)
    return out


def bands(kept: list[dict]) -> dict[str, dict[str, float | int]]:
    """Per class: its held-out points (:func:`held_out`) and the errors (fractions) that ≥ 90 % of them fall within."""
    return {name: {"points": len(tok), "tok_s": predict_cold.p90(tok), "ttft": predict_cold.p90(ttft)} for name, (tok, ttft) in held_out(kept).items()}


def main() -> dict[str, dict[str, float | int]]:
    """Print each class's band beside the shipped one; return them."""
    shipped = yaml.safe_load((cc.ROOT / "src" / "servelab" / "data" / "bands.yaml").read_text())
    out = bands([r for s in SETS for r in host_band.rows(s)])
    print("| family class | held-out points | tok/s error 90 % of them fall within | TTFT error, the same | shipped (bands.yaml) |\n|---|---|---|---|---|")
    for name, b in out.items():
        print(f"| {name} | {b['points']} | {b['tok_s']:.1%} | {b['ttft']:.1%} | {shipped[name]['tok_s']:.0%} / {shipped[name]['ttft']:.0%} |")
    return out


if __name__ == "__main__":
    main()
