"""vLLM 0.25's fused-MoE kernel configuration case, known before launch from the list of its tuned
files (servelab/data/vllm-0.25-fused-moe-configs.txt), against what vLLM itself logged at boot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines import plan_engine
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
