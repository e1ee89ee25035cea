"""predict's honest band (servelab.plan.band, issue 53): the family class of each catalog
architecture, the wide band where a class or a weight format has no held-out evidence, and the band
each predicted point carries in ``servelab predict --json``. That the shipped bands hold ≥ 90 % of
their class's held-out points is tests/test_predict.py's test_cold_held_out_errors_hold."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.plan.band import band_for, family_class
from servelab.plan.model_spec import load_model

cli = CliRunner()


@pytest.mark.parametrize(("model", "cls"), [("qwen3-8b", "dense"), ("gemma-3-27b", "dense"), ("mixtral-8x7b", "moe"), ("qwen3-30b-a3b", "moe"),
                                            ("gpt-oss-120b", "moe"), ("deepseek-v3", "mla"), ("qwen3-next-80b-a3b", "hybrid"),
                                            ("nemotron-3-nano-30b-a3b", "hybrid"), ("qwen3.5-397b-a17b", "hybrid")])  # fmt: skip
def test_family_class(model, cls):
    assert family_class(load_model(model)) == cls


def test_a_class_or_format_without_held_out_evidence_gets_the_wide_band_and_says_so():
    dense, moe = band_for(load_model("qwen3-8b"), "bf16"), band_for(load_model("mixtral-8x7b"), "fp8")
    assert dense.tok_s < moe.tok_s < 0.5 and dense.points and moe.points
    mla = band_for(load_model("deepseek-v3"), "fp8-block")  # held out since issue 53 (validation/bands.py): 17 %
    assert mla.tok_s < 0.5 and mla.points and mla.evidence.startswith("held out by model")
    nvfp4 = band_for(load_model("deepseek-v3"), "nvfp4")  # an MLA model in a format no MLA run was held out in
    assert (nvfp4.tok_s, nvfp4.ttft, nvfp4.points) == (0.5, 0.65, 0) and "no held-out evidence for nvfp4" in nvfp4.evidence
    unseen = band_for(load_model("gpt-oss-120b"), "mxfp4")  # a classic MoE, but no MXFP4 run is held out
    assert (unseen.family_class, unseen.tok_s, unseen.points) == ("moe", 0.5, 0) and "mxfp4" in unseen.evidence


def test_predict_json_carries_the_band_on_every_point():
    res = cli.invoke(app, ["predict", "--model", "qwen3-30b-a3b", "--quant", "fp8", "--hardware", "h100-sxm", "--concurrency", "1,64", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["band"]["family_class"] == "moe" and doc["band"]["tok_s"] == 0.18
    for p in doc["variants"][0]["points"]:
        lo, hi = p["band"]["aggregate_tok_s"]
        assert lo == pytest.approx(p["aggregate_tok_s"] / 1.18) and hi == pytest.approx(p["aggregate_tok_s"] / 0.82)  # the truth its prediction is within ± 18 % of
        assert p["band"]["ttft_s"] == pytest.approx([p["ttft_s"] / 1.52, p["ttft_s"] / 0.48])
    table = cli.invoke(app, ["predict", "--model", "deepseek-v3", "--hardware", "h200", "--tp", "8", "--concurrency", "1"], env={"COLUMNS": "400"})
    assert table.exit_code == 0, table.output
    assert "Band (mla): ± 17% on tok/s and TPOT, ± 52% on TTFT; held out by model" in " ".join(table.output.split())
