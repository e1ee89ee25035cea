"""vLLM 0.25's fused-MoE kernel configuration case, known before launch from the list of its tuned
files (servelab/data/vllm-0.25-fused-moe-configs.txt), against what vLLM itself logged at boot."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines import plan_engine
from servelab.engines.vllm_moe import MOE_RATE
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model

ROOT = Path(__file__).resolve().parent.parent
V = ROOT / "validation"
LOGGED = re.compile(r"(?:Using configuration from|Config file not found at) \S*/configs/(E=[^ ]+?\.json)")


@pytest.mark.parametrize(("log", "model", "fmt", "hw"), [
    (V / "cold-h100/mixtral-8x7b-boot.log", str(V / "configs/mixtral-8x7b"), "fp8", "h100-sxm"),  # tuned
    (V / "cold-h100/qwen2-57b-a14b-boot.log", str(V / "configs/qwen2-57b-a14b"), "fp8", "h100-sxm"),  # tuned
    (V / "cold-h100/qwen3-30b-a3b-boot.log", "qwen3-30b-a3b", "fp8", "h100-sxm"),  # default config
    (V / "cold-h200/qwen3-30b-a3b-boot.log", "qwen3-30b-a3b", "fp8", "h200"),  # default config
    (ROOT / "tests/fixtures/bootlogs/vllm-0.25-h200-gpt-oss-20b-8192.log", str(V / "configs/gpt-oss-20b"), "bf16", "h200"),  # BF16, default
])  # fmt: skip
def test_the_case_named_before_launch_is_the_one_vllm_logged(log, model, fmt, hw):
    text = log.read_text(errors="replace")
    logged = LOGGED.search(text).group(1)
    case = plan_engine().moe_kernel(load_model(model), fmt, load_hardware(hw))
    assert case is not None and case.config == logged
    assert case.tuned == ("Using configuration from" in text)


def test_no_case_without_experts_or_for_other_moe_kernels():
    engine, h200 = plan_engine(), load_hardware("h200")
    assert engine.moe_kernel(load_model("qwen3-8b"), "bf16", h200) is None  # dense
    assert engine.moe_kernel(load_model("gpt-oss-120b"), "mxfp4", h200) is None  # MXFP4 experts: not the Triton kernel's files
    assert engine.moe_kernel(load_model("qwen3-30b-a3b"), "fp8", load_hardware("m3-ultra")) is None  # no CUDA device name


def test_plan_and_predict_say_which_case_applies():
    res = CliRunner().invoke(app, ["plan", "--model", str(V / "configs/deepseek-v2-lite"), "--hardware", "h200", "--json"])
    assert res.exit_code == 0 and "ships no tuned config (E=64,N=1408,device_name=NVIDIA_H200.json)" in res.output
    res = CliRunner().invoke(app, ["predict", "--model", str(V / "configs/mixtral-8x7b"), "--quant", "fp8", "--hardware", "h100-sxm", "--concurrency", "1", "--json"])
    assert res.exit_code == 0 and "ships a tuned config (E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json)" in res.output


def test_the_experts_rates_are_the_kernel_measurement():
    """``MOE_RATE`` is validation/moe_kernel_gpu.py --prefill's table (one H200): the compute-bound rate at 8,192 tokens against
    cuBLAS BF16 GEMMs of the same FLOPs, the median over the BF16 shapes (tuned and default configs alike), Kimi-K2's in block
    FP8; and predict's terms price a BF16 MoE prompt's experts at it (a tuned and a default case alike)."""
    rows = [r for r in json.loads((V / "moe-kernel/h200-prefill.json").read_text()) if r["M"] == 8192]
    bf16 = [r["rate"] for r in rows if r["format"] == "bf16"]
    assert len(bf16) >= 7 and MOE_RATE["bf16"] == MOE_RATE["fp16"] == round(statistics.median(bf16), 2)
    assert MOE_RATE["fp8-block"] == round(next(r["rate"] for r in rows if r["format"] == "fp8-block"), 2)
    assert "fp8" not in MOE_RATE  # FP8 per tensor at 1: its MoE layer times were fitted so (data/calibration.yaml)
    h200 = load_hardware("h200")
    for model, tuned in (("qwen3-30b-a3b", True), (str(V / "configs/deepseek-v2-lite"), False)):
        case = plan_engine().moe_kernel(load_model(model), "bf16", h200)
        assert (case.tuned, case.rate) == (tuned, MOE_RATE["bf16"])
    assert plan_engine().moe_kernel(load_model("qwen3-30b-a3b"), "fp8", h200).rate == 1.0


def test_a_default_config_reads_a_wide_experts_gate_up_matrix_again_per_tile():
    """vLLM's get_default_config tiles (servelab.engines.vllm_moe's module docstring): on Hopper an untuned case re-reads its gate-up
    matrix (2/3 of a gated expert) per further row tile where its column tiles number more than 264 (FlexOlmo's and
    Mixtral-8x22B's at up to 64 tokens, 64 columns a tile), not below (AFMoE's 1,408-wide experts; 128 columns above 64 tokens)
    nor where vLLM groups the rows (block FP8 above 16 tokens); a tuned case and other GPUs carry none; plan says so."""
    h100, g = load_hardware("h100-sxm"), 2 / 3
    for name in ("flex-olmo-16l", "mixtral-8x22b-8l"):
        case = plan_engine().moe_kernel(load_model(str(V / "configs" / name)), "bf16", h100)
        assert not case.tuned and case.tiles == ((32, 16, g), (64, 32, g), (96, 0, g), (512, 0, g), (1 << 30, 0, g)), name
    assert all(m == 0 for _, m, _ in plan_engine().moe_kernel(load_model(str(V / "configs/afmoe")), "bf16", h100).tiles)
    assert all(m == 0 for _, m, _ in plan_engine().moe_kernel(load_model(str(V / "configs/deepseek-v3-8l")), "fp8-block", h100).tiles)  # grouped rows
    assert plan_engine().moe_kernel(load_model(str(V / "configs/mixtral-8x7b")), "fp8", h100).tiles == ()  # tuned
    assert plan_engine().moe_kernel(load_model(str(V / "configs/flex-olmo-16l")), "bf16", load_hardware("b200")).tiles == ()
    res = CliRunner().invoke(app, ["plan", "--model", str(V / "configs/flex-olmo-16l"), "--hardware", "h100-sxm", "--json"])
    assert res.exit_code == 0 and "reads part of an expert again for each further tile of its tokens (16 rows in steps of up to 32 tokens, 32 rows in steps of up to 64 tokens)" in res.output


def test_the_rate_applies_on_hopper_only():
    """Measured on an H200 (Hopper): other GPUs with a CUDA name keep 1, as do MoE kernels without config files (MXFP4)."""
    spec = load_model(str(V / "configs/deepseek-v2-lite"))
    assert plan_engine().moe_kernel(spec, "bf16", load_hardware("h100-sxm")).rate == MOE_RATE["bf16"]
    assert plan_engine().moe_kernel(spec, "bf16", load_hardware("b200")).rate == 1.0


def test_predict_json_gives_the_experts_rate_as_a_number():
    """``servelab predict --json``: ``moe_rate`` beside the kernel case's words (0.57 for BF16 experts on an H200; null for a dense model)."""
    cli = CliRunner()
    moe = cli.invoke(app, ["predict", "--model", str(V / "configs/deepseek-v2-lite"), "--hardware", "h200", "--concurrency", "1", "--json"])
    dense = cli.invoke(app, ["predict", "--model", "qwen3-8b", "--hardware", "h200", "--concurrency", "1", "--json"])
    assert moe.exit_code == 0 and json.loads(moe.output)["moe_rate"] == MOE_RATE["bf16"]
    assert dense.exit_code == 0 and json.loads(dense.output)["moe_rate"] is None
