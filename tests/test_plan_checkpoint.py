"""Weights as loaded: the checkpoint's own quantization config (plan/checkpoint.py) and speculative
drafters' weights and KV (plan/drafter.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.plan.checkpoint import _excluded, checkpoint_format, read_quant_config
from servelab.plan.drafter import parse_drafter
from servelab.plan.hardware import load_hardware
from servelab.plan.memory import plan_memory
from servelab.plan.model_spec import catalog, load_model
from servelab.plan.quant import get_format, weight_bytes
from servelab.values.specs import GIB

cli = CliRunner()
NVFP4_EXPERTS_ONLY = {  # nvidia's Qwen3.5 NVFP4 exports: attention, Gated DeltaNet, shared experts, MTP and lm_head stay BF16
    "quant_method": "modelopt", "quant_algo": "NVFP4",
    "ignore": ["lm_head", "model.layers.*.linear_attn*", "model.layers.*.self_attn*", "model.layers.*.mlp.shared_expert*", "mtp*"],
}  # fmt: skip


def _checkpoint(folder, name: str, quantization_config: dict | None = None, sidecar: dict | None = None):
    """A checkpoint folder holding a catalog model's config.json (and a ModelOpt sidecar)."""
    folder.mkdir()
    cfg = json.loads(catalog()[name].read_text())
    cfg.pop("_servelab", None)
    cfg.pop("quantization_config", None)
    if quantization_config:
        cfg["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(cfg))
    if sidecar:
        (folder / "hf_quant_config.json").write_text(json.dumps(sidecar))
    return folder


@pytest.mark.parametrize(("module", "pattern", "hit"), [
    ("model.layers.3.self_attn.q_proj", "self_attn", True),  # transformers' modules_to_not_convert: a substring
    ("model.layers.3.self_attn.q_proj", "model.layers.*.self_attn*", True),  # ModelOpt: a shell pattern
    ("model.layers.3.self_attn.q_proj", "model.layers.*.self_attn", True),  # … matching the module's prefix
    ("model.layers.3.mlp.gate_proj", "re:.*self_attn.*", False),  # compressed-tensors: a regular expression
    ("model.layers.3.mlp.experts.0.gate_proj", "re:.*mlp\\.experts.*", True),
    ("model.layers.3.mlp.gate_proj", "lm_head", False),
])  # fmt: skip
def test_exclusion_patterns_match_as_the_loaders_do(module, pattern, hit):
    assert _excluded(module, [pattern]) is hit


def test_nvfp4_export_with_its_ignore_list_weighs_as_experts_only():
    spec = load_model("qwen3.5-122b-a10b")
    fmt = checkpoint_format(spec, NVFP4_EXPERTS_ONLY)
    assert fmt.name == "nvfp4" and fmt.kept == {"attn": 1.0, "recurrent": 1.0, "shared": 1.0}
    assert weight_bytes(spec, fmt) == pytest.approx(weight_bytes(spec, get_format("nvfp4-experts")))


def test_partial_exclusions_blend_per_layer():
    spec = load_model("qwen3-8b")  # 36 dense layers: exclude the MLPs of layers 0-8
    fmt = checkpoint_format(spec, {"quant_method": "fp8", "ignore": [f"model.layers.{i}.mlp" for i in range(9)]})
    assert fmt.name == "fp8" and fmt.kept == {"mlp": pytest.approx(9 / 36)}
    assert fmt.bits_for("mlp") == pytest.approx(8 + 8 * 9 / 36) and fmt.bits_for("attn") == 8


@pytest.mark.parametrize(("qc", "name"), [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block"),
    ({"quant_method": "fp8"}, "fp8"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["self_attn", "mlp.router", "embed_tokens", "lm_head"]}, "mxfp4"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "gptq-int4-g32"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq-int4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float"}}}}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
])  # fmt: skip
def test_quant_method_maps_to_a_format(qc, name):
    assert checkpoint_format(load_model("qwen3-30b-a3b"), qc).name == name


@pytest.mark.parametrize("qc", [
    {"quant_method": "bitsandbytes"},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": [4], "type": "float"}}}},  # wrong type
    {"quant_method": "compressed-tensors", "config_groups": {"g": "<script>"}},
    {"quant_method": "fp8", "ignore": [{"nested": 1}]},
])  # fmt: skip
def test_unknown_or_malformed_quant_config_is_one_error_naming_the_fix(qc):
    with pytest.raises(ServelabError, match="pass --quant") as err:
        checkpoint_format(load_model("qwen3-8b"), qc)
    assert "\n" not in str(err.value)


def test_plan_reads_the_checkpoints_config_and_the_modelopt_sidecar(tmp_path):
    """A config.json with quantization_config plans in that format without --quant; a ModelOpt export's
    hf_quant_config.json beside it counts the same; --quant still overrides."""
    inline = _checkpoint(tmp_path / "a", "qwen3.5-122b-a10b", NVFP4_EXPERTS_ONLY)
    modelopt = {k: v for k, v in NVFP4_EXPERTS_ONLY.items() if k != "quant_method"}
    sidecar = _checkpoint(tmp_path / "b", "qwen3.5-122b-a10b", sidecar={"quantization": modelopt})
    assert read_quant_config(sidecar / "config.json")["quant_algo"] == "NVFP4"
    expected = weight_bytes(load_model("qwen3.5-122b-a10b"), get_format("nvfp4-experts")) / GIB
    for folder in (inline, sidecar):
        res = cli.invoke(app, ["plan", "--model", str(folder), "--hardware", "b200", "--json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        assert doc["quant"] == "nvfp4" and doc["weights_gib"] == pytest.approx(expected)
    res = cli.invoke(app, ["plan", "--model", str(inline), "--hardware", "b200", "--quant", "bf16", "--json"])
    assert json.loads(res.output)["weights_gib"] == pytest.approx(load_model("qwen3.5-122b-a10b").total_params * 2 / GIB)


def test_a_catalog_model_plans_its_published_checkpoint_without_quant():
    """Issue 53: gpt-oss-120b's only checkpoint is MXFP4 (60.8 GiB published, the catalog's
    published_checkpoint_sizes); planned without --quant it was BF16 (217.6 GiB, "does not fit" on a
    DGX Spark). DeepSeek-V3's is block FP8. A catalog model without a quantization_config stays BF16;
    --quant bf16 still overrides."""
    res = cli.invoke(app, ["plan", "--model", "openai/gpt-oss-120b", "--hardware", "dgx-spark", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["quant"] == "mxfp4" and doc["weights_gib"] == pytest.approx(60.8, rel=0.01) and doc["fits"]
    assert "published checkpoint openai/gpt-oss-120b" in doc["weights_format_source"]
    bf16 = json.loads(cli.invoke(app, ["plan", "--model", "gpt-oss-120b", "--hardware", "dgx-spark", "--quant", "bf16", "--json"]).output)
    assert bf16["quant"] == "bf16" and bf16["weights_gib"] > 200
    deepseek = json.loads(cli.invoke(app, ["plan", "--model", "deepseek-v3", "--hardware", "h200", "--tp", "8", "--json"]).output)
    assert deepseek["quant"] == "fp8-block"
    assert json.loads(cli.invoke(app, ["plan", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--json"]).output)["quant"] == "bf16"


def test_mtp_drafter_adds_its_bf16_weights_and_one_attention_layer_of_kv():
    spec, hw = load_model("qwen3-next-80b-a3b"), load_hardware("h200")
    d = parse_drafter("mtp:2", spec, 2.0)
    assert (d.method, d.num_tokens, d.weight_bytes) == ("mtp", 2, spec.params["mtp"] * 2) and len(d.layers) == spec.mtp_layers == 1
    base = plan_memory(spec, get_format("bf16"), hw, max_model_len=32768, gpu_memory_utilization=0.92, tp=2)
    mtp = plan_memory(spec, get_format("bf16"), hw, max_model_len=32768, gpu_memory_utilization=0.92, tp=2, drafter=d)
    assert mtp.weights_gib - base.weights_gib == pytest.approx(spec.params["mtp"] * 2 / GIB / 2)
    assert mtp.kv_bytes_per_token == pytest.approx(base.kv_bytes_per_token * 13 / 12)  # 12 attention layers + the MTP layer
    assert mtp.layout.attention_groups == 1 and mtp.kv_capacity_tokens < base.kv_capacity_tokens


def test_ngram_adds_nothing_and_eagle3_adds_its_draft_model(tmp_path):
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    base = plan_memory(spec, get_format("bf16"), hw, max_model_len=8192)
    ngram = plan_memory(spec, get_format("bf16"), hw, max_model_len=8192, drafter=parse_drafter("ngram:4", spec, 2.0))
    assert (ngram.weights_gib, ngram.kv_capacity_tokens) == (base.weights_gib, base.kv_capacity_tokens)
    draft = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "vocab_size": 128256, "intermediate_size": 14336, "tie_word_embeddings": False}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(draft))
    d = parse_drafter(f"eagle3:{tmp_path}", spec, 2.0)
    draft_spec = load_model(str(tmp_path))
    assert d.num_tokens == 3 and d.weight_bytes == (draft_spec.total_params - draft_spec.params["embed"]) * 2
    eagle = plan_memory(spec, get_format("bf16"), hw, max_model_len=8192, drafter=d)
    assert eagle.kv_bytes_per_token == pytest.approx(base.kv_bytes_per_token * 33 / 32)


@pytest.mark.parametrize(("text", "needle"), [("mtp:2", "no MTP layers"), ("mtp:0", "positive integer"), ("medusa:2", "mtp:K, eagle3:PATH or ngram:K"),
                                              ("eagle3", "config.json"), ("ngram:x", "positive integer"), ("mtp:²", "positive integer"),
                                              ("ngram:" + "9" * 5000, "positive integer"), ("eagle3:/nonexistent/draft", "/nonexistent/draft")])  # fmt: skip
def test_bad_speculative_is_one_line(text, needle):
    res = cli.invoke(app, ["plan", "--model", "qwen3-8b", "--speculative", text])
    assert res.exit_code == 2 and needle in res.output and "--speculative" in res.output and "Traceback" not in res.output


@given(st.dictionaries(st.sampled_from(["quant_method", "quant_algo", "ignore", "modules_to_not_convert", "exclude_modules", "bits", "group_size",
                                        "weight_block_size", "config_groups"]),
                       st.one_of(st.none(), st.text(max_size=12), st.integers(-5, 300), st.lists(st.text(max_size=8), max_size=3),
                                 st.sampled_from(["fp8", "modelopt", "mxfp4", "gptq", "awq", "compressed-tensors", "NVFP4"]),
                                 st.dictionaries(st.text(max_size=4), st.dictionaries(st.just("weights"), st.dictionaries(st.sampled_from(["num_bits", "type"]), st.one_of(st.integers(0, 9), st.text(max_size=5))))))))  # fmt: skip
@example(raw={"quant_method": "\n"})  # a newline in the method once made a two-line error (found by CI's random seed)
@settings(suppress_health_check=[HealthCheck.too_slow])  # the nested dictionaries are slow to draw on a loaded machine: a health check, not the code under test
def test_any_quantization_config_gives_a_format_or_one_error(raw):
    try:
        fmt = checkpoint_format(load_model("qwen3-30b-a3b"), raw)
    except ServelabError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(0 <= v <= 1 for v in fmt.kept.values())


@given(st.text(max_size=30))
def test_any_speculative_text_gives_a_drafter_or_one_error(text):
    try:
        parse_drafter(text, load_model("qwen3-next-80b-a3b"), 2.0)
    except ServelabError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"{not json", b'["a list"]'])
def test_hostile_modelopt_sidecar(tmp_path, content):
    """A binary or broken hf_quant_config.json is one error line naming it; a JSON that is no
    object is no quantization config (the model plans in BF16)."""
    folder = _checkpoint(tmp_path / "m", "qwen3-8b")
    (folder / "hf_quant_config.json").write_bytes(content)
    res = cli.invoke(app, ["plan", "--model", str(folder), "--json"])
    if content.startswith(b"["):
        assert res.exit_code == 0 and json.loads(res.output)["quant"] == "bf16"
    else:
        assert res.exit_code == 2 and "hf_quant_config.json" in res.output and len(res.output.strip().splitlines()) == 1
