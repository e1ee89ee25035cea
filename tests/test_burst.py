"""servelab.plan.burst: the step-by-step scheduler of a burst (pure logic, a made-up step time)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.plan.burst import simulate


def flat(decode: int, prompt: int, sustained: bool = False) -> float:
    """A step of 10 ms plus 1 ms per 100 prompt tokens."""
    return 0.010 + prompt / 100 * 0.001


def test_a_step_knows_when_the_one_before_it_carried_prompts_too():
    """A 2,500-token prompt in chunks of 1,000: the second and third chunks are sustained prefill
    (the power-capped clock of servelab.plan.predict), the decode steps after them are not."""
    calls = []

    def record(decode: int, prompt: int, sustained: bool) -> float:
        calls.append((decode, prompt, sustained))
        return 0.01

    simulate(record, streams=1, requests_per_stream=1, input_tokens=2500, output_tokens=3, max_num_seqs=8, max_num_batched_tokens=1000)
    assert calls[:3] == [(0, 1000, False), (0, 1000, True), (0, 500, True)] and all(not s for _, p, s in calls[3:] if not p)


def test_one_stream_waits_for_nothing():
    run = simulate(flat, streams=1, requests_per_stream=2, input_tokens=500, output_tokens=4, max_num_seqs=8, max_num_batched_tokens=8192)
    assert run.ttft_s == pytest.approx([0.015, 0.015])  # its prompt's step, then 3 decode steps each
    assert run.e2e_s == pytest.approx([0.045, 0.045]) and run.steps == 8


def test_a_wave_is_prefilled_in_chunks_of_the_token_budget():
    """Four prompts of 500 tokens under a 1,000-token budget: two in the first step; the first pair's
    decode tokens take 2 of the second step's budget, so the fourth prompt's last 2 tokens wait for
    a third step (vLLM's scheduler serves running requests first)."""
    run = simulate(flat, streams=4, requests_per_stream=1, input_tokens=500, output_tokens=2, max_num_seqs=8, max_num_batched_tokens=1000)
    assert run.ttft_s == pytest.approx([0.020, 0.020, 0.020 + 0.01998, 0.020 + 0.01998 + 0.01002])


def test_a_batchs_decode_window_runs_from_the_first_first_token_to_the_last_token():
    """tg t/s (total) of servelab grid and llama-benchy (docs/metrics.md, "Grid"): one stream's is 1 ÷ its decode step;
    four prompts prefilled in one 30 ms step, then 3 decode steps of 10 ms: 4 × 3 tokens in 30 ms."""
    one = simulate(flat, streams=1, requests_per_stream=1, input_tokens=500, output_tokens=4, max_num_seqs=8, max_num_batched_tokens=8192)
    four = simulate(flat, streams=4, requests_per_stream=1, input_tokens=500, output_tokens=4, max_num_seqs=8, max_num_batched_tokens=8192)
    assert one.first_token_s == pytest.approx(0.015) and one.tg_total_tok_s(4) == pytest.approx(100.0)
    assert four.first_token_s == pytest.approx(0.030) and four.tg_total_tok_s(4) == pytest.approx(400.0)
    single = simulate(flat, streams=4, requests_per_stream=1, input_tokens=500, output_tokens=1, max_num_seqs=8, max_num_batched_tokens=8192)
    assert single.tg_total_tok_s(1) == 0.0  # no token after the first: no decode window


def test_a_prompt_larger_than_the_budget_spans_steps():
    run = simulate(flat, streams=1, requests_per_stream=1, input_tokens=2500, output_tokens=1, max_num_seqs=8, max_num_batched_tokens=1000)
    assert run.ttft_s == pytest.approx([0.020 + 0.020 + 0.015]) and run.steps == 3


def test_a_request_arriving_mid_run_waits_for_the_step_already_scheduled():
    """Asynchronous scheduling: stream B's second request arrives as its first ends, while A keeps
    decoding; step n + 1 was scheduled when step n started, so the new prompt rides one step later."""
    run = simulate(flat, streams=2, requests_per_stream=2, input_tokens=100, output_tokens=3, max_num_seqs=8, max_num_batched_tokens=8192)
    # both first requests: one step of 200 prompt tokens (12 ms), then two decode steps; both end together,
    # the next two arrive at 32 ms: the engine is idle, so they are scheduled at once
    assert run.ttft_s[:2] == pytest.approx([0.012, 0.012]) and run.ttft_s[2:] == pytest.approx([0.012, 0.012])


def test_max_num_seqs_queues_the_rest():
    run = simulate(flat, streams=4, requests_per_stream=1, input_tokens=100, output_tokens=2, max_num_seqs=2, max_num_batched_tokens=8192)
    assert sorted(run.ttft_s)[2] > max(sorted(run.e2e_s)[:2]) - 1e-12  # the third starts after the first two finish


@settings(max_examples=60, deadline=None)
@given(streams=st.integers(1, 40), per=st.integers(1, 3), p=st.integers(1, 3000), o=st.integers(1, 40), seqs=st.integers(1, 64), mbt=st.integers(1, 9000))
def test_every_request_finishes_once_and_in_order(streams, per, p, o, seqs, mbt):
    run = simulate(flat, streams=streams, requests_per_stream=per, input_tokens=p, output_tokens=o, max_num_seqs=seqs, max_num_batched_tokens=mbt)
    assert len(run.ttft_s) == len(run.e2e_s) == streams * per
    assert all(0 < t <= e for t, e in zip(run.ttft_s, run.e2e_s, strict=True))
    assert run.span_s >= max(run.e2e_s) - 1e-9 and run.tpot_s(o) >= 0


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        simulate(flat, streams=0, requests_per_stream=1, input_tokens=1, output_tokens=1, max_num_seqs=1, max_num_batched_tokens=1)


def test_running_decodes_take_the_budget_before_a_waiting_prompt():
    """A budget of two tokens: the two running requests' decodes fill it, so the third prompt waits until they end."""
    run = simulate(flat, streams=3, requests_per_stream=1, input_tokens=1, output_tokens=2, max_num_seqs=8, max_num_batched_tokens=2)
    # step 1: two 1-token prompts; step 2: their two decodes (the budget), the third prompt waits; step 3: its prompt; step 4: its decode
    assert run.steps == 4 and sorted(run.e2e_s)[-1] == pytest.approx(4 * 0.010 + 3 * 0.00001)
