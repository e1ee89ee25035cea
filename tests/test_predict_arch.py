"""Issue 53's held-out check on architectures no calibration had seen (validation/predict_arch.py,
validation/arch-h200-x4/): the MLA class's band covers its held-out points, the shipped MLA layer
times are the fit on every MLA run, and calibrate's prior keeps a short design off its range edges."""

from __future__ import annotations

import contextlib
import io
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import predict_arch  # noqa: E402

from servelab.plan.band import band_for  # noqa: E402
from servelab.plan.calibration import BW_RANGE, COMPUTE_RANGE, calibration  # noqa: E402
from servelab.plan.fit import fit, fit_mla  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402


@pytest.fixture(scope="module")
def results():
    with contextlib.redirect_stdout(io.StringIO()):
        return predict_arch.main()


def test_the_mla_band_covers_ninety_percent_of_the_held_out_points(results):
    band = band_for(load_model(str(ROOT / "validation/configs/deepseek-v3-8l")), "fp8-block")
    tok = [v for m, r in results.items() if m in predict_arch.MLA for v in r["held"]["tok_s"]]
    ttft = [v for m, r in results.items() if m in predict_arch.MLA for v in r["held"]["ttft"]]
    assert band.points == len(tok) >= 10
    assert sum(v <= 100 * band.tok_s for v in tok) >= math.ceil(0.9 * len(tok))
    assert sum(v <= 100 * band.ttft for v in ttft) >= math.ceil(0.9 * len(ttft))


def test_held_out_by_model_the_mla_models_and_the_new_dense_family_are_within_ten_percent_median(results):
    import statistics

    for model in ("deepseek-v2-lite", "kimi-k2-6l", "deepseek-v3-8l", "phi-4"):
        assert statistics.median(results[model]["held"]["tok_s"]) <= 10.0, model
    assert max(results["phi-4"]["held"]["tok_s"]) <= 15.0 and max(results["phi-4"]["held"]["single"]) <= 2.0


def test_the_shipped_mla_layer_times_are_the_fit_on_every_mla_run():
    whole = fit_mla([m for name in predict_arch.MLA if predict_arch.present(name) for m in predict_arch.steady(name)], predict_arch.shipped())
    shipped = calibration("vllm-0.25-h100-bf16")
    assert (whole.mla_layer_us, whole.mla_eager_layer_ms) == (shipped.mla_layer_us, shipped.mla_eager_layer_ms)


def test_the_prior_keeps_a_three_level_design_off_the_range_edges():
    """DeepSeek-V2-Lite's steady state at the design's 1, 16 and 64 streams: alone, the fit sits on an
    edge of a range; with the shipped calibration as its prior it does not, and every interval holds its value."""
    rows = [m for m in predict_arch.steady("deepseek-v2-lite") if m.concurrency in predict_arch.DESIGN]
    prior = calibration("vllm-0.25-h100-bf16")
    alone, pulled = fit(rows, "alone", "t"), fit(rows, "pulled", "t", prior)
    assert alone.bw_efficiency in BW_RANGE or alone.compute_efficiency in COMPUTE_RANGE or alone.eager_step_ms == 0.0
    assert pulled.bw_efficiency not in BW_RANGE and pulled.compute_efficiency not in COMPUTE_RANGE
    for key, (lo, hi) in pulled.uncertainty.items():
        assert lo <= getattr(pulled, key) <= hi, key
