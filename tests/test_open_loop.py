"""Open-loop arrivals: the arrival process (statistics, pure logic) and a real run against the embedded server."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from conftest import read_jsonl, run
from servelab.run.bench import BenchOptions
from servelab.load.scheduler import arrival_gaps
from test_bench_local import Hooks, _bench

N = 20000


@pytest.mark.parametrize(("rate", "burstiness"), [(2.0, 1.0), (10.0, 0.25), (0.5, 4.0)])
def test_arrival_rate_and_dispersion_within_statistical_bounds(rate, burstiness):
    gaps = list(itertools.islice(arrival_gaps(rate, burstiness, seed=1), N))
    mean, cv = statistics.fmean(gaps), statistics.stdev(gaps) / statistics.fmean(gaps)
    expected_cv = 1 / math.sqrt(burstiness)
    # standard error of the mean of N gamma gaps is (1/rate)·cv/√N: allow 5 of them
    assert mean == pytest.approx(1 / rate, abs=5 * expected_cv / rate / math.sqrt(N))
    assert cv == pytest.approx(expected_cv, rel=0.05)


def test_arrivals_are_reproducible_by_seed():
    a = list(itertools.islice(arrival_gaps(3.0, 1.0, seed=7), 5))
    assert a == list(itertools.islice(arrival_gaps(3.0, 1.0, seed=7), 5))
    assert a != list(itertools.islice(arrival_gaps(3.0, 1.0, seed=8), 5))


def test_open_loop_against_the_embedded_server_reports_client_wait_and_achieved_rate(llama, tmp_path):
    opts = BenchOptions(concurrency=[1], rates=[4.0], max_concurrency=1, requests=6, warmup=0, input_tokens=64, output_tokens=24)
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    level = result.levels[0]
    assert (level.rate_rps, level.concurrency, level.ok, level.failed_requests) == (4.0, 1, 6, 0)
    # 4 arrivals/s but one at a time and ~0.5 s each: requests wait on the client side, and fewer than 4/s start
    assert level.client_wait_ms.p50 > 100 and level.achieved_rate_rps < 4.0
    assert level.client_wait_ms.max < level.e2e_ms.max * 6  # bounded by the queue ahead
    records = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "measured"]
    assert all(r["start"] >= r["queued"] for r in records)
    queued = sorted(r["queued"] for r in records)
    assert queued == sorted(queued) and len(set(queued)) == 6  # the planned schedule, one arrival each
    assert result.load.rates == [4.0] and result.load.max_concurrency == 1


def test_open_loop_duration_cuts_off_in_flight_requests(llama, tmp_path):
    opts = BenchOptions(concurrency=[1], rates=[2.0], duration_s=2.0, warmup=0, input_tokens=64, output_tokens=400)
    level = run(_bench(llama.url, opts, tmp_path / "run", Hooks())).levels[0]
    assert level.window_s == pytest.approx(2.0) and level.incomplete >= 1
