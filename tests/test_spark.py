"""DGX Spark first-class (issue 34): the field report's Qwen3.5-122B-A10B NVFP4 case planned and
predicted against what it printed and measured, and the seeds' other Spark figures. Pure logic: no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines.vllm_kv import rules_for
from servelab.errors import ServelabError
from servelab.plan.checkpoint import weight_format
from servelab.plan.model_spec import load_model
from servelab.plan.roofline import spec_tokens_per_step

cli = CliRunner()
LOG = Path(__file__).parent / "fixtures/gb10/vllm-0.19-spark-qwen3.5-122b-nvfp4-reconstructed.log"
REPORT = ["--model", "qwen3.5-122b-a10b", "--hardware", "dgx-spark", "--quant", "nvfp4", "--kv-dtype", "fp8", "--max-model-len", "131072",
          "--gpu-memory-utilization", "0.9", "--speculative", "mtp:2", "--prefix-caching"]  # fmt: skip
# the report's single-stream table: (prompt, output tokens, acceptance rate, measured tok/s low–high)
TABLE = {"Q&A": (20, 256, 0.705, 24.7, 25.6), "Code": (256, 300, 0.965, 29.7, 30.1), "JSON-KIE": (512, 256, 1.0, 30.7, 31.0),
         "Hungarian": (1024, 256, 0.65, 23.7, 24.6), "Long-RAG-8K": (7500, 256, 0.745, 25.7, 26.9)}  # fmt: skip


def _plan(*extra: str) -> dict:
    res = cli.invoke(app, ["plan", *REPORT, *extra, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_report_case_plans_within_the_issue_bounds_for_vllm_0_19():
    """Weights ≤ 3 %, KV tokens and maximum concurrency ≤ 5 % of what vLLM 0.19 printed (76.02 GiB,
    595,584 tokens, 12.89×): the published checkpoint's BF16 exclusions and MTP layer, 64-token
    blocks, 13 attention layers (the MTP one included) and 4 groups, blocks ÷ groups reported."""
    out = _plan("--vllm-version", "0.19")
    assert out["weights_gib"] == pytest.approx(76.02, rel=0.03)
    assert out["kv_capacity_tokens"] == pytest.approx(595_584, rel=0.05)
    assert out["max_concurrency"] == pytest.approx(12.89, rel=0.05)
    lay = out["kv_layout"]
    assert (lay["block_size"], lay["group_size"], lay["attention_groups"] + lay["recurrent_groups"]) == (4224, 13, 4)
    assert out["engine_version"] == "vLLM 0.19" and "nvidia/Qwen3.5-122B-A10B-NVFP4" in out["weights_format_source"]
    # 0.25 on the same budget: 16-token alignment and concurrency × max_model_len tokens
    new = _plan()
    assert new["kv_layout"]["block_size"] == 4176 and new["kv_capacity_tokens"] == int(new["max_concurrency"] * 131072)
    # 0.19's 64-token blocks come from the GB10 log: planned on compute capability 12.x only
    other = cli.invoke(app, ["plan", *[a if a != "dgx-spark" else "h200" for a in REPORT], "--vllm-version", "0.19", "--json"])
    assert json.loads(other.output)["kv_layout"]["block_size"] == 4176


def test_from_log_takes_the_version_and_infers_the_spark_from_the_memory():
    res = cli.invoke(app, ["plan", "--from-log", str(LOG), "--json"])  # the log names Sehyo/Qwen3.5-122B-A10B-NVFP4: the catalog model
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["engine_version"] == "vLLM 0.19" and out["hardware"].startswith("NVIDIA DGX Spark")
    assert out["notes"][0].startswith("hardware dgx-spark") and "inferred" in out["notes"][0]
    checks = {c["what"]: c["error_pct"] for c in out["from_log"]}
    assert abs(checks["weights per GPU"]) <= 3 and abs(checks["KV-cache tokens"]) <= 5
    assert abs(checks["KV-cache tokens from the reported KV memory (layout only)"]) <= 3


def test_from_log_without_hardware_names_the_profile_the_log_implies():
    """An H200 log planned with the default H100 profile was silently −48 % on KV: now the profile
    is inferred from the log's memory, and a --hardware that disagrees is warned about."""
    log = Path(__file__).parent / "fixtures/bootlogs/vllm-0.25-h200-gemma-3-27b-8192.log"
    out = json.loads(cli.invoke(app, ["plan", "--from-log", str(log), "--json"]).output)
    assert out["hardware"].startswith("NVIDIA H200") and "inferred" in out["notes"][0]
    assert abs({c["what"]: c["error_pct"] for c in out["from_log"]}["KV-cache memory per GPU"]) <= 3
    forced = json.loads(cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", "h100-sxm", "--json"]).output)
    assert "as given, but" in forced["notes"][0] and "check --hardware" in forced["notes"][0]


def test_published_checkpoint_is_the_default_and_checkpoint_config_overrides(tmp_path):
    spec = load_model("qwen3.5-122b-a10b")
    fmt = weight_format("nvfp4", spec)
    assert fmt.kept == {"attn": 1.0, "recurrent": 1.0, "shared": 1.0} and "published checkpoint" in fmt.source
    assert weight_format("nvfp4", load_model("qwen3-8b")).kept == {}  # no published one: every linear layer
    cfg = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    own = weight_format("nvfp4", spec, tmp_path)
    assert own.kept == {} and str(tmp_path) in own.source
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 75 * 2**30},
                                                                       "weight_map": {"mtp.fc.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}}))  # fmt: skip
    res = cli.invoke(app, ["plan", *REPORT, "--checkpoint-config", str(tmp_path), "--json"])
    out = json.loads(res.output)
    assert out["weights_source"].startswith("safetensors headers") and out["weights_gib"] == pytest.approx(75, abs=0.01)  # MTP counted once
    (tmp_path / "bare.json").write_text("{}")
    with pytest.raises(ServelabError, match=r"^--checkpoint-config .*bare.json: no quantization_config"):
        weight_format(None, spec, tmp_path / "bare.json")


@pytest.mark.parametrize("case", TABLE)
def test_predict_is_within_10_percent_of_the_reports_single_stream_table(case):
    """Decode tok/s (the report's tok/s excludes TTFT: its 7,500-token RAG runs as fast as Q&A) at the
    report's acceptance: the verify step of 3 tokens plus two MTP passes, each reading the MTP layer
    and the 1.5 GB BF16 LM head (tables: validation/RESULTS-spark.md)."""
    prompt, out_tokens, rate, low, high = TABLE[case]
    res = cli.invoke(app, ["predict", "--model", "qwen3.5-122b-a10b", "--hardware", "dgx-spark", "--quant", "nvfp4", "--speculative", "mtp:2",
                           "--acceptance", str(rate), "--input-tokens", str(prompt), "--output-tokens", str(out_tokens), "--concurrency", "1", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    point = json.loads(res.output)["variants"][0]["points"][0]
    assert 1 / point["tpot_s"] == pytest.approx((low + high) / 2, rel=0.10)


def test_acceptance_rate_is_the_mean_acceptance_length_over_k():
    assert spec_tokens_per_step(0.7, 2) == pytest.approx(2.4) and spec_tokens_per_step(1.0, 3) == 4 and spec_tokens_per_step(0.5, 0) == 1


def test_version_rules():
    assert rules_for("0.19.2rc1")[0] == "0.19" and rules_for("0.25.0")[0] == rules_for(None)[0] == "0.25" and rules_for("1.0")[0] == "0.25"


@pytest.mark.parametrize(("args", "value", "rel"), [
    (["--model", "gpt-oss-120b", "--quant", "mxfp4"], ("weights_gib", 61), 0.02),  # ≈ 61 GB on one Spark
    (["--model", "qwen3-235b-a22b", "--quant", "gptq-int4", "--nodes", "2"], ("weights_gib", 57.6), 0.02),  # per node over two Sparks
    (["--model", "gemma-3-27b", "--quant", "fp8"], ("decode_tok_s_ceiling", 10), 0.1),  # a 27 GB dense FP8 model: ≈ 10 tok/s
])  # fmt: skip
def test_the_seeds_other_spark_figures_stay_right(args, value, rel):
    out = json.loads(cli.invoke(app, ["plan", *args, "--hardware", "dgx-spark", "--max-model-len", "8192", "--json"]).output)
    assert out[value[0]] == pytest.approx(value[1], rel=rel)


def test_a_checkpoint_index_that_names_no_shard_or_lies_is_not_planned_as_weights(tmp_path):
    """An index with an empty weight_map made huggingface_hub return no file, which planned 0 GiB of
    weights; a nested or nonsensical one gets one line naming it."""
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fp8"}}))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 5}, "weight_map": {}}))
    out = json.loads(cli.invoke(app, ["plan", "--model", "qwen3-8b", "--checkpoint-config", str(tmp_path), "--json"]).output)
    assert out["weights_source"] == "formula" and out["weights_gib"] > 5
    for text, needle in [(json.dumps({"metadata": {"total_size": -5}, "weight_map": {"a": "a.safetensors"}}), "metadata.total_size -5"),
                         ('{"weight_map": ' + "[" * 20000 + "]" * 20000 + "}", "nested deeper")]:  # fmt: skip
        index.write_text(text)
        res = cli.invoke(app, ["plan", "--model", "qwen3-8b", "--checkpoint-config", str(tmp_path)])
        assert res.exit_code == 2 and needle in res.output and res.output.count("\n") == 1 and "Traceback" not in res.output
