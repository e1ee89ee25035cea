"""Server-side counters per engine: vLLM (new and old names) and SGLang from fixtures, llama.cpp for
real (including speculative decoding with a draft model), and the findings they lead to."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from servelab.run.bench import Bench, BenchOptions
from servelab.rules.diagnose import diagnose
from servelab.server.endpoint import discover
from servelab.server.local import LocalServer, model_path
from servelab.metrics.server import compute, parse
from servelab.store.results import RunResult

FIX = Path(__file__).parent / "fixtures" / "metrics"


def fixture(name: str, **values) -> dict:
    text = (FIX / name).read_text()
    for key, value in values.items():
        text = text.replace(key, str(value))
    return parse(text)


def test_vllm_deltas_new_names():
    s = compute("vllm", fixture("vllm-0.10-before.txt"), fixture("vllm-0.10-after.txt"), [])
    assert s.prompt_tokens == 1000 and s.generation_tokens == 400
    assert s.cached_prompt_tokens == 250 and s.prefix_cache_hit_rate == pytest.approx(0.25)
    assert s.preemptions == 2
    assert s.queue_time_mean_ms == pytest.approx(100.0)  # 0.3 s over 3 requests
    assert s.acceptance_rate == pytest.approx(210 / 300)
    assert s.mean_acceptance_length == pytest.approx(1 + 210 / 100)
    assert s.per_position_acceptance == pytest.approx([0.9, 0.7, 0.5])
    assert s.peak_waiting == 3 and s.peak_running == 0


def test_vllm_old_prefix_cache_names():
    before = fixture("vllm-0.7-old-names.txt", QUERIES=100, HITS=10, GPU_USAGE=0.1)
    after = fixture("vllm-0.7-old-names.txt", QUERIES=300, HITS=110, GPU_USAGE=0.2)
    middle = fixture("vllm-0.7-old-names.txt", QUERIES=200, HITS=60, GPU_USAGE=0.75)
    s = compute("vllm", before, after, [middle])
    assert s.prefix_cache_hit_rate == pytest.approx(0.5)
    assert s.peak_kv_usage == pytest.approx(0.75) and s.peak_running == 5
    assert s.prompt_tokens is None  # absent in that dump: unknown, not zero


def test_sglang_deltas():
    v = dict(RUNNING=1, QUEUE=0, USAGE=0.1, RETRACTED=0)
    before = fixture("sglang-0.5.txt", PROMPT=100, CACHED=0, GEN=50, VERIFY=10, **v)
    during = fixture("sglang-0.5.txt", PROMPT=500, CACHED=100, GEN=300, VERIFY=100, RUNNING=8, QUEUE=4, USAGE=0.9, RETRACTED=2)
    after = fixture("sglang-0.5.txt", PROMPT=1100, CACHED=300, GEN=850, VERIFY=250, **v)
    s = compute("sglang", before, after, [during])
    assert s.prompt_tokens == 1000 and s.cached_prompt_tokens == 300 and s.prefix_cache_hit_rate == pytest.approx(0.3)
    assert s.mean_acceptance_length == pytest.approx(800 / 240)
    assert (s.peak_running, s.peak_waiting, s.peak_kv_usage, s.preemptions) == (8, 4, 0.9, 2)


class Hooks:
    def prompt_built(self, done):
        pass

    def phase_started(self, *a):
        pass

    def record_done(self, r):
        pass

    def level_done(self, s):
        pass


def bench(url, tmp_path, **kw):
    async def go():
        ep = await discover(url)

        async def alive():
            return True

        return await Bench(ep, BenchOptions(**kw), tmp_path / "run", Hooks(), alive).run()

    return asyncio.run(go())


def test_llamacpp_speculative_decoding_counters_for_real(tmp_path):
    """Gemma 3 270M drafting for itself (greedy): nearly every draft token is accepted. Not every one: the
    verify pass scores 1 + 4 tokens in a batch, the draft pass one at a time, and their float sums can
    round a near-tie the other way (a clean-clone CI run measured 0.89 on 2 cores), so the bound is 0.75:
    far above what a misread counter gives (0, or above 1)."""
    extra = ["--model-draft", str(model_path()), "--spec-type", "draft-simple", "--spec-draft-n-max", "4"]
    with LocalServer(tmp_path / "server.log", extra_args=extra) as server:
        run = bench(server.url, tmp_path, concurrency=[1], requests=2, warmup=0, input_tokens=64, output_tokens=32)
    s = run.levels[0].server
    assert s.engine == "llama.cpp" and s.spec_drafts > 0
    assert s.acceptance_rate == pytest.approx(s.spec_accepted_tokens / s.spec_draft_tokens)
    assert 0.75 < s.acceptance_rate <= 1
    assert s.mean_acceptance_length == pytest.approx(1 + s.spec_accepted_tokens / s.spec_drafts)
    assert len(s.per_position_acceptance) == 4 and all(0 <= a <= 1 for a in s.per_position_acceptance)
    assert s.generation_tokens == run.levels[0].output_tokens == 2 * 32  # server and client agree
    assert s.prompt_tokens == run.levels[0].prompt_tokens
    log = (tmp_path / "server.log").read_text()
    assert "draft acceptance" in log


def test_llamacpp_queueing_is_found_and_cold_run_is_clean(llama, tmp_path):
    run = bench(llama.url, tmp_path, concurrency=[8], requests=16, warmup=0, input_tokens=64, output_tokens=48, server_log=llama.log_path)
    s = run.levels[0].server
    assert s.peak_waiting >= 1 and s.peak_running <= 4  # 4 slots
    assert s.prefix_cache_hit_rate == 0
    kinds = {f.kind for f in run.findings}
    assert "server_queueing" in kinds and "prefix_cache_contamination" not in kinds
    assert "token_count_mismatch" not in kinds and "prompt_count_mismatch" not in kinds
    finding = next(f for f in run.findings if f.kind == "server_queueing")
    assert finding.evidence["peak_waiting"] == s.peak_waiting
    assert finding.evidence["cause"] == "slot_cap" and "the slot cap: 4 requests ran at once" in finding.message  # from the boot log's slots
    assert 0 < run.levels[0].client_cpu < 1  # servelab's own CPU over the measured phase, sampled


def test_queueing_is_attributed_to_its_cause_on_a_real_vllm_run():
    """vLLM 0.25 on an H100 (validation run kept as a fixture): at 64 streams of 512-token prompts
    requests queued with 64 running of 1,024 slots and 9 % of the KV cache used: the prefill token
    budget (8,192 tokens a step: 16 such prompts) made them wait, not max_num_seqs or KV capacity."""
    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    (queued,) = [f for f in diagnose(run, run.boot.cudagraph_sizes) if f.kind == "server_queueing"]
    assert queued.evidence["cause"] == "prefill_budget" and "admits about 16 per step" in queued.message
    lv = next(lv for lv in run.levels if lv.concurrency == 64)
    lv.server.peak_kv_usage = 0.97  # a full KV cache comes first
    assert next(f for f in diagnose(run) if f.kind == "server_queueing").evidence["cause"] == "kv_capacity"
    lv.server.peak_kv_usage, run.boot.max_num_seqs = 0.09, 64  # then the slot cap
    assert next(f for f in diagnose(run) if f.kind == "server_queueing").evidence["cause"] == "slot_cap"
    run.boot = None
    assert next(f for f in diagnose(run) if f.kind == "server_queueing").evidence["cause"] == "unknown"


def test_findings_from_numbers(llama, tmp_path):
    run = bench(llama.url, tmp_path, concurrency=[1], requests=2, warmup=0, input_tokens=64, output_tokens=4)
    lv = run.levels[0]
    lv.server.prefix_cache_hit_rate, lv.server.generation_tokens, lv.server.preemptions = 0.4, lv.output_tokens + 3, 5
    run.endpoint.engine = "vllm"
    run.levels.append(lv.model_copy(update={"concurrency": 5}))
    kinds = [f.kind for f in diagnose(run)]
    assert "prefix_cache_contamination" in kinds and "token_count_mismatch" in kinds and "preemptions" in kinds
    padding = [f for f in diagnose(run) if f.kind == "cudagraph_padding"]
    assert len(padding) == 1 and padding[0].evidence["graph_size"] == 8 and padding[0].evidence["capture_sizes_assumed"]
    assert not [f for f in diagnose(run, capture_sizes=[1, 5, 8]) if f.kind == "cudagraph_padding"]


def test_gpu_sampler_is_silent_without_nvml():
    from servelab.metrics.gpu import GpuSampler

    async def go():
        sampler = GpuSampler()
        sampler.start()
        return await sampler.stop(100)

    assert asyncio.run(go()) is None


def test_gpu_sampler_reads_the_clock_and_power_limits(monkeypatch):
    """With NVML (a stand-in module: no GPU here), the phase's stats carry the maximum SM clock and
    the power limit beside the samples, so a power-capped level can be told."""
    import types

    from servelab.metrics.gpu import GpuSampler

    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPowerUsage=lambda h: 690_000, nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2**30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=96), nvmlDeviceGetClockInfo=lambda h, k: 1545,
        nvmlDeviceGetTemperature=lambda h, k: 60, nvmlDeviceGetMaxClockInfo=lambda h, k: 1980, nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    async def go():
        sampler = GpuSampler()
        sampler.start()
        sampler._sample()  # a second sample now, not after the sampling interval
        return await sampler.stop(100)

    stats = asyncio.run(go())
    assert (stats.max_sm_clock_mhz, stats.power_limit_w, stats.mean_sm_clock_mhz, stats.peak_power_w) == (1980, 700, 1545, 690)


def test_gpu_sampler_samples_the_gpus_cuda_visible_devices_names(monkeypatch):
    """Four servers on one host, one GPU each (validation/tune_gpu.py): servelab with
    CUDA_VISIBLE_DEVICES=2 samples GPU 2 alone, not the host's four."""
    import types

    from servelab.metrics.gpu import _visible

    fake = types.SimpleNamespace(nvmlDeviceGetCount=lambda: 4, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}", nvmlDeviceGetHandleByUUID=lambda u: u)
    assert _visible(fake, None) == ["h0", "h1", "h2", "h3"]
    assert _visible(fake, "2") == ["h2"] and _visible(fake, "3, 1") == ["h3", "h1"] and _visible(fake, "") == []
    assert _visible(fake, "GPU-abc") == ["GPU-abc"] and _visible(fake, "MIG-1/2/3") == ["h0", "h1", "h2", "h3"]


def test_a_power_capped_level_is_named_and_explained():
    """A level whose SM clock fell under 90 % of its maximum while its power reached the limit is
    power-capped (an H200 at 256 streams: 1,575 of 1,980 MHz at up to 696 of 700 W); below the cap,
    or without the maximum and the limit (telemetry before they were recorded), nothing is said."""
    from servelab.rules.explain import CAUSES
    from servelab.metrics.gpu import GpuStats

    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    base = {"gpus": 1, "samples": 20, "mean_power_w": 668.0, "energy_j": 1.0, "peak_memory_used_gib": 70.0, "mean_utilization_pct": 96.0, "peak_temperature_c": 60.0}
    capped, cool, unknown = run.levels[-1], run.levels[0], run.levels[1]
    capped.gpu = GpuStats(**base, peak_power_w=696.0, mean_sm_clock_mhz=1575.0, max_sm_clock_mhz=1980.0, power_limit_w=700.0)
    cool.gpu = GpuStats(**base, peak_power_w=450.0, mean_sm_clock_mhz=1980.0, max_sm_clock_mhz=1980.0, power_limit_w=700.0)
    unknown.gpu = GpuStats(**base, peak_power_w=696.0, mean_sm_clock_mhz=1575.0)
    (found,) = [f for f in diagnose(run) if f.kind == "power_capped"]
    assert found.evidence["concurrency"] == capped.concurrency and "80% of its maximum SM clock" in found.message and "1.26 ×" in found.message
    assert "power_capped" in CAUSES


def test_untuned_moe_kernels_are_a_finding_and_name_a_missed_level():
    """A boot log saying vLLM ran its MoE layers with its default kernel config (no tuned one for these
    experts on this GPU) is a finding with vLLM's way to tune one; explain names it at a level the model
    misses, not at one it predicts; a tuned config, or no boot log, says nothing."""
    from servelab.engines.bootfacts import BootFacts
    from servelab.rules.explain import CAUSES, explain
    from servelab.plan.calibration import calibration
    from servelab.plan.hardware import load_hardware
    from servelab.plan.model_spec import load_model
    from servelab.plan.quant import get_format

    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    assert not [f for f in diagnose(run) if f.kind == "untuned_moe_kernels"]
    config = "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
    run.boot = BootFacts(engine="vllm", moe_config=config, moe_config_tuned=True)
    assert not [f for f in diagnose(run) if f.kind == "untuned_moe_kernels"]
    run.boot = BootFacts(engine="vllm", moe_config=config, moe_config_tuned=False)
    (found,) = [f for f in diagnose(run) if f.kind == "untuned_moe_kernels"]
    assert found.evidence == {"moe_config": config} and "vLLM ran the MoE layers with its default kernel config" in found.message
    assert "benchmark_moe.py --tune" in found.message and "VLLM_TUNED_CONFIG_FOLDER" in found.message and "gained 7 %" in found.message
    args = (load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"))
    right = explain(run, *args, calibration("vllm-0.25-h100-bf16"))
    assert all(r.cause.startswith("as predicted") and CAUSES["untuned_moe_kernels"] not in r.cause for r in right)
    slow = explain(run, *args, calibration("vllm-0.25-h100-bf16").model_copy(update={"bw_efficiency": 0.4}))  # predicted below the measure
    assert all(r.tok_s_error < -0.15 and CAUSES["untuned_moe_kernels"] not in r.cause for r in slow[:-1])
    fast = explain(run, *args, calibration("vllm-0.25-h100-bf16").model_copy(update={"bw_efficiency": 1.5, "compute_efficiency": 1.5}))
    missed = [r for r in fast if r.tok_s_error > 0.15]
    assert missed and all(CAUSES["untuned_moe_kernels"] in r.cause for r in missed)


def test_transformers_backend_and_void_routing_simulation_are_findings():
    """A boot log saying vLLM ran the model on its Transformers backend is a warning; with the routing simulated while the
    router ran outside the MoE layer (dots.llm1 on vLLM 0.25: every token to the first top-k experts) the run's MoE
    throughput is void, an error naming vLLM's code; a simulation with the router inside the layer, or vLLM's own model code,
    says nothing. explain names them at a level missed either way, not at one that agrees."""
    from servelab.engines.bootfacts import BootFacts
    from servelab.metrics.bootlog import parse_bootlog
    from servelab.plan.calibration import calibration
    from servelab.plan.hardware import load_hardware
    from servelab.plan.model_spec import load_model
    from servelab.plan.quant import get_format
    from servelab.rules.explain import CAUSES, explain

    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    kinds = {"transformers_backend", "void_routing_simulation"}
    assert not [f for f in diagnose(run) if f.kind in kinds]
    run.boot = parse_bootlog((FIX.parent / "bootlogs" / "vllm-0.25-h100-dots1-transformers-backend.log").read_text())
    backend, void = [f for f in diagnose(run) if f.kind in kinds]
    assert (backend.kind, backend.severity, void.kind, void.severity) == ("transformers_backend", "warning", "void_routing_simulation", "error")
    assert "vLLM ran the model on its transformers modeling backend" in backend.message and "_PREVIOUSLY_SUPPORTED_MODELS" in backend.message
    assert "simulated MoE routing (uniform_random)" in void.message and "router_logits.shape[-1]" in void.message
    run.boot = BootFacts(engine="vllm", modeling_backend="transformers", moe_routing_simulation="uniform_random", moe_external_routing=False)
    assert [f.kind for f in diagnose(run) if f.kind in kinds] == ["transformers_backend"]
    run.boot = BootFacts(engine="vllm", moe_routing_simulation="uniform_random")
    assert not [f for f in diagnose(run) if f.kind in kinds]
    run.boot = BootFacts(engine="vllm", modeling_backend="transformers", moe_routing_simulation="uniform_random", moe_external_routing=True)
    args = (load_model("qwen3-8b"), get_format("bf16"), load_hardware("h100-sxm"))
    right = explain(run, *args, calibration("vllm-0.25-h100-bf16"))
    assert all(r.cause.startswith("as predicted") and CAUSES["void_routing_simulation"] not in r.cause for r in right)
    for update in ({"bw_efficiency": 0.4}, {"bw_efficiency": 1.5, "compute_efficiency": 1.5}):  # measured faster, then slower, than predicted
        missed = [r for r in explain(run, *args, calibration("vllm-0.25-h100-bf16").model_copy(update=update)) if abs(r.tok_s_error) > 0.15]
        assert missed and all(CAUSES["void_routing_simulation"] in r.cause and CAUSES["transformers_backend"] in r.cause for r in missed)


def test_a_ceiling_exceeded_names_the_assumptions():
    """On a MoE model with dummy weights vLLM decoded at 144–169 % of the roofline (issue 17): the
    "% of ceiling" above 100 is a finding that names what the ceiling assumed."""
    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    assert not [f for f in diagnose(run) if f.kind == "ceiling_exceeded"]
    lv = run.levels[0]
    lv.decode_ceiling_tok_s = lv.decode_tok_s.p50 / 1.5
    (found,) = [f for f in diagnose(run) if f.kind == "ceiling_exceeded"]
    assert found.evidence["pct_of_ceiling"] == pytest.approx(150) and "every expert equally likely" in found.message
    assert found.evidence["quant"] == run.ceiling.quant


def test_a_busy_client_makes_an_unstable_measurement():
    run = RunResult.model_validate_json((FIX.parent / "runs" / "vllm-0.25-h100-qwen3-8b-run.json").read_text())
    run.levels[0].client_cpu, run.levels[1].client_cpu = 0.95, 0.5
    (found,) = [f for f in diagnose(run) if f.kind == "unstable_measurement"]
    assert found.evidence["concurrency"] == run.levels[0].concurrency and "busy 95%" in found.message
