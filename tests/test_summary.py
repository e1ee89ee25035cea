"""Metric maths on hand-computed records (docs/metrics.md)."""

import pytest

from servelab.metrics.request import percentile
from servelab.metrics.summary import Distribution, summarize
from servelab.values.records import RequestRecord


def rec(index, start, chunks, end, *, out=None, prompt=100, status="ok", phase="measured", kind=None, first_content=True):
    """A record whose token chunks arrive at ``start + chunks[i]``."""
    return RequestRecord(
        index=index,
        concurrency=2,
        phase=phase,
        max_tokens=10,
        queued=start,
        start=start,
        first_token=start + chunks[0] if chunks else None,
        first_content=(start + chunks[0]) if chunks and first_content else None,
        end=end,
        chunk_times=chunks,
        prompt_tokens=prompt,
        output_tokens=len(chunks) if out is None else out,
        status=status,
        error_kind=kind,
    )


def test_percentile_linear_interpolation():
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 50) == pytest.approx(2.5)
    assert percentile(data, 99) == pytest.approx(3.97)
    assert percentile(data, 0) == 1.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_distribution_of_empty_and_values():
    assert Distribution.of([]).n == 0 and Distribution.of([]).p50 is None
    d = Distribution.of([3.0, 1.0, 2.0])
    assert (d.n, d.mean, d.p50, d.min, d.max) == (3, 2.0, 2.0, 1.0, 3.0)


def test_summary_by_hand():
    # Request A: starts 10.0, tokens at +0.2, +0.3, +0.5 → TTFT 200 ms, TPOT (0.5-0.2)/2 = 150 ms,
    # ITL gaps 100 ms and 200 ms, E2E 0.6 s, decode 2/0.3 = 6.667 tok/s, prefill 100/0.2 = 500 tok/s.
    a = rec(0, 10.0, [0.2, 0.3, 0.5], 10.6)
    # Request B: starts 10.1, tokens at +0.4, +0.5 → TTFT 400 ms, TPOT 100 ms, ITL 100 ms, E2E 0.5 s (ends 10.6).
    b = rec(1, 10.1, [0.4, 0.5], 10.6)
    # Request C failed: counted, not in latencies.
    c = rec(2, 10.2, [], 10.3, status="failed", kind="http_500")
    warm = rec(3, 9.0, [0.1, 0.2], 9.5, phase="warmup")
    s = summarize(2, [a, b, c, warm])
    assert (s.ok, s.failed_requests, s.incomplete) == (2, 1, 0)
    assert s.failed
    assert s.error_kinds == {"http_500": 1}
    assert s.window_s == pytest.approx(0.6)  # 10.0 → 10.6
    assert s.output_tokens == 5
    assert s.output_throughput_tok_s == pytest.approx(5 / 0.6)
    assert s.request_throughput_rps == pytest.approx(2 / 0.6)
    assert s.ttft_ms.mean == pytest.approx(300.0)
    assert s.ttft_ms.p50 == pytest.approx(300.0)
    assert s.ttft_ms.p99 == pytest.approx(200 + 200 * 0.99)
    assert s.tpot_ms.min == pytest.approx(100.0) and s.tpot_ms.max == pytest.approx(150.0)
    assert sorted([s.itl_ms.min, s.itl_ms.max]) == [pytest.approx(100.0), pytest.approx(200.0)]
    assert s.itl_ms.n == 3
    assert s.e2e_ms.max == pytest.approx(600.0) and s.e2e_ms.min == pytest.approx(500.0)
    assert s.decode_tok_s.max == pytest.approx(10.0)  # B: 1 / 0.1
    assert s.decode_tok_s.min == pytest.approx(2 / 0.3)
    assert s.prefill_tok_s.max == pytest.approx(500.0)
    assert s.prefill_tok_s.min == pytest.approx(250.0)


def test_tpot_uses_usage_tokens_not_chunks():
    # Two chunks, but the server says 5 tokens (e.g. speculative decoding): TPOT = 0.4 / 4 s.
    r = rec(0, 0.0, [0.1, 0.5], 0.6, out=5)
    s = summarize(1, [r])
    assert s.tpot_ms.p50 == pytest.approx(100.0)
    assert s.itl_ms.p50 == pytest.approx(400.0)
    assert s.decode_tok_s.p50 == pytest.approx(10.0)


def test_single_token_has_no_tpot_and_reasoning_only_has_no_ttfc():
    r = rec(0, 0.0, [0.1], 0.2, first_content=False)
    s = summarize(1, [r])
    assert s.tpot_ms.n == 0 and s.decode_tok_s.n == 0
    assert s.ttft_ms.n == 1 and s.ttfc_ms.n == 0


def test_duration_window_counts_incomplete_chunks():
    done = rec(0, 1.0, [0.1, 0.2, 0.3], 1.4)
    cut = rec(1, 1.5, [0.1, 0.2], 2.0, status="incomplete", kind="cancelled", out=2)
    s = summarize(2, [done, cut], window=(1.0, 3.0))
    assert s.window_s == pytest.approx(2.0)
    assert s.output_tokens == 3 + 2
    assert s.output_throughput_tok_s == pytest.approx(2.5)
    assert s.incomplete == 1 and not s.failed  # cut off by the deadline: counted, not a failure
    assert s.request_throughput_rps == pytest.approx(0.5)


def test_window_counts_ramp_tokens_delivered_inside_it():
    """Stagger with a duration: the window opens after the ramp, while the ramp's requests still
    stream. Their tokens inside the window are output throughput too (docs/metrics.md)."""
    ramp = rec(0, 0.0, [0.5, 1.0, 1.5, 2.0], 2.1, phase="warmup")  # 2 of its 4 chunks arrive inside [1.2, 3.2]
    measured = rec(1, 1.2, [0.2, 0.4, 0.6], 2.0)
    cut = rec(2, 2.1, [0.5, 1.0], 3.2, status="incomplete", kind="cancelled", out=2)
    s = summarize(2, [ramp, measured, cut], window=(1.2, 3.2))
    assert s.output_tokens == 3 + 2  # the measured requests
    assert s.window_output_tokens == 2 + 3 + 2
    assert s.output_throughput_tok_s == pytest.approx(7 / 2.0)
    assert s.request_throughput_rps == pytest.approx(2 / 2.0)  # the ramp request and the measured one ended inside
    assert s.ramp_output_tokens == 4  # all of the ramp, for the server-counter check


def test_short_duration_window_is_a_finding():
    """A 12 s window at 256 streams of ~8.8 s requests (vLLM, H100, validation/predict-h100/dense-eager-run.json)."""
    from pathlib import Path

    from servelab.rules.diagnose import diagnose
    from servelab.store.results import RunResult

    run = RunResult.model_validate_json((Path(__file__).resolve().parent.parent / "validation/predict-h100/dense-eager-run.json").read_text())
    short = {f.evidence["concurrency"]: f for f in diagnose(run) if f.kind == "short_window"}
    assert set(short) == {256}  # c=64: 12 s is 4 × its 3 s requests
    assert "measure at least 3 ×" in short[256].message and short[256].evidence["window_s"] == 12.0
