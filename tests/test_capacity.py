"""The capacity search: its logic on probes with a known answer, and ``servelab capacity`` against a
fake continuous-batching server whose capacity for a TPOT SLO is known (tests/batchserver.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.run.capacity import search
from servelab.cli import app
from servelab.metrics.slo import Check, SloResult
from servelab.store.results import load_run

SERVER = Path(__file__).parent / "batchserver.py"


def _result(passed: bool) -> SloResult:
    return SloResult(attainment=1.0 if passed else 0.5, good_requests=1, goodput_rps=1.0, goodput_tok_s=None,
                     checks=[Check(key="tpot_p99", target_ms=10, measured_ms=5 if passed else 20, passed=passed)])  # fmt: skip


@given(true=st.integers(1, 5000), start=st.sampled_from([1, 7, 100]))
def test_the_search_brackets_the_true_capacity_within_ten_percent(true, start):
    asked = []
    found = search(lambda c: asked.append(c) or _result(c <= true), start=start, repeats=2)
    lo, hi = found.bracket
    assert found.converged and found.capacity == lo and lo <= true < hi
    assert hi <= lo * 1.1 or hi - lo <= 1
    assert sum(not p.repeat for p in found.probes) == len(set(asked))  # no load probed twice in the search
    assert [p.load for p in found.probes if p.repeat] == [lo, lo] and found.boundary_passes == (3, 3)


def test_a_load_that_never_passes_or_never_misses_is_said():
    nothing = search(lambda c: _result(False), start=8)
    assert nothing.capacity is None and nothing.bracket == (None, 1.0)
    everything = search(lambda c: _result(True), start=1, repeats=0)
    assert everything.capacity is not None and everything.bracket[1] is None and not everything.converged


def test_open_loop_rates_are_bisected_too():
    found = search(lambda r: _result(r <= 12.3), closed_loop=False, start=2.0, repeats=0)
    assert found.converged and 12.3 / 1.1 <= found.capacity <= 12.3 < found.bracket[1]


@contextmanager
def batch_server(a: float, b: float, *extra: str):
    proc = subprocess.Popen([sys.executable, str(SERVER), "--a", str(a), "--b", str(b), *extra], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until it listens
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_capacity_finds_a_known_capacity_within_15_percent_in_8_probes(tmp_path, monkeypatch):
    """Steps of 2 ms + 1 ms per request in the batch: TPOT p99 ≤ 42 ms holds up to 40 streams."""
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    args = ["capacity", "--slo", "tpot_p99=42ms", "--input-tokens", "64", "--output-tokens", "16", "--requests", "48", "--repeats", "1",
            "--output", str(tmp_path / "cap"), "--json"]  # fmt: skip
    with batch_server(0.002, 0.001) as url:
        res = CliRunner().invoke(app, [*args, "--url", url])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output[res.output.index("{\n"):])
        assert 40 * 0.85 <= doc["max_concurrency"] <= 40 * 1.15, doc["max_concurrency"]
        search_probes = [p for p in doc["probes"] if not p["repeat"]]
        assert len(search_probes) <= 8 and doc["converged"] and doc["slo"] == {"tpot_p99": 42.0}
        assert sum(p["repeat"] for p in doc["probes"]) == 1 and doc["spread_goodput_rps"][0] > 0
        again = CliRunner().invoke(app, [*args, "--url", url])  # the same --output: every probe is found on disk
    assert again.exit_code == 0 and json.loads(again.output[again.output.index("{\n"):])["max_concurrency"] == doc["max_concurrency"]
    assert "probe " not in again.output  # nothing measured again
    assert len(list((tmp_path / "cap").glob("*/run.json"))) == len(doc["probes"])


def test_capacity_needs_the_model_to_predict(tmp_path):
    res = CliRunner().invoke(app, ["capacity", "--slo", "ttft_p99=1s", "--url", "http://127.0.0.1:9", "--hardware", "h100-sxm", "--output", str(tmp_path / "x")])
    assert res.exit_code == 2


@pytest.mark.parametrize("bad", ["ttft_p99=fast", "tpot_p40=1s"])
def test_a_bad_slo_is_one_line(bad):
    res = CliRunner().invoke(app, ["capacity", "--slo", bad])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "--slo" in res.output


def test_capacity_of_sessions_searches_the_sessions_kept_open(tmp_path, monkeypatch):
    """--sessions: each probe keeps that many two-turn conversations open; the steps' TPOT bound
    (2 ms + 1 ms per request ≤ 42 ms: 40 in flight) bounds the sessions too (a little above: a
    session counts its next turn between answers, not in the batch)."""
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    args = ["capacity", "--slo", "tpot_p99=42ms", "--sessions", "--turns", "2", "--input-tokens", "32", "--turn-input-tokens", "16",
            "--output-tokens", "16", "--repeats", "0", "--output", str(tmp_path / "cap"), "--json"]  # fmt: skip
    with batch_server(0.002, 0.001) as url:
        res = CliRunner().invoke(app, [*args, "--url", url])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{\n"):])
    assert 40 * 0.75 <= doc["max_sessions"] <= 40 * 1.3 and doc["converged"], doc  # wider below: the fake server's steps stretch on a busy CPU (it failed once beside other test runs)
    run = json.loads(next((tmp_path / "cap").glob("*/run.json")).read_text())
    assert run["load"]["sessions"] and run["load"]["turns"] == 2 and run["levels"][0]["sessions"]["turns"][1]["turn"] == 1


def test_capacity_of_a_trace_searches_its_speed(tmp_path, monkeypatch):
    """--trace: the load is the replay's time scale; a faster replay keeps more requests in flight
    and misses the TPOT objective, a slower one meets it; --requests N replays its first N in each probe."""
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i * 40}, "input_length": 40, "output_length": 16}}\n' for i in range(80)))  # 25 req/s for 3.2 s
    args = ["capacity", "--slo", "tpot_p99=12ms", "--trace", str(trace), "--requests", "60", "--repeats", "0", "--output", str(tmp_path / "cap"), "--json"]
    with batch_server(0.002, 0.001) as url:
        res = CliRunner().invoke(app, [*args, "--url", url])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{\n"):])
    passed = [p["load"] for p in doc["probes"] if p["passed"]]
    missed = [p["load"] for p in doc["probes"] if not p["passed"]]
    assert doc["max_time_scale"] == max(passed) and missed and min(missed) > max(passed), doc
    assert {p.name[3] for p in (tmp_path / "cap").iterdir()} == {"x"}  # probes named by their speed-up
    assert {load_run(p)[0].load.trace.requests for p in (tmp_path / "cap").iterdir()} == {60}


def test_a_probe_during_which_the_server_compiled_a_kernel_is_measured_again(tmp_path, monkeypatch):
    """The fake server logs vLLM's jit_monitor warning when its 20th request arrives, inside the first
    probe's measured requests (after the calibration and one warm-up): that probe is not a measurement
    (jit_compile) and is measured again; the search counts the second."""
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    log = tmp_path / "server.log"
    log.write_text("")
    args = ["capacity", "--slo", "tpot_p99=42ms", "--input-tokens", "64", "--output-tokens", "16", "--requests", "64", "--repeats", "0",
            "--server-log", str(log), "--output", str(tmp_path / "cap"), "--json"]  # fmt: skip
    with batch_server(0.002, 0.001, "--log", str(log), "--jit-request", "20") as url:
        res = CliRunner().invoke(app, [*args, "--url", url])
    assert res.exit_code == 0, res.output
    again = sorted((tmp_path / "cap").glob("*-again"))
    assert len(again) == 1 and "measuring it again" in res.output
    first = json.loads((again[0].parent / again[0].name.removesuffix("-again") / "run.json").read_text())
    assert first["levels"][0]["jit_kernels"] == ["fused_moe_kernel"] and again[0].name == "01-c1-again"
    assert json.loads((again[0] / "run.json").read_text())["levels"][0]["jit_kernels"] == []
    doc = json.loads(res.output[res.output.index("{\n"):])
    assert 40 * 0.85 <= doc["max_concurrency"] <= 40 * 1.15


def test_capacity_json_is_the_only_thing_on_stdout(tmp_path):
    """--json: the probes' lines, the progress bars and the database note go to stderr, so `| jq` reads stdout whole."""
    env = {**os.environ, "SERVELAB_DB": str(tmp_path / "runs.db")}
    with batch_server(0.002, 0.001) as url:
        out = subprocess.run([sys.executable, "-m", "servelab", "capacity", "--url", url, "--slo", "tpot_p99=42ms", "--input-tokens", "64",
                              "--output-tokens", "8", "--requests", "16", "--repeats", "0", "--start", "16", "--output", str(tmp_path / "cap"), "--json",
                              "--hardware", "h100-sxm", "--model-config", "qwen3-8b"],
                             capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["max_concurrency"] and doc["probes"] and "probe 01-c16" in out.stderr
    band = doc["predicted_band"]  # predict's capacity for --hardware's Qwen3-8B, with its family class's band (issue 53)
    assert band["family_class"] in ("dense", "dense, host-bound")  # 64 / 8 tokens: its start may be host-bound (servelab.plan.band.point_band)
    assert band["streams"][0] <= doc["predicted"] <= band["streams"][1] and band["streams"][0] < band["streams"][1]


def test_a_host_bound_predicted_start_carries_the_hosts_band():
    """capacity's predicted start takes predict's band for the point it lands on: the family class's (Qwen3-8B on an H100,
    dense, ± 14 %), or the host's where the host binds there (Llama-3.2-1B on an H200, ± 25 %: servelab.plan.band)."""
    from servelab.metrics.slo import parse_slo
    from servelab.run.capacity import predicted_start
    from servelab.settings import Load, Target

    load = Load(input_tokens=512, output_tokens=128, slo=parse_slo("tpot_p99=10ms"))
    small = predicted_start(Target(hardware="h200", roofline_model=str(Path(__file__).resolve().parent.parent / "validation/configs/llama-3.2-1b")), load)
    assert small.band.family_class == "dense, host-bound" and small.half_width == 0.25 and small.bracket[0] < small.streams < small.bracket[1]
    dense = predicted_start(Target(hardware="h100-sxm", roofline_model="qwen3-8b"), load)
    assert dense.band.family_class == "dense" and dense.half_width == 0.14
