"""The traffic users have (issue 31) against the embedded llama.cpp server (real Gemma 3 270M,
loopback): the completions API, multi-turn sessions, the agentic workload and trace replay, each
token-exact against the server's usage, with their records, findings, tables and reports."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import read_jsonl, run
from servelab.run.bench import BenchOptions
from servelab.cli import app
from servelab.server.endpoint import discover
from servelab.store.imports import from_run, from_vllm_bench
from servelab.load import workers
from servelab.load.body import request_body
from servelab.values.prompt import Prompt
from servelab.server.local import LocalServer
from servelab.values.records import RequestRecord
from servelab.report.html import leaderboard_page, run_page
from servelab.store.results import load_run
from servelab.workloads.traces import load_trace
from test_bench_local import Hooks, _bench
from test_fault_suite import fault_server

pytestmark = pytest.mark.server
TRACES = Path(__file__).parent / "fixtures" / "traces"
cli = CliRunner()


def _exact(result) -> None:
    check = result.prompt_check
    assert check.checked_requests > 0 and check.mismatched_requests == 0 and check.max_abs_deviation_tokens == 0, check


def test_completions_api_sends_the_raw_prompt_token_exact(llama, tmp_path):
    """/v1/completions: no chat template, so the calibration measures the one BOS token the server
    adds (the chat template adds 9 on Gemma 3); every prompt is exact and outputs are complete."""
    opts = BenchOptions(concurrency=[2], requests=4, warmup=1, input_tokens=96, output_tokens=8, api="completions")
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    _exact(result)
    assert result.load.endpoint == "completions" and result.load.traffic == "completions"
    assert result.prompt_check.template_overhead_tokens == 1 and "completions" in result.prompt_check.overhead_source
    measured = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "measured"]
    assert len(measured) == 4 and all(r["status"] == "ok" and r["output_tokens"] == 8 == len(r["chunk_times"]) for r in measured)


def test_sessions_resend_their_conversation_exactly_and_reuse_it(llama, tmp_path):
    """Two sessions of three turns: each turn's prompt is the server's own count of the whole
    conversation (0 deviations), grows turn by turn, and is served more and more from the cache."""
    opts = BenchOptions(concurrency=[2], requests=2, warmup=0, sessions=True, turns=3, input_tokens=48, turn_input_tokens=32, output_tokens=8)
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    _exact(result)
    records = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "measured"]
    assert sorted((r["session"], r["turn"]) for r in records) == [(s, t) for s in (0, 1) for t in range(3)]
    for s in (0, 1):
        prompts = [r["prompt_tokens"] for r in sorted((r for r in records if r["session"] == s), key=lambda r: r["turn"])]
        assert prompts[0] < prompts[1] < prompts[2] and prompts[2] - prompts[1] >= 32 + 8  # the answer and the new message
    stats = result.levels[0].sessions
    assert stats.started == 2 and stats.ended == {"completed": 2} and [t.turn for t in stats.turns] == [0, 1, 2]
    assert stats.turns[2].prefix_hit_rate > 0.3 and stats.turns[2].context_tokens_mean > stats.turns[0].context_tokens_mean
    assert result.load.sessions and result.load.traffic == "chat sessions"
    assert not any(f.kind == "prefix_cache_contamination" for f in result.findings)  # reuse is the point here


def test_a_session_that_outgrows_the_context_ends_without_sending(tmp_path):
    """One 512-token slot: the fourth turn would not fit, so the session ends with the reason
    context_limit before it is sent (no HTTP 400), and a finding says so."""
    with LocalServer(tmp_path / "server.log", parallel=1, ctx_size=512) as small:
        opts = BenchOptions(concurrency=[1], requests=1, warmup=0, sessions=True, turns=6, input_tokens=100, turn_input_tokens=100, output_tokens=16)
        result = run(_bench(small.url, opts, tmp_path / "run", Hooks()))
    records = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "measured"]
    assert records and all(r["status"] == "ok" for r in records) and max(r["turn"] for r in records) < 5
    assert all(r["prompt_tokens"] + r["max_tokens"] <= 512 for r in records)
    assert result.levels[0].sessions.ended == {"context_limit": 1}
    assert any(f.kind == "sessions_ended_early" and "context limit" in f.message for f in result.findings)


def test_agentic_workload_in_the_suite(llama, tmp_path):
    """The built-in agentic session through ``servelab suite``: its shared system prompt and tool
    definitions, six turns, each exact; the suite row shows the context growing."""
    res = cli.invoke(app, ["suite", "--url", llama.url, "--only", "agentic", "--runs", "1", "--output", str(tmp_path / "suite")])
    assert res.exit_code == 0, res.output
    assert "agentic" in res.output and "(6 turns)" in res.output
    result, records = load_run(tmp_path / "suite" / "agentic")
    _exact(result)
    turns = result.levels[0].sessions.turns
    assert len(turns) == 6 and turns[-1].prefix_hit_rate > 0.5 and turns[-1].context_tokens_mean > turns[0].context_tokens_mean + 5 * 256
    first = next(r for r in records if r.phase == "measured" and r.turn == 0)
    assert first.prompt_tokens > 1024  # the system prompt rides along


def test_a_session_mix_from_a_file_prints_the_per_turn_table(llama, tmp_path):
    (tmp_path / "w.yaml").write_text(
        "workloads:\n  tools: {system: 'You call tools.', system_tokens: 64, input_tokens: 32, turns: 3, turn_input_tokens: 24, "
        "turn_instruction: 'Tool result:', max_tokens: 8}\nmixes:\n  agents: {tools: 1, qa: 1}\n"
    )
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--workloads-file", str(tmp_path / "w.yaml"), "--mix", "agents", "--workers", "2",
                           "--requests", "4", "--warmup", "0", "--output", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "sessions, per turn" in res.output and "0/" in res.output.split("prompt tokens vs server usage: ")[1]
    result, records = load_run(out)
    measured = [r for r in records if r.phase == "measured"]
    assert {r.workload for r in measured} <= {"tools", "qa"} and all(r.status == "ok" for r in measured)
    assert all(r.session is not None for r in measured if r.workload == "tools")


@pytest.mark.parametrize(("name", "scale"), [("mooncake.jsonl", 2.0), ("azure.csv", 2.0), ("servelab-records.jsonl", 1.0)])
def test_trace_replay_of_each_format(llama, tmp_path, name, scale):
    """Each shipped trace replayed at its times: every prompt exact, sends on schedule, the trace
    in the run; Mooncake's shared blocks really shared (the server's cache serves some of them)."""
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--trace", str(TRACES / name), "--time-scale", str(scale), "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "send lag ms" in res.output
    result, records = load_run(out)
    _exact(result)
    trace = load_trace(TRACES / name, time_scale=scale)
    info = result.load.trace
    assert info.file == name and info.requests == len(trace.requests) and info.duration_s == pytest.approx(trace.duration_s)
    measured = sorted((r for r in records if r.phase == "measured"), key=lambda r: r.queued)
    assert [r.max_tokens for r in measured] == [r.output_tokens for r in trace.requests] and all(r.status == "ok" for r in measured)
    lag = result.levels[0].client_wait_ms
    # scheduled vs sent: on schedule as a rule, never a second late (a shared 2-core CI machine once
    # stalled one send by 373 ms, so no tight bound on the worst of 4-6 sends here;
    # benchmarks/trace_replay.py measures the lag's p99)
    assert lag.n == len(trace.requests) and lag.p50 < 50 and lag.max < 1000
    for r, t in zip(measured, trace.requests, strict=True):
        assert abs((r.queued - measured[0].queued) - t.at_s) < 1e-6  # sent at the trace's own times
        assert abs(r.expected_prompt_tokens - t.input_tokens) <= 2  # built to the trace's length (seams: ±1)
    if name == "mooncake.jsonl":
        assert info.prefix_share == pytest.approx(0.572, abs=0.001) and result.load.traffic == "chat trace mooncake"
        assert result.levels[0].server.cached_prompt_tokens > 0
        assert any(f.kind == "trace_prefix_reuse" for f in result.findings)
        assert not any(f.kind == "prefix_cache_contamination" for f in result.findings)


def test_a_trace_request_longer_than_the_context_is_sent_and_counted_not_left_out(llama, tmp_path):
    """A trace is the users' traffic: a request the server's context cannot hold is replayed at its time
    like the others, fails at the server (llama.cpp: HTTP 400) and is counted, with a finding saying how many."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 64, "output_length": 8}\n{"timestamp": 100, "input_length": 9000, "output_length": 8}\n'
                     '{"timestamp": 200, "input_length": 64, "output_length": 8}\n')  # fmt: skip
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--trace", str(trace), "--output", str(out)])
    result, records = load_run(out)
    measured = sorted((r for r in records if r.phase == "measured"), key=lambda r: r.queued)
    assert [r.status for r in measured] == ["ok", "failed", "ok"] and measured[1].http_status == 400
    assert measured[1].expected_prompt_tokens == 4097  # longer than the context on its own: built to the context + 1 tokens, refused alike
    assert result.load.trace.requests == 3 and result.load.trace.over_context == 1 and result.load.trace.context_tokens == 4096  # 4 slots × 4,096 (conftest)
    assert result.levels[0].ok == 2 and result.levels[0].failed_requests == 1
    (found,) = [f for f in result.findings if f.kind == "trace_over_context"]
    assert found.evidence["over_context"] == 1 and "trace_over_context" in res.output
    assert res.exit_code == 1  # a failed measured request makes bench exit 1, as everywhere


def test_trace_requests_cut_to_the_first_n_and_bad_lines_skipped(llama, tmp_path):
    trace = tmp_path / "t.jsonl"
    good = (TRACES / "mooncake.jsonl").read_text().splitlines()
    trace.write_text("\n".join([good[1], "{broken", good[4], good[1]]) + "\n")
    res = cli.invoke(app, ["bench", "--url", llama.url, "--trace", str(trace), "--output", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "line 2" in res.output and "--skip-bad" in res.output
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--trace", str(trace), "--skip-bad", "--requests", "2", "--output", str(out)])
    assert res.exit_code == 0, res.output
    result, records = load_run(out)
    assert result.load.trace.skipped_lines == 1 and result.load.trace.requests == 2
    assert len([r for r in records if r.phase == "measured"]) == 2


def test_reports_and_the_leaderboard_show_sessions_and_traces(llama, tmp_path):
    runs = {}
    for label, extra in (("sessions", ["--sessions", "1", "--turns", "2", "--input-tokens", "40", "--output-tokens", "4", "--requests", "1", "--warmup", "0"]),
                         ("trace", ["--trace", str(TRACES / "azure.csv"), "--time-scale", "4", "--requests", "2"])):  # fmt: skip
        res = cli.invoke(app, ["bench", "--url", llama.url, *extra, "--output", str(tmp_path / label)])
        assert res.exit_code == 0, res.output
        runs[label] = from_run(load_run(tmp_path / label)[0], tmp_path / label)
    page = run_page(runs["sessions"])
    assert "Sessions, per turn" in page and 'id="turns"' in page
    board = leaderboard_page(list(runs.values()), [(r, lv) for r in runs.values() for lv in r.levels], {k: "" for k in ("model", "engine", "hardware", "concurrency")},
                             "output_tok_s", "desc", lambda key: "#")  # fmt: skip
    assert "chat sessions" in board and "chat trace azure" in board and ">1 session<" in board  # a session level is labelled so


def test_vllm_bench_serve_imports_record_the_api():
    base = {"model_id": "m", "completed": 1, "output_throughput": 1.0, "median_ttft_ms": 1.0}
    assert from_vllm_bench({**base, "backend": "openai-chat"}, Path("x.json"), "d").traffic == "chat"
    assert from_vllm_bench({**base, "backend": "vllm"}, Path("x.json"), "d").traffic == "completions"
    assert from_vllm_bench(base, Path("x.json"), "d").traffic is None  # not said: not guessed


def test_a_session_stays_on_one_client_worker():
    """With --client-procs, every turn of a session goes to the worker that took its first."""

    async def main(url):
        endpoint = await discover(url)
        taken: list[tuple[object, str]] = []
        async with workers.WorkerPool(endpoint, origin=time.perf_counter(), connections=8, request_timeout_s=30, procs=2) as pool:
            for worker in pool.workers:
                submit = worker.submit
                worker.submit = lambda rid, record, body, w=worker, submit=submit: (taken.append((record.session, w.label)), submit(rid, record, body))[1]
            def send(session, turn):
                rec = RequestRecord(index=turn * 4 + session, concurrency=4, phase="measured", max_tokens=2, queued=0.0, session=session, turn=turn)
                return pool.send(rec, request_body(endpoint, Prompt("hi", 1), max_tokens=2, ignore_eos=False, cold=True), ("level", session))

            await asyncio.gather(*(send(session, 0) for session in range(4)))  # first turns together: spread over both workers
            for turn in (1, 2):  # later turns one at a time: the least busy worker would always be the first one
                for session in range(4):
                    await send(session, turn)
        return taken

    with fault_server() as url:
        taken = run(main(url))
    by_session = {s: {label for t, label in taken if t == s} for s in range(4)}
    assert all(len(labels) == 1 for labels in by_session.values()) and len(taken) == 12
    assert len(set().union(*by_session.values())) == 2


def test_a_trace_run_resumes_in_its_own_directory(llama, tmp_path):
    """Rerunning a replay with the same --output finds its load the same (what its prompts measured
    is not part of the load), so a finished replay is kept, not refused as another load's."""
    args = ["bench", "--url", llama.url, "--trace", str(TRACES / "azure.csv"), "--time-scale", "4", "--requests", "2", "--output", str(tmp_path / "run")]
    first = cli.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert load_run(tmp_path / "run")[0].prompt_check.trace_deviation_tokens is not None
    again = cli.invoke(app, args)
    assert again.exit_code == 0 and "another load" not in again.output, again.output
