"""Regression tests from the real vLLM 0.25 GPU validation run (validation/vllm_gpu.py on an H100, 2026-11-21):
its boot logs and /metrics dump are fixtures, so the parsers and the plan are checked against them on CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servelab.rules.diagnose import diagnose
from servelab.engines.counters import total
from servelab.engines.cudagraph import padding
from servelab.metrics.bootlog import parse_bootlog
from servelab.metrics.server import compute, parse
from servelab.plan.hardware import load_hardware
from servelab.plan.memory import plan_memory
from servelab.plan.model_spec import parse_config
from servelab.plan.quant import get_format

FIX = Path(__file__).parent / "fixtures"
DENSE_LOG = (FIX / "bootlogs" / "vllm-0.25-h100-qwen3-8b.log").read_text()
MOE_LOG = (FIX / "bootlogs" / "vllm-0.25-h100-qwen3-30b-a3b-fp8.log").read_text()
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288, "tie_word_embeddings": False, "max_position_embeddings": 40960}  # fmt: skip
QWEN3_30B = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
             "head_dim": 128, "vocab_size": 151936, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
             "num_experts_per_tok": 8, "tie_word_embeddings": False, "max_position_embeddings": 40960}  # fmt: skip  (../shared/gpu-vllm/configs)


def test_bootlog_dense_exactly_as_printed():
    f = parse_bootlog(DENSE_LOG)
    assert (f.engine, f.version, f.model) == ("vllm", "0.25.0", "/tmp/models/qwen3-8b")
    assert (f.kv_cache_tokens, f.kv_cache_gib) == (396720, 54.48)
    assert (f.max_concurrency.context_tokens, f.max_concurrency.factor) == (8192, 48.43)
    assert len(f.cudagraph_sizes) == 51 and f.cudagraph_sizes[-1] == 512
    assert (f.weights_gib, f.weights_load_s, f.compile_s, f.graph_capture_s, f.graph_capture_gib) == (15.27, 1.27171, 22.88, 4.0, 1.00)
    assert (f.attention_backend, f.gpu_memory_utilization, f.ready_s) == ("FLASH_ATTN", 0.9, 76.0)


def test_bootlog_moe_backends_and_capture_list():
    f = parse_bootlog(MOE_LOG)
    assert f.cudagraph_sizes == [1, 2, 4, 8, 16, 32, 64]
    assert (f.moe_backend, f.quant_backends) == ("TRITON", ["CutlassFP8ScaledMMLinearKernel"])
    assert (f.kv_cache_tokens, f.kv_cache_gib, f.max_concurrency.factor, f.gpu_memory_utilization) == (465456, 42.62, 113.64, 0.92)


def test_bootlog_moe_kernel_config_tuned_or_default():
    """vLLM 0.25 names the tuned fused-MoE config it loaded, or warns that it found none for the experts on
    this GPU and runs its default (the file it looked for named either way, from the last of the paths it tried);
    one untuned layer makes the run untuned, whatever the order; a dense model has neither."""
    f = parse_bootlog(MOE_LOG)
    assert (f.moe_config, f.moe_config_tuned) == ("E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json", False)
    tuned = parse_bootlog((FIX / "bootlogs" / "vllm-0.25-h200-qwen3-next-80b-a3b-8192.log").read_text())
    assert (tuned.moe_config, tuned.moe_config_tuned) == ("E=512,N=256,device_name=NVIDIA_H200.json", True)
    lines = ["INFO 11-26 05:22:31 [fused_moe.py:1093] Using configuration from /x/configs/E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json for MoE layer.",
             "WARNING 11-26 05:22:32 [fused_moe.py:1106] Using default MoE config. Performance might be sub-optimal! Config file not found at "
             "/mine/E=64,N=2560,device_name=NVIDIA_H100_80GB_HBM3.json, /x/configs/E=64,N=2560,device_name=NVIDIA_H100_80GB_HBM3.json"]  # fmt: skip
    for text in ("\n".join(lines), "\n".join(reversed(lines))):
        assert (parse_bootlog(text).moe_config, parse_bootlog(text).moe_config_tuned) == ("E=64,N=2560,device_name=NVIDIA_H100_80GB_HBM3.json", False)
    assert (parse_bootlog(DENSE_LOG).moe_config, parse_bootlog(DENSE_LOG).moe_config_tuned) == (None, None)


@pytest.mark.parametrize(("cfg", "quant", "log"), [(QWEN3_8B, "bf16", DENSE_LOG), (QWEN3_30B, "fp8", MOE_LOG)])
def test_plan_predicts_vllms_kv_cache_within_3_percent(cfg, quant, log):
    facts = parse_bootlog(log)
    plan = plan_memory(parse_config(cfg), get_format(quant), load_hardware("h100-sxm"), max_model_len=facts.max_model_len,
                       gpu_memory_utilization=facts.gpu_memory_utilization, max_num_seqs=facts.max_num_seqs)  # fmt: skip
    assert plan.kv_capacity_tokens == pytest.approx(facts.kv_cache_tokens, rel=0.03)
    assert plan.budget_gib == pytest.approx(facts.kv_cache_gib, rel=0.03)
    assert plan.max_concurrency == pytest.approx(facts.max_concurrency.factor, rel=0.03)
    assert plan.weights_gib == pytest.approx(facts.weights_gib, rel=0.01)


def test_padding_rule_agrees_with_vllms_cudagraph_metrics():
    """The fixture holds vLLM's own --cudagraph-metrics table from the c=5 run: 5 tokens ran the graph of 8."""
    rows = re.findall(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*FULL", MOE_LOG)
    assert ("5", "8", "3") in rows
    ours = {p.concurrency: p.graph_size for p in padding(parse_bootlog(MOE_LOG).cudagraph_sizes, [4, 5, 8, 10, 16])}
    assert ours == {4: 4, 5: 8, 8: 8, 10: 16, 16: 16}


def test_real_metrics_dump_parses_with_every_name_servelab_reads():
    samples = parse((FIX / "metrics" / "vllm-0.25-h100-qwen3-8b.txt").read_text())
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:request_queue_time_seconds_sum", "vllm:time_to_first_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_sum", "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):  # fmt: skip
        assert total(samples, name) is not None, name
    assert total(samples, "vllm:prompt_tokens_total") == 294484 and total(samples, "vllm:prefix_cache_hits_total") == 9920
    same = compute("vllm", samples, samples, [])
    assert same.prompt_tokens == 0 and same.generation_tokens == 0 and same.prefix_cache_hit_rate is None


def test_diagnosis_uses_the_boot_logs_capture_sizes(tmp_path):
    from servelab.metrics.summary import LevelSummary
    from servelab.store.results import EndpointInfo, LoadSpec, RunResult

    run = RunResult(endpoint=EndpointInfo(url="http://x", engine="vllm", model="m"),
                    load=LoadSpec(concurrency=[5, 10, 16], warmup=None, input_tokens=256, output_tokens=256, prefix_cache="cold",
                                  ignore_eos=True, seed=0, request_timeout_s=600),
                    levels=[LevelSummary(concurrency=c, ok=1, failed_requests=0, incomplete=0) for c in (5, 10, 16)])  # fmt: skip
    found = {f.evidence["concurrency"]: f.evidence["graph_size"] for f in diagnose(run, parse_bootlog(MOE_LOG).cudagraph_sizes) if f.kind == "cudagraph_padding"}
    assert found == {5: 8, 10: 16}


def test_steps_that_carry_prompts_above_the_largest_graph_are_named_with_the_lever():
    """The steady state of Qwen3-30B-A3B fp8 on an H100 (validation/capture-h100/): with vLLM's capture
    sizes a 512-token prompt beside the others' decode (515–575 tokens) is above the largest graph
    (512), and the finding names the larger size to compare; served with graphs up to 2,048 tokens
    (measured +22–65 % tok/s) nothing is above it."""
    from servelab.store.results import RunResult

    found = {}
    for name in ("qwen3-30b-a3b", "qwen3-30b-a3b-capture2048"):
        run = RunResult.model_validate_json((Path(__file__).parents[1] / "validation" / "capture-h100" / f"{name}-stagger-run.json").read_text())
        found[name] = [f for f in diagnose(run, run.boot.cudagraph_sizes) if f.kind == "prompt_steps_without_graphs"]
    (f,) = found["qwen3-30b-a3b"]
    assert f.evidence["concurrency_levels"] == [4, 16, 64] and f.evidence["step_tokens"] == [515, 527, 575] and f.evidence["largest_capture_size"] == 512 and f.evidence["suggested"] == 2048
    assert "--max-cudagraph-capture-size 2048" in f.message and "--vary max-capture-size=512,2048" in f.message
    assert found["qwen3-30b-a3b-capture2048"] == []


def test_a_capture_list_that_inflates_vllms_graph_memory_estimate_is_named():
    """vLLM 0.25 sizes its KV cache after reserving its estimate of the CUDA graphs' memory: the first
    graph's plus the second's times the other sizes. A list whose largest sizes are far apart (vLLM's and
    nine more up to 2,048) reserved 20.9 GiB for graphs that took 1.1 GiB, halving Qwen3-30B-A3B's KV
    cache (40.1 → 19.9 GiB); vLLM's own list up to 2,048 (--max-cudagraph-capture-size) reserved 1.3 for 2.0."""
    import lzma

    from servelab.store.results import RunResult

    got = {}
    for folder, name in (("capture-h100", "qwen3-30b-a3b-capture2048"), ("capture-h100", "qwen3-30b-a3b"), ("capture-h100-machine7", "qwen3-30b-a3b-max2048")):
        where = Path(__file__).parents[1] / "validation" / folder
        run = RunResult.model_validate_json((where / f"{name}-stagger-run.json").read_text())
        run.boot = parse_bootlog(lzma.open(where / f"{name}-boot.log.xz", "rt").read())
        got[name] = ((run.boot.graph_estimate_gib, run.boot.graph_pool_gib), [f for f in diagnose(run, run.boot.cudagraph_sizes) if f.kind == "graph_memory_overreserved"])
    assert got["qwen3-30b-a3b-capture2048"][0] == (20.94, 1.11) and got["qwen3-30b-a3b"][0] == (0.74, 0.84) and got["qwen3-30b-a3b-max2048"][0] == (1.31, 1.99)
    (f,) = got["qwen3-30b-a3b-capture2048"][1]
    assert "19.8 GiB smaller" in f.message and "--max-cudagraph-capture-size" in f.message and "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in f.message
    assert got["qwen3-30b-a3b"][1] == [] and got["qwen3-30b-a3b-max2048"][1] == []
    from typer.testing import CliRunner

    from servelab.cli import app

    text = lzma.open(Path(__file__).parents[1] / "validation" / "capture-h100" / "qwen3-30b-a3b-capture2048-boot.log.xz", "rt").read()
    res = CliRunner().invoke(app, ["bootlog", "-"], input=text)
    assert res.exit_code == 0 and "20.94 GiB (the pool took 1.11 GiB)" in " ".join(res.output.split())


def test_the_h100_run_document_reads_back_and_renders_gpu_columns():
    """run.json of the H100 validation bench (schema 1), with NVML telemetry measured there."""
    from rich.console import Console

    from servelab.report.table import bench_table, server_table
    from servelab.store.results import RunResult

    run = RunResult.model_validate_json((FIX / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    assert [lv.concurrency for lv in run.levels] == [1, 2, 4, 5, 8, 10, 16, 64]
    assert run.levels[0].gpu.energy_per_output_token_j > run.levels[-1].gpu.energy_per_output_token_j > 0
    console = Console(width=250, record=True)
    console.print(bench_table(run))
    console.print(server_table(run))
    text = console.export_text()
    assert "% of ceiling" in text and "J / out tok" in text and "NVML" in text
