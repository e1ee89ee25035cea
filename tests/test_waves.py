"""Synchronized-wave statistics (pure logic on synthetic records; the real-server tests are in test_bench_local.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.metrics.waves import BUNCHED, COHORT_GAP, cohorts, prompts_per_step, wave_stats
from servelab.values.records import RequestRecord


def rec(i: int, start: float, e2e: float = 10.0, ttft: float = 1.0, phase: str = "measured") -> RequestRecord:
    return RequestRecord(index=i, concurrency=4, phase=phase, max_tokens=8, queued=start, start=start,
                         first_token=start + ttft, end=start + e2e, output_tokens=8)  # fmt: skip


def test_locked_waves_have_no_spread_and_their_ttft_by_wave():
    records = [rec(w * 4 + k, start=w * 10.0 + 0.001 * k, ttft=[3.5, 2.6, 0.6, 3.2][w]) for w in range(4) for k in range(4)]
    s = wave_stats(4, records, window_s=40.0)
    assert s.waves == 4 and s.send_spread < 0.01 and s.synchronized
    assert s.ttft_p50_ms_by_wave == [3500.0, 2600.0, 600.0, 3200.0]
    assert s.ttft_spread == pytest.approx(3500 / 600)
    assert s.densest_share == pytest.approx(0.25)  # one whole wave inside any 4 s


def test_steady_closed_loop_is_not_synchronized():
    # 4 streams, each request 10 s, streams offset by 2.5 s: sends evenly spread
    records = [rec(i, start=i * 2.5) for i in range(16)]
    s = wave_stats(4, records, window_s=47.5)
    assert s.send_spread == pytest.approx(0.75) and not s.synchronized
    assert s.densest_share <= 0.15


@pytest.mark.parametrize(("concurrency", "n"), [(1, 10), (4, 7)])
def test_too_few_streams_or_waves_give_nothing(concurrency, n):
    assert wave_stats(concurrency, [rec(i, start=float(i)) for i in range(n)], window_s=10.0) is None


def test_only_measured_requests_count():
    records = [rec(i, start=0.0, phase="warmup") for i in range(8)] + [rec(10 + i, start=i * 2.5) for i in range(8)]
    s = wave_stats(4, records, window_s=30.0)
    assert s.waves == 2 and not s.synchronized


def test_detector_fires_on_a_burst_locked_level_and_not_on_a_staggered_one(llama, tmp_path):
    """The embedded server, 4 slots, identical requests: started together, the 4 streams finish
    together and the next 4 go out at once (locked waves); ramped up, they stay spread."""
    from conftest import run
    from test_bench_local import Hooks, _bench

    from servelab.run.bench import BenchOptions

    def level(mode: str):
        opts = BenchOptions(concurrency=[4], requests=12, warmup=4, input_tokens=64, output_tokens=24, closed_loop=mode)
        return run(_bench(llama.url, opts, tmp_path / mode, Hooks()))

    burst = level("burst")
    lv = burst.levels[0]
    assert lv.waves.waves == 3 and lv.waves.synchronized and lv.ramp_requests == 0
    assert 1.0 <= lv.waves.prompts_per_step <= 4.0 and lv.waves.prompts_per_step_by_third  # 4 slots: at most 4 prompts a step
    finding = next(f for f in burst.findings if f.kind == "synchronized_waves")
    assert finding.evidence["send_spread"] == lv.waves.send_spread and len(finding.evidence["ttft_p50_ms_by_wave"]) == 3

    steady = level("stagger")
    lv = steady.levels[0]
    assert steady.load.closed_loop == "stagger" and lv.ok == 12 and lv.ramp_requests >= 1
    assert not lv.waves.synchronized and lv.waves.send_spread > 0.5 and 1.0 <= lv.waves.prompts_per_step <= 4.0
    assert not [f for f in steady.findings if f.kind == "synchronized_waves"]
    assert lv.server.generation_tokens == lv.phase_output_tokens  # the ramp is in the server's counters and in ours
    assert not [f for f in steady.findings if f.kind in ("token_count_mismatch", "prompt_count_mismatch")]


@pytest.mark.parametrize(("concurrency", "requests"), [(1, 8), (2, 16), (4, 32), (64, 512), (100, 512), (128, 512), (256, 1024)])
def test_default_requests_per_level(concurrency, requests):
    """8 per slot up to 512, then 4 per slot: 512 at 64 streams is what made TTFT p50 repeat within 10 % (H100)."""
    from servelab.run.bench import BenchOptions

    assert BenchOptions(concurrency=[concurrency]).requests_at(concurrency) == requests
    assert BenchOptions(concurrency=[concurrency], requests=5).requests_at(concurrency) == 5
    assert BenchOptions(concurrency=[concurrency], duration_s=10.0).requests_at(concurrency) is None


@pytest.mark.parametrize(("n", "spread", "bounds"), [(256, 0.1, (230, 282)), (256, 0.0, (256, 256)), (3, 0.9, (1, 6)), (1, 0.5, (1, 2))])
def test_output_range_is_vllm_bench_random_range_ratio_interval(n, spread, bounds):
    from servelab.run.bench import BenchOptions

    assert BenchOptions(concurrency=[1], output_spread=spread).output_range(n) == bounds


@given(st.integers(1, 100_000), st.floats(0.0, 0.99), st.integers(0, 10**9), st.integers(0, 10**6))
def test_drawn_output_lengths_stay_in_range_and_repeat_with_the_seed(n, spread, seed, index):
    from servelab.run.bench import BenchOptions

    opts = BenchOptions(concurrency=[1], output_spread=spread, seed=seed)
    lo, hi = opts.output_range(n)
    assert 1 <= lo <= n <= hi and lo <= opts.draw_output(n, index) <= hi
    assert opts.draw_output(n, index) == opts.draw_output(n, index)


def test_output_spread_on_the_embedded_server(llama, tmp_path):
    """--output-spread: each request asks for its own max_tokens in the range, gets exactly that
    many (ignore_eos), the server's counters agree, and the run records the spread."""
    from conftest import run
    from test_bench_local import Hooks, _bench

    from servelab.run.bench import BenchOptions
    from servelab.store.results import load_run

    opts = BenchOptions(concurrency=[2], requests=8, warmup=1, input_tokens=64, output_tokens=20, output_spread=0.5, seed=3)
    result = run(_bench(llama.url, opts, tmp_path / "spread", Hooks()))
    lv = result.levels[0]
    records = [r for r in load_run(tmp_path / "spread")[1] if r.phase == "measured"]
    asked = [r.max_tokens for r in records]
    assert result.load.output_spread == 0.5 and lv.ok == 8
    assert all(10 <= m <= 30 for m in asked) and len(set(asked)) > 1
    assert [r.output_tokens for r in records] == asked and lv.short_outputs == 0
    assert asked == [opts.draw_output(20, r.index) for r in records]
    assert lv.server.generation_tokens == lv.phase_output_tokens


def test_real_h100_runs_read_back_and_burst_is_flagged():
    """Run documents written on the H100 (validation/waves-h100, before WaveStats recorded its concurrency) still load."""
    import json
    from pathlib import Path

    from servelab.rules.diagnose import diagnose
    from servelab.store.results import RunResult

    root = Path(__file__).resolve().parent.parent / "validation" / "waves-h100"
    burst = RunResult.model_validate(json.loads((root / "burst-1-run.json").read_text()))
    steady = RunResult.model_validate(json.loads((root / "stagger-1-run.json").read_text()))
    assert [f.kind for f in diagnose(burst) if f.kind == "synchronized_waves"] == ["synchronized_waves"]
    assert not [f for f in diagnose(steady) if f.kind == "synchronized_waves"]
    assert steady.load.closed_loop == "stagger" and all(lv.waves.send_spread > 0.9 for lv in steady.levels)


def test_a_staggered_level_that_fell_into_waves_is_not_told_to_stagger():
    """A steady-state run on vLLM (Qwen3-30B-A3B routing to 2 experts, one H100: validation/topk-h100/)
    whose 16 staggered streams fell into 15 waves on their own: the finding says so and points at an open
    loop, where a burst run's finding points at --closed-loop stagger."""
    import json
    from pathlib import Path

    from servelab.rules.diagnose import diagnose
    from servelab.store.results import RunResult

    root = Path(__file__).resolve().parent.parent / "validation"
    drifted = RunResult.model_validate(json.loads((root / "topk-h100" / "qwen3-30b-a3b-top2-stagger-run.json").read_text()))
    burst = RunResult.model_validate(json.loads((root / "waves-h100" / "burst-1-run.json").read_text()))
    (found,) = [f for f in diagnose(drifted) if f.kind == "synchronized_waves"]
    assert drifted.load.closed_loop == "stagger" and found.evidence["concurrency"] == 16
    assert "fell into step on their own" in found.message and "--rate" in found.message and "--closed-loop stagger" not in found.message
    (told,) = [f for f in diagnose(burst) if f.kind == "synchronized_waves"]
    assert told.message.endswith("--closed-loop stagger measures the steady state")


def stream_rec(i: int, first: float, step: float = 0.005, tokens: int = 8) -> RequestRecord:
    """A request whose first token came at ``first`` (s) and its next ``tokens`` − 1 one decode ``step`` apart."""
    return RequestRecord(index=i, concurrency=64, phase="measured", max_tokens=tokens, queued=first - 0.05, start=first - 0.05, first_token=first,
                         end=first + step * (tokens - 1), output_tokens=tokens, chunk_times=[0.05 + k * step for k in range(tokens)])  # fmt: skip


def test_prompts_that_came_out_of_one_engine_step_are_one_cohort():
    """Six cohorts of ten prompts, each cohort's first tokens within 0.1 ms, the cohorts a decode step (5 ms) or more apart:
    10 prompts a step; every prompt in its own step: 1."""
    bunched = [stream_rec(10 * c + k, first=c * 0.2 + k * 1e-4) for c in range(6) for k in range(10)]
    assert prompts_per_step(bunched) == (10.0, [10.0, 10.0, 10.0])
    apart = [stream_rec(i, first=i * 0.005) for i in range(60)]
    assert prompts_per_step(apart)[0] == 1.0


def test_cohorts_that_merge_as_the_load_runs_grow_third_by_third():
    """Cohorts of 2 prompts in the first second, of 5 in the next, of 10 in the last: the thirds say so."""
    starts = [(0.1 * c, 2) for c in range(10)] + [(1.0 + 0.25 * c, 5) for c in range(4)] + [(2.0 + 0.45 * c, 10) for c in range(3)]
    records = [stream_rec(100 * c + k, first=t + k * 1e-4) for c, (t, size) in enumerate(starts) for k in range(size)]
    per_step, by_third = prompts_per_step(records)
    assert by_third == [2.0, 5.0, 10.0] and per_step == pytest.approx(70 / 17, abs=0.01)


@given(st.lists(st.floats(0.0, 100.0), min_size=2, max_size=80), st.floats(1e-4, 0.1))
def test_prompts_per_step_lies_between_one_and_every_prompt(firsts, step):
    per_step, by_third = prompts_per_step([stream_rec(i, first=f, step=step) for i, f in enumerate(firsts)])
    assert 1.0 <= per_step <= len(firsts) and all(1.0 <= x <= len(firsts) for x in by_third) and len(by_third) <= 3


def test_a_staggered_level_whose_prompts_bunched_is_named():
    """The third kept-back set's design runs (validation/kept-back3-h200/), their prompts per step counted from the stored first
    tokens as servelab bench counts them: Granite-3.1-3B-A800M ran 5.6 prompts a step at 16 streams and 9.9 at 64, where
    predict's cohort is 1 and 1.97: named; Phi-3.5-MoE's 1.1–1.3 are not; nor is a burst, nor a run file without the figure."""
    import json
    import lzma
    from pathlib import Path

    from servelab.rules.diagnose import diagnose
    from servelab.store.results import RunResult

    def run_with_cohorts(model: str, closed_loop: str = "stagger") -> RunResult:
        data = Path(__file__).resolve().parent.parent / "validation/kept-back3-h200"
        run = RunResult.model_validate(json.loads((data / f"{model}-calibrate-run.json").read_text()))
        with lzma.open(data / f"{model}-calibrate-first-tokens.jsonl.xz", "rt") as f:
            firsts = [json.loads(line) for line in f]
        for lv in run.levels:
            if lv.waves:
                per_step, thirds = cohorts([r["start"] + r["first_token_s"] for r in firsts if r["c"] == lv.concurrency], COHORT_GAP * lv.itl_ms.p50 / 1e3)
                lv.waves = lv.waves.model_copy(update={"prompts_per_step": per_step, "prompts_per_step_by_third": thirds})
        return run.model_copy(update={"load": run.load.model_copy(update={"closed_loop": closed_loop})})

    granite = run_with_cohorts("granite-3.1-3b-a800m")
    found = {f.evidence["concurrency"]: f for f in diagnose(granite) if f.kind == "bunched_prompts"}
    assert sorted(found) == [16, 64] and found[64].evidence["prompts_per_step"] >= 9 and found[64].evidence["expected"] == pytest.approx(1.97, abs=0.01)
    assert "prompts a step (" in found[64].message and "over the level's thirds" in found[64].message
    assert not [f for f in diagnose(run_with_cohorts("phi-3.5-moe")) if f.kind == "bunched_prompts"]
    assert not [f for f in diagnose(run_with_cohorts("granite-3.1-3b-a800m", "burst")) if f.kind == "bunched_prompts"]
    old = RunResult.model_validate(json.loads((Path(__file__).resolve().parent.parent / "validation/kept-back3-h200/granite-3.1-3b-a800m-calibrate-run.json").read_text()))
    assert old.levels[-1].waves.prompts_per_step is None and not [f for f in diagnose(old) if f.kind == "bunched_prompts"]


def test_many_streams_of_short_outputs_are_not_bunched_at_predicts_cohort():
    """At 256 streams of 128 output tokens predict's own cohort is 8 prompts a step (k ÷ 0.25, k = 255 ÷ 128): a level is named
    from 16 a step there, twice that, not at the 3 that names a level of 16 streams."""
    from servelab.rules.diagnose import _expected_cohort

    assert _expected_cohort(256, 128) == pytest.approx(255 / 128 / 0.25) and _expected_cohort(16, 128) == 1.0 and _expected_cohort(1, 128) == 1.0


def test_more_api_servers_cut_a_small_moes_ttft_and_its_bunching():
    """validation/api_servers.py (one 4 × H200 host, vLLM 0.25, 60 s a level): four API server processes instead of one cut
    OLMoE-1B-7B's and Granite-3.1-3B-A800M's TTFT p50 at 64 streams by a third or more (243 → 128, 358 → 229 ms) for the same
    tok/s (within 6 %), and OLMoE's bunching at 16 streams (3.1 prompts a step, growing 2.0 → 4.8 over the level, to 1.4); at
    64 streams both stay in waves of 8–10 prompts a step, which the token budget bounds."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validation"))
    import api_servers

    got = api_servers.main()
    for model in ("olmoe-1b-7b", "granite-3.1-3b-a800m"):
        one, four = got[model, 1, 64], got[model, 4, 64]
        assert four["ttft"] < 0.67 * one["ttft"] and abs(four["tok_s"] / one["tok_s"] - 1) < 0.07 and min(one["per_step"], four["per_step"]) >= BUNCHED
    one, four = got["olmoe-1b-7b", 1, 16], got["olmoe-1b-7b", 4, 16]
    assert one["per_step"] >= BUNCHED > 2 > four["per_step"] and one["thirds"][0] < one["thirds"][-1]


def test_a_host_bound_steady_state_ramps_toward_waves_through_each_repeat():
    """validation/long-h200/ (the truth rule's 60 s repeats at 64 streams, one 2 × H200 host): Moonlight-16B-A3B's and
    Qwen1.5-MoE-A2.7B's prompts per step grow ~4 × from a repeat's first 10 s to its last, and restart with the next repeat;
    their tok/s over 60 s (3,334–3,823) is far above what one 30 s window gave (2,448 and 3,232, validation/kept-back2-h200/)."""
    import json
    import lzma
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "validation/long-h200"
    for model, short in (("moonlight-16b-a3b", 2448), ("qwen1.5-moe-a2.7b", 3232)):
        run = json.loads((data / f"{model}-repeats3-stagger-run.json").read_text())
        full = [lv for lv in run["levels"] if lv["window_s"] >= 59.9]
        assert run["status"] == "partial" and len(full) == 2 and all(lv["server"]["prefix_cache_hit_rate"] == 0.0 and not lv["jit_kernels"] for lv in run["levels"])
        assert all(lv["output_throughput_tok_s"] > 1.15 * short for lv in full)
        with lzma.open(data / f"{model}-repeats3-first-tokens.jsonl.xz", "rt") as f:
            firsts = sorted(r["start"] + r["first_token_s"] for r in map(json.loads, f))
        gap = COHORT_GAP * full[0]["itl_ms"]["p50"] / 1e3
        repeats = [[]]
        for a, b in zip(firsts, firsts[1:], strict=False):
            repeats[-1].append(a)
            if b - a > 2.0:
                repeats.append([])
        for times in repeats[:2]:
            first = [t for t in times if t < times[0] + 10]
            last = [t for t in times if t > times[-1] - 10]
            assert cohorts(last, gap)[0] > 3 * cohorts(first, gap)[0], model
