"""servelab plan: hand-computed cases for dense, MoE, sliding-window, hybrid linear-attention and MLA
models, quantization, memory, ceilings and CUDA-graph padding."""

from __future__ import annotations

import math

import json

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines.cudagraph import padding, prompt_step_graph, recommend
from servelab.engines.vllm import default_capture_sizes
from servelab.errors import ServelabError
from servelab.plan.hardware import load_hardware
from servelab.plan.memory import plan_memory
from servelab.plan.model_spec import catalog, load_model, parse_config
from servelab.plan.quant import get_format, weight_bytes
from servelab.plan.roofline import decode_step, expected_experts, expert_reads, spec_tokens_per_step

GIB = 2**30
cli = CliRunner()


@pytest.mark.parametrize("name", sorted(catalog()))
def test_catalog_parameters_match_the_reference_derivation(name):
    spec = load_model(name)
    ref = spec.reference
    assert spec.total_params == ref["total_derived"]
    assert spec.active_params == ref["active_derived_excl_input_embedding"]
    assert spec.kv_bytes_per_token(2) == ref["kv_cache_bytes_per_token_bf16"]
    assert spec.state_bytes_per_seq() == (ref.get("recurrent_state_bytes_per_sequence") or 0)


def test_dense_llama_by_hand():
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 100, "intermediate_size": 128}  # fmt: skip
    spec = parse_config(cfg)
    hd = 16
    attn = 64 * 4 * hd + 2 * 64 * 2 * hd + 4 * hd * 64
    per_layer = attn + 3 * 64 * 128 + 2 * 64
    assert spec.total_params == 2 * 100 * 64 + 2 * per_layer + 64
    assert spec.active_params == spec.total_params - 100 * 64
    assert spec.kv_bytes_per_token(2) == 2 * (2 * 2 * hd * 2)
    assert [layer.kind for layer in spec.layers] == ["full", "full"]


def test_catalog_moe_by_hand():
    """The catalog's Mixtral-8x7B (8 experts of 14,336, top 2) and Qwen2-57B-A14B (64 of 2,560, top 8,
    q/k/v biases, a gated shared expert of 20,480) counted from their architectures, not the code:
    46.7 B and 57.4 B in all, as published (the reference figures of their catalog entries)."""
    H, V, L = 4096, 32000, 32
    attn, expert = 2 * H * H + 2 * H * 8 * 128, 3 * H * 14336
    layer = attn + 8 * expert + H * 8 + 2 * H  # attention, experts, router, two norms
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.total_params == 2 * V * H + L * layer + H == 46_702_792_704
    assert mixtral.active_params == V * H + L * (layer - 6 * expert) + H
    assert mixtral.kv_bytes_per_token(2) == L * 2 * 8 * 128 * 2
    H, V, L = 3584, 151936, 28
    attn = 2 * H * H + 2 * H * 4 * 128 + H + 2 * 4 * 128  # q, o; k, v; their biases
    expert, shared = 3 * H * 2560, 3 * H * 20480 + H  # the shared expert and its sigmoid gate
    layer = attn + 64 * expert + shared + H * 64 + 2 * H
    qwen2 = load_model("Qwen/Qwen2-57B-A14B")
    assert qwen2.total_params == 2 * V * H + L * layer + H == 57_408_658_944
    assert qwen2.active_params == V * H + L * (layer - 56 * expert) + H
    assert qwen2.kv_bytes_per_token(2) == L * 2 * 4 * 128 * 2


def test_catalog_names_a_model_by_its_hub_ids():
    """A catalog entry answers to its name, its Hub id's last part and the ids that publish the same
    config (Mixtral's instruct release), offline; a near miss still gets the closest names."""
    for ref in ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1", "MIXTRAL-8X7B-INSTRUCT-V0.1"):
        assert load_model(ref, online=False).name == "mistralai/Mixtral-8x7B-v0.1"
    assert load_model("qwen3-14b", online=False).moe_layers == 0
    res = cli.invoke(app, ["plan", "--model", "mixtral-8x7"])
    assert res.exit_code == 2 and "mixtral-8x7b" in res.output


def test_memory_plan_dense_by_hand():
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    plan = plan_memory(spec, get_format("bf16"), hw, max_model_len=8192, gpu_memory_utilization=0.9, overhead_gib=2.0, concurrency=[64])
    weights = 8_030_261_248 * 2 / GIB
    budget = 79.18 * 0.9 - weights - 2.0
    per_token = 32 * 2 * 8 * 128 * 2  # 131,072 B
    assert plan.weights_gib == pytest.approx(weights)
    assert plan.budget_gib == pytest.approx(budget)
    assert plan.kv_capacity_tokens == int(budget * GIB // (per_token * 16)) * 16
    assert plan.max_concurrency == pytest.approx(budget * GIB / (8192 * per_token))
    assert plan.longest_context[64] == int(budget * GIB / 64 // per_token)
    assert plan.fits


def test_moe_expected_experts_and_weights_touched():
    assert expected_experts(128, 8, 1) == pytest.approx(8)
    assert expected_experts(128, 8, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert expected_experts(128, 8, 10_000) == pytest.approx(128)
    spec, hw, fmt = load_model("qwen3-30b-a3b"), load_hardware("h100-sxm"), get_format("bf16")
    one = decode_step(spec, fmt, hw, batch=1, context=0)
    many = decode_step(spec, fmt, hw, batch=256, context=0)
    expert_bytes = spec.expert_params * 2
    assert many.bytes - one.bytes == pytest.approx(spec.moe_layers * (expected_experts(128, 8, 256) - 8) * expert_bytes)


def test_expert_reads_count_a_share_read_again_per_tile_of_an_experts_tokens():
    """roofline.expert_reads: without tiles the distinct experts reached; with tiles of M rows and a share s read again, the distinct
    experts + s · E · E[ceil(n / M) − 1 | n ≥ 1]·P(n ≥ 1), n ~ Binomial(B, k/E), computed here term by term with exact binomial coefficients."""
    def exact(e: int, k: int, b: int, m: int, share: float) -> float:
        p = k / e
        extra = sum(math.comb(b, n) * p**n * (1 - p) ** (b - n) * (-(-n // m) - 1) for n in range(1, b + 1))
        return expected_experts(e, k, b) + share * e * extra

    assert expert_reads(7, 5, 1, tile_m=16) == pytest.approx(5) == pytest.approx(expected_experts(7, 5, 1))
    assert expert_reads(7, 5, 32) == pytest.approx(expected_experts(7, 5, 32))
    for e, k, b, m, share in ((7, 5, 32, 16, 1.0), (7, 5, 64, 32, 2 / 3), (8, 2, 576, 128, 1.0), (128, 8, 64, 16, 2 / 3)):
        assert expert_reads(e, k, b, tile_m=m, share=share) == pytest.approx(exact(e, k, b, m, share), rel=1e-9)
    assert expert_reads(7, 5, 32, tile_m=16) > 1.9 * 7  # FlexOlmo at 32 streams: 23 tokens an expert, most take two tiles
    assert expert_reads(128, 8, 64, tile_m=16) == pytest.approx(expected_experts(128, 8, 64), rel=1e-3)  # 4 tokens an expert: one tile
    assert expert_reads(8, 8, 100, tile_m=16) == pytest.approx(8 * 7) and expert_reads(7, 0, 32, tile_m=16) == 0  # every expert every token; none


def test_sliding_window_is_capped_per_sequence():
    spec = load_model("gemma-3-270m")
    assert (spec.count("full"), spec.count("sliding"), spec.sliding_window) == (3, 15, 512)
    per_gqa = 2 * 1 * 256 * 2
    assert spec.seq_bytes(32768, 2) == 32768 * 3 * per_gqa + 512 * 15 * per_gqa
    assert spec.seq_bytes(100, 2) == 100 * 18 * per_gqa


def test_hybrid_linear_attention_state_by_hand():
    spec = load_model("qwen3-next-80b-a3b")
    assert (spec.count("linear"), spec.count("full")) == (36, 12)
    conv = 2 * 16 * 128 + 32 * 128
    assert spec.state_bytes_per_seq() == 36 * (32 * 128 * 128 * 2 + conv * 3 * 2)  # BF16 state: no mamba_ssm_dtype in its config (vLLM 0.25)
    assert spec.kv_bytes_per_token(2) == 12 * 2 * 2 * 256 * 2
    # concurrency at 128K: growing KV plus a constant state per sequence
    plan = plan_memory(spec, get_format("fp8-block"), load_hardware("h200"), max_model_len=131072, overhead_gib=2.0)
    lay = plan.layout  # vLLM's hybrid layout: one page for every layer, groups of 12 layers
    assert (lay.block_size, lay.group_size, lay.attention_groups, lay.recurrent_groups, lay.padding_layers) == (544, 12, 1, 3, 0)
    blocks = int(plan.budget_gib * GIB // (544 * 2 * 2 * 256 * 2) // 12)  # 16 · ⌈1,097,728 B of state ÷ (16 · 2,048 B)⌉ = 544
    assert plan.max_concurrency == pytest.approx(blocks / (-(-131072 // 544) + 3))


def test_sliding_window_layout_by_hand():
    """Gemma 3 27B: 52 sliding-window layers (window 1,024) and 10 full ones → groups of 10 (6 sliding,
    1 full, 8 padding layers); a request holds its window plus one prefill chunk in each sliding group."""
    spec = load_model("gemma-3-27b")
    plan = plan_memory(spec, get_format("bf16"), load_hardware("h200"), max_model_len=32768, overhead_gib=2.0, max_num_batched_tokens=2048)
    lay = plan.layout
    assert (lay.block_size, lay.group_size, lay.attention_groups, lay.sliding_groups, lay.recurrent_groups, lay.padding_layers) == (16, 10, 1, 6, 0, 8)
    page = 16 * 2 * 16 * 128 * 2
    blocks = int(plan.budget_gib * GIB // page // 10)
    per_request = 32768 // 16 + 6 * (-(-(1024 - 1 + 2048) // 16) + 1)  # ⌈3,071 ÷ 16⌉ + 1 = 193 blocks per sliding group
    assert plan.max_concurrency == pytest.approx(blocks / per_request)
    assert plan.kv_capacity_tokens == int(blocks / per_request * 32768)
    short = plan_memory(spec, get_format("bf16"), load_hardware("h200"), max_model_len=1000, overhead_gib=2.0, max_num_batched_tokens=2048)
    assert short.layout.sliding_blocks(1000) == -(-1000 // 16) + 1  # the whole context fits in the window


def test_mla_latent_cache_and_tp_replication():
    spec = load_model("deepseek-v3")
    assert spec.kv_bytes_per_token(2) == 61 * (512 + 64) * 2
    one = plan_memory(spec, get_format("fp8-block"), load_hardware("b200"), max_model_len=32768, tp=8, overhead_gib=2.0)
    assert one.kv_bytes_per_token == 61 * 576 * 2  # MLA latent replicated on every TP rank
    assert one.weights_gib == pytest.approx(weight_bytes(spec, get_format("fp8-block")) / GIB / 8)


def test_gqa_kv_is_split_by_tp_up_to_the_kv_heads():
    spec = load_model("llama-3.1-70b")
    plan = plan_memory(spec, get_format("bf16"), load_hardware("h100-sxm"), tp=4, max_model_len=8192)
    assert plan.kv_bytes_per_token == 327680 / 4
    plan16 = plan_memory(spec, get_format("bf16"), load_hardware("h100-sxm"), tp=16, max_model_len=8192)
    assert plan16.kv_bytes_per_token == 327680 / 8  # only 8 KV heads to split


def test_quant_formats_real_bits_and_published_sizes():
    assert get_format("nvfp4").bits == 4.5 and get_format("mxfp4").bits == 4.25
    assert get_format("gptq-int4").bits == pytest.approx(4.15625)
    gpt = load_model("gpt-oss-120b")
    assert weight_bytes(gpt, get_format("mxfp4", gpt)) / 1e9 == pytest.approx(65.2, abs=0.1)  # published original/ 65.2 GB
    assert weight_bytes(load_model("qwen3-8b"), get_format("bf16")) / 1e9 == pytest.approx(16.4, abs=0.05)
    assert weight_bytes(load_model("llama-3.1-8b"), get_format("gguf-q4_k_m")) / 1e9 == pytest.approx(4.92, abs=0.05)
    with pytest.raises(ServelabError, match="closest"):
        get_format("nvfp5")


def test_roofline_memory_bound_by_hand():
    spec, hw, fmt = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), get_format("bf16")
    step = decode_step(spec, fmt, hw, batch=1, context=1000)
    weights = (spec.total_params - spec.params["embed"]) * 2
    kv = 1000 * 131072
    assert step.bound == "memory"
    assert step.time_s == pytest.approx((weights + kv) / 3350e9)


def test_speculative_tokens_per_step():
    assert spec_tokens_per_step(0.7, 3) == pytest.approx(1 + 3 * 0.7)  # the mean acceptance length at that acceptance rate
    assert spec_tokens_per_step(1.0, 3) == 4 and spec_tokens_per_step(0.5, 0) == 1


def test_cudagraph_default_list_and_padding():
    sizes = default_capture_sizes(256, 8192)
    assert len(sizes) == 51 and sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512 and 272 in sizes
    assert max(default_capture_sizes(1024, 16384, sm100=True)) == 1024
    larger = default_capture_sizes(1024, 8192, largest=2048)  # vLLM --max-cudagraph-capture-size 2048: every 16 tokens up to it
    assert larger[:51] == default_capture_sizes(1024, 8192) and len(larger) == 51 + 96 and larger[-1] == 2048
    assert max(default_capture_sizes(1024, 1024, largest=2048)) == 1024  # capped at max_num_batched_tokens
    # the size to compare for steps that carry prompts: the next power of two ≥ 2 · P + B, at most 2,048 (the largest measured); none for a long prompt
    assert [prompt_step_graph(p, b) for p, b in ((256, 16), (512, 16), (1024, 64), (4096, 1))] == [1024, 2048, 2048, None]
    rows = {r.concurrency: r for r in padding([1, 2, 4, 8, 16, 32, 64], [4, 5, 10, 100])}
    assert (rows[5].graph_size, rows[5].waste) == (8, pytest.approx(3 / 8))
    assert (rows[10].graph_size, rows[10].waste) == (16, pytest.approx(6 / 16))
    assert rows[4].waste == 0 and rows[100].graph_size is None
    assert recommend([1, 2, 4, 8], [5, 10]) == [1, 2, 4, 5, 8, 10]
    spec_rows = padding(default_capture_sizes(64, 8192, num_spec_tokens=2), [4], num_spec_tokens=2)
    assert spec_rows[0].tokens == 12 and spec_rows[0].graph_size == 12  # multiples of 1 + k are captured


def test_cli_answers_the_spark_question_in_one_command():
    res = cli.invoke(app, ["plan", "--model", "gpt-oss-120b", "--hardware", "dgx-spark", "--quant", "mxfp4",
                           "--max-model-len", "131072", "--concurrency", "1,4", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("weights_gib", "kv_bytes_per_token", "kv_capacity_tokens", "max_concurrency", "decode_tok_s_ceiling", "fits"):
        assert key in out
    assert out["fits"] and out["max_concurrency"] >= 1 and 20 < out["decode_tok_s_ceiling"] < 100


def test_cli_title_counts_the_gpus_of_the_tp_group():
    res = cli.invoke(app, ["plan", "--model", "qwen3-32b", "--tp", "4", "--nodes", "2"])
    assert res.exit_code == 0 and "4 × NVIDIA H100 SXM5 80GB (TP 4, 2 nodes)" in " ".join(res.output.split())


def test_cli_unknown_names_get_the_closest():
    res = cli.invoke(app, ["plan", "--model", "qwen3-8", "--hardware", "h100-sxm"])
    assert res.exit_code == 2 and "qwen3-8b" in res.output and "Traceback" not in res.output
    res = cli.invoke(app, ["plan", "--model", "qwen3-8b", "--hardware", "h100"])
    assert res.exit_code == 2 and "h100-sxm" in res.output


def test_cli_cudagraph_table():
    res = cli.invoke(app, ["plan", "cudagraph", "--capture-sizes", "1,2,4,8,16,32,64", "--concurrency", "4,5,8,10,16"])
    assert res.exit_code == 0
    assert "38%" in res.output and '"cudagraph_capture_sizes": [1, 2, 4, 5, 8, 10, 16, 32, 64]' in res.output


def test_user_hardware_yaml(tmp_path):
    (tmp_path / "box.yaml").write_text("name: my box\nmemory_gib: 48\nbandwidth_gbs: 1000\ntflops: {bf16: 100}\n")
    assert load_hardware(str(tmp_path / "box.yaml")).memory_gib == 48
    (tmp_path / "bad.yaml").write_text("name: my box\nmemory_gib: -1\nbandwidth_gbs: 1000\n")
    with pytest.raises(ServelabError, match="memory_gib"):
        load_hardware(str(tmp_path / "bad.yaml"))
    (tmp_path / "broken.yaml").write_text("name: [my box\n")
    with pytest.raises(ServelabError, match=r"^--hardware .*broken.yaml: not valid YAML at line 2$"):
        load_hardware(str(tmp_path / "broken.yaml"))


def test_unified_memory_overcommit_is_flagged():
    plan = plan_memory(load_model("qwen3-8b"), get_format("bf16"), load_hardware("dgx-spark"), gpu_memory_utilization=0.98)
    assert any("asks for 119.3 GiB of unified memory" in n and "at most 0.85 is safe" in n for n in plan.notes)
    default = plan_memory(load_model("qwen3-8b"), get_format("bf16"), load_hardware("dgx-spark"))
    assert default.gpu_memory_utilization == 0.85 and any("not vLLM's default 0.92" in n for n in default.notes)
    assert plan_memory(load_model("qwen3-8b"), get_format("bf16"), load_hardware("h200")).gpu_memory_utilization == 0.92


def test_dgx_spark_profile_matches_public_reports():
    """The dgx-spark profile against public GB10 reports (tests/fixtures/gb10/memory-reports.yaml): the
    total CUDA sees, and a safe utilization that starts where they started and stays below where they failed."""
    import yaml

    reports = yaml.safe_load((ROOT / "tests/fixtures/gb10/memory-reports.yaml").read_text())
    hw = load_hardware("dgx-spark")
    totals = [r["total_gib"] for r in reports if "total_gib" in r]
    assert all(abs(hw.memory_gib - t) <= 0.1 for t in totals) and len(totals) >= 3
    failed = min(u for r in reports for u in r.get("fails", []))
    started = max(u for r in reports for u in r.get("works", []) if u < failed)
    assert started <= hw.safe_utilization() < failed
    assert all(r["source"].startswith("https://github.com/") for r in reports)


def test_nvfp4_experts_only_matches_the_published_convention():
    spec = load_model("qwen3.5-122b-a10b")
    only_experts = weight_bytes(spec, get_format("nvfp4-experts"))
    expected = spec.params["experts"] * 4.5 / 8 + (spec.total_params - spec.params["experts"]) * 2
    assert only_experts == pytest.approx(expected)
    assert only_experts > weight_bytes(spec, get_format("nvfp4"))


ROOT = __import__("pathlib").Path(__file__).parent.parent
FIXTURES = ROOT / "tests/fixtures/bootlogs"
# Every real vLLM 0.25 boot log servelab made (load_format dummy; H100 and H200; dense, MoE fp8, TP 2, Gated
# DeltaNet and Mamba-2 hybrids; INDEX.yaml), and the H100 boot of the synchronized-waves runs.
REAL_LOGS = sorted(FIXTURES.glob("vllm-0.25-h*.log")) + [ROOT / "validation/waves-h100/vllm-1.log"]


def _hardware(log) -> str:
    return "h200" if "-h200-" in log.name else "h100-sxm"


CONFIGS = {"vllm-0.25-h100-dots1-transformers-backend.log": "dots-llm1-8l"}  # a log whose model is a validation config, not a catalog one


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.name)
def test_plan_from_log_reproduces_what_vllm_reported(log):
    """plan --from-log reads model, quant, context, utilization, TP, KV dtype and batch limits from the
    log and is within 3% of vLLM's weights, KV memory, KV tokens and maximum concurrency (issue 16),
    0.1% for the layout alone (dots.llm1 cut to 8 layers, a model_type read as a generic decoder, given its config)."""
    model = ["--model", str(ROOT / "validation/configs" / CONFIGS[log.name])] if log.name in CONFIGS else []
    res = cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", _hardware(log), "--json", *model])
    assert res.exit_code == 0, res.output
    checks = {c["what"].split(" at ")[0]: c for c in json.loads(res.output)["from_log"]}
    for what in ("weights per GPU", "KV-cache memory per GPU", "KV-cache tokens", "max concurrency"):
        assert checks[what]["reported"] and abs(checks[what]["error_pct"]) <= 3, checks[what]
    assert abs(checks["KV-cache tokens from the reported KV memory (layout only)"]["error_pct"]) <= 0.1


DEBUG_LOGS = [p for p in REAL_LOGS if "Memory profiling takes" in p.read_text()]


@pytest.mark.parametrize("log", DEBUG_LOGS, ids=lambda p: p.name)
def test_runtime_memory_matches_vllms_memory_profile(log):
    """The runtime terms (engines/vllm.py, runtime_memory) against what vLLM measured in the same boot:
    non-torch increase + torch peak of the profiling run + the CUDA-graph estimate, within 0.25 GiB."""
    import re

    text = log.read_text()
    peak, non_torch = map(float, re.search(r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB", text).groups())
    graphs = re.search(r"Estimated CUDA graph memory: ([\d.]+) GiB", text)
    res = cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", _hardware(log), "--json"])
    runtime = json.loads(res.output)["runtime"]
    assert runtime["cuda_graphs_gib"] == pytest.approx(float(graphs.group(1)) if graphs else 0.0, abs=0.12)
    predicted = sum(runtime[k] for k in ("non_torch_gib", "activations_gib", "sampler_gib", "cuda_graphs_gib"))
    assert predicted == pytest.approx(peak + non_torch + (float(graphs.group(1)) if graphs else 0.0), abs=0.25)
    total = re.search(r"total_memory=([\d.]+)GiB", text)  # the hardware profile is CUDA's total, as vLLM saw it
    assert load_hardware(_hardware(log)).memory_gib == float(total.group(1))


def test_latent_experts_activations_are_two_matrices_at_the_latent_width():
    """Nemotron 3 Super's experts (relu2, no gate) work in its moe_latent_size: the fused-MoE caches of M x top-k rows are
    2 N wide before and K = latent after the experts (engines/vllm.py runtime_memory; the matrix count was once taken from the
    parameters over hidden x width, which for a latent expert gave none)."""
    from servelab.engines import plan_engine
    from servelab.engines.vllm_moe import reread_tiles

    cfg = json.loads((ROOT / "tests/fixtures/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json").read_text())
    spec = parse_config(cfg)
    assert spec.expert_matrices == 2 and all(share == 1 / 2 for _, _, share in reread_tiles(spec, "bf16"))
    M, k, N, K, H = 8192, spec.experts_per_token, spec.moe_intermediate_size, cfg["moe_latent_size"], spec.hidden_size
    expected = (M * k * (2 * N + K) * 2 + 4 * H * M * 2) / 2**30
    assert plan_engine().runtime_memory(spec, M, 256).activations_gib == pytest.approx(expected)
    assert parse_config(json.loads((ROOT / "validation/configs/mixtral-8x7b/config.json").read_text())).expert_matrices == 3


def test_plan_from_log_reads_the_engine_config_line():
    from servelab.metrics.bootlog import parse_bootlog
    from servelab.plan.from_log import log_inputs

    inputs = log_inputs(parse_bootlog((FIXTURES / "vllm-0.25-h100-qwen3-30b-a3b-fp8.log").read_text()))
    assert (inputs.model, inputs.quant, inputs.max_model_len, inputs.gpu_memory_utilization, inputs.tp, inputs.kv_dtype) == (
        "qwen3-30b-a3b", "fp8", 4096, 0.92, 1, "auto")  # fmt: skip


def test_plan_from_log_plans_the_speculative_decoding_it_ran(tmp_path):
    """The engine-config line's ``speculative_config=SpeculativeConfig(method=…, model=…, num_spec_tokens=K)``
    (vLLM 0.25 ``SpeculativeConfig.__repr__``) becomes --speculative mtp:K: MTP weights, its attention
    layer in the groups, and K extra state pages per recurrent group (``MambaSpec.num_speculative_blocks``).
    The log is the real FP8 Qwen3-Next boot with only that field rewritten (no MTP boot was made)."""
    real = (FIXTURES / "vllm-0.25-h200-qwen3-next-80b-a3b-fp8-8192.log").read_text()
    spec_line = "speculative_config=SpeculativeConfig(method='mtp', model='/tmp/models/qwen3-next-80b-a3b', num_spec_tokens=2)"
    log = tmp_path / "mtp.log"
    log.write_text(real.replace("speculative_config=None", spec_line, 1))
    res = cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", "h200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["speculative"]["drafter"] == "mtp" and doc["speculative"]["draft_tokens"] == 2
    lay = doc["kv_layout"]
    assert (lay["group_size"], lay["attention_groups"], lay["recurrent_groups"], lay["speculative_blocks"]) == (13, 1, 3, 2)
    blocks = -(-8192 // lay["block_size"]) + 3 * (1 + 2)  # 16 attention blocks + 3 groups × 3 state pages
    layout_tokens = next(c for c in doc["from_log"] if c["what"].startswith("KV-cache tokens from"))["planned"]
    assert doc["max_concurrency"] == pytest.approx(int(doc["kv_budget_gib"] * GIB // lay["page_bytes"] // 13) / blocks)
    assert layout_tokens < int(49.58 * GIB // lay["page_bytes"] // 12) / (16 + 3) * 8192  # fewer than without MTP
    log.write_text(real.replace("speculative_config=None", spec_line.replace("'mtp'", "'eagle3'"), 1))
    res = cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", "h200"])
    assert res.exit_code == 2 and "--speculative eagle3:DRAFT_CONFIG" in res.output


def test_plan_from_log_refuses_another_engines_log_and_options_override_the_log():
    res = cli.invoke(app, ["plan", "--from-log", str(ROOT / "tests/fixtures/bootlogs/llamacpp-embedded.log")])
    assert res.exit_code == 2 and "a boot log of llama.cpp" in res.output
    res = cli.invoke(app, ["plan", "--from-log", str(FIXTURES / "vllm-0.25-h100-qwen3-8b.log"), "--max-model-len", "4096", "--json"])
    doc = json.loads(res.output)
    assert doc["max_model_len"] == 4096 and not any(c["reported"] for c in doc["from_log"] if c["what"].startswith("max concurrency"))


HYBRID_LOGS = [p for p in REAL_LOGS if any(m in p.name for m in ("nemotron", "qwen3-next", "gemma-3", "gpt-oss"))]  # real vLLM 0.25 boots on H200s


@pytest.mark.parametrize("log", HYBRID_LOGS, ids=lambda p: p.name)
def test_hybrid_layout_reproduces_vllms_blocks_groups_and_capacity(log):
    """Gated DeltaNet (Qwen3-Next, TP 2 and FP8 TP 1), Mamba-2 (Nemotron-H) and sliding-window (Gemma 3,
    gpt-oss) hybrids at two contexts: the block size and padding layers vLLM printed, and its KV tokens
    and concurrency from its KV memory, exactly."""
    import re

    text = log.read_text()
    res = cli.invoke(app, ["plan", "--from-log", str(log), "--hardware", "h200", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    block = re.search(r"Setting attention block size to (\d+) tokens", text)  # printed only when a recurrent state sets it
    assert doc["kv_layout"]["block_size"] == (int(block.group(1)) if block else 16)
    padding = re.search(r"Add (\d+) padding layers", text)
    assert doc["kv_layout"]["padding_layers"] == (int(padding.group(1)) if padding else 0)
    checks = {c["what"]: c for c in doc["from_log"]}
    assert abs(checks["KV-cache tokens from the reported KV memory (layout only)"]["error_pct"]) <= 0.1
    assert abs(checks["weights per GPU"]["error_pct"]) <= 3


def test_prefix_caching_keeps_more_recurrent_state():
    """vLLM 0.25 with --enable-prefix-caching (off by default for hybrids): Gated DeltaNet layers
    keep two state pages per request (mamba_cache_mode align); Mamba-2 hybrids cache a state per
    block (all), the block a multiple of the 256-token scan chunk (MambaModelConfig,
    Platform._align_hybrid_block_size)."""
    gdn = load_model("qwen3-next-80b-a3b")
    off = plan_memory(gdn, get_format("bf16"), load_hardware("h200"), tp=2, max_model_len=32768, overhead_gib=2.0)
    on = plan_memory(gdn, get_format("bf16"), load_hardware("h200"), tp=2, max_model_len=32768, overhead_gib=2.0, prefix_caching=True)
    assert (off.layout.mamba_cache_mode, on.layout.mamba_cache_mode) == ("none", "align") and on.layout.block_size == off.layout.block_size == 544
    blocks = off.layout.blocks(off.budget_gib * GIB)
    assert (off.max_concurrency, on.max_concurrency) == (pytest.approx(blocks / (61 + 3)), pytest.approx(blocks / (61 + 3 * 2)))
    mamba = load_model("nemotron-3-nano-30b-a3b")
    lay = plan_memory(mamba, get_format("bf16"), load_hardware("h200"), max_model_len=32768, overhead_gib=2.0, prefix_caching=True).layout
    state_tokens = -(-lay.state_bytes // (lay.page_bytes // lay.block_size))
    assert lay.mamba_cache_mode == "all" and lay.block_size == 256 * -(-state_tokens // 256) == 2304
    assert lay.blocks_per_request(32768) == -(-32768 // 2304) * (lay.attention_groups + lay.recurrent_groups)
    from servelab.metrics.bootlog import parse_bootlog

    assert parse_bootlog((FIXTURES / "vllm-0.25-h200-nemotron-3-nano-30b-a3b-8192.log").read_text()).prefix_caching is False
    assert parse_bootlog((FIXTURES / "vllm-0.25-h200-gemma-3-27b-8192.log").read_text()).prefix_caching is True
