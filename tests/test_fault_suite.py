"""Every server fault against a real bench: what it becomes (record status, error kind, finding, exit
code), and 1,000 streams with dropped streams and 500s (docs/failure-semantics.md)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import read_jsonl
from servelab.cli import app

SERVER = Path(__file__).parent / "faultserver.py"


@contextmanager
def fault_server(*args: str):
    """The fault server (tests/faultserver.py) in its own process; yields its URL."""
    proc = subprocess.Popen([sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until it listens
        assert line.startswith("port "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def bench(url: str, out: Path, *extra: str, concurrency: int = 4, requests: int = 20):
    args = ["bench", "--url", url, "--concurrency", str(concurrency), "--requests", str(requests), "--warmup", "0",
            "--input-tokens", "64", "--output-tokens", "8", "--output", str(out), *extra]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res


@pytest.mark.parametrize(("fault", "kind"), [
    (["--malformed", "5", "--chunk", "choice-str"], "bad_chunk"),
    (["--malformed", "5", "--chunk", "usage-negative"], "bad_chunk"),
    (["--binary", "5"], "bad_chunk"),
    (["--error", "5", "--status", "429"], "http_429"),
    (["--error", "5", "--status", "503"], "http_503"),
    (["--drop", "5"], "disconnected"),
    (["--huge", "5"], "http_500"),
    (["--stall", "5"], "timeout"),
])  # fmt: skip
def test_each_fault_fails_its_requests_only(tmp_path, fault, kind):
    """4 of the 20 measured requests (n = 5, 10, 15, 20) get the fault: they fail with its kind,
    the other 16 are ok, the run completes with its summary, and the exit code is 1."""
    with fault_server(*fault) as url:
        res = bench(url, tmp_path / "run", "--request-timeout", "1")
    assert res.exit_code == 1 and "4 measured requests failed" in " ".join(res.output.split()), res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (level,) = run["levels"]
    assert run["status"] == "complete" and (level["ok"], level["failed_requests"], level["error_kinds"]) == (16, 4, {kind: 4})
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert len(records) == 21 and all(len(r.get("error", "")) <= 500 for r in records)
    assert any(f["kind"] == "failed_requests" for f in run["findings"])


def test_a_dropped_calibration_request_is_tried_again(tmp_path):
    with fault_server("--drop", "1000:1") as url:
        res = bench(url, tmp_path / "run")
    assert res.exit_code == 0, res.output
    calibration = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "calibration"]
    assert [r["status"] for r in calibration] == ["failed", "ok"]


def test_slow_headers_count_in_ttft_and_nothing_fails(tmp_path):
    with fault_server("--slow", "2", "--slow-s", "0.3") as url:
        res = bench(url, tmp_path / "run", concurrency=2, requests=8)
    assert res.exit_code == 0, res.output
    measured = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["phase"] == "measured"]
    slow = [r for r in measured if r["first_token"] - r["start"] >= 0.3]
    assert len(slow) == 4 and all(r["status"] == "ok" for r in measured)


def test_zero_token_outputs_under_ignore_eos_are_a_finding(tmp_path):
    with fault_server("--zero", "5") as url:
        res = bench(url, tmp_path / "run")
    assert res.exit_code == 0 and "short_outputs" in res.output, res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["levels"][0]["short_outputs"] == 4
    assert run["levels"][0]["output_throughput_tok_s"] > 0


def test_echoed_api_key_never_reaches_disk_or_screen(tmp_path, monkeypatch):
    key = "sk-fault-suite-" + os.urandom(6).hex()
    monkeypatch.setenv("FAULT_KEY", key)
    with fault_server("--echo", "5") as url:
        res = bench(url, tmp_path / "run", "--api-key-env", "FAULT_KEY")
    assert res.exit_code == 1 and key not in res.output
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert "bad header Bearer ***" in written and key not in written


@pytest.mark.parametrize("models", ["no-ids", "no-list", "bad-len", "html"])
def test_lying_model_list(tmp_path, models):
    with fault_server("--models", models) as url:
        res = bench(url, tmp_path / "run")
    if models == "bad-len":  # a context length that is not a number is ignored; the run goes on
        assert res.exit_code == 0, res.output
        return
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_a_server_that_dies_under_load_leaves_a_partial_run_with_its_summary(tmp_path):
    """The server process exits at request 30 of 200 (8 streams): the connection refusals are
    confirmed by the liveness probe, the run ends partial with exit code 1, and the level it cut
    short is summarised (never dropped) and marked."""
    with fault_server("--exit", "30") as url:
        res = bench(url, tmp_path / "run", concurrency=8, requests=200)
    assert res.exit_code == 1 and "the run is partial: the server stopped answering" in " ".join(res.output.split()), res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (level,) = run["levels"]
    assert run["status"] == "partial" and level["cut_short"] and 20 <= level["ok"] < 30 and level["failed_requests"] >= 1
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert len(records) == 1 + level["ok"] + level["failed_requests"] + level["incomplete"]


def test_a_thousand_streams_with_drops_and_500s_complete_and_account_for_every_request(tmp_path):
    """1,000 concurrent streams; 2% of the streams dropped by the server, 1% answered 500, and the
    server answers /health and /v1/models 6 s late (busy). The live server is never declared gone,
    every request is in the records and the summary, exit code 1."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"needs 4096 open files (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    t0 = time.monotonic()
    try:
        with fault_server("--drop", "50", "--error", "100:25", "--slow-probe", "6") as url:
            res = bench(url, tmp_path / "run", concurrency=1000, requests=1000)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert res.exit_code == 1 and "30 measured requests failed" in " ".join(res.output.split()), res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (level,) = run["levels"]
    assert run["status"] == "complete" and not level["cut_short"]
    assert (level["ok"], level["failed_requests"], level["incomplete"]) == (970, 30, 0)
    assert level["error_kinds"] == {"disconnected": 20, "http_500": 10}
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert len(records) == 1001 and len({r["index"] for r in records}) == 1001
    assert time.monotonic() - t0 < 120


def test_report_of_an_open_loop_run_prints_no_warning(tmp_path):
    """Plots without closed-loop levels (or without per-user figures) draw no empty legend: a
    matplotlib warning on the user's screen is noise."""
    import warnings

    with fault_server() as url:
        assert bench(url, tmp_path / "run", "--rate", "20", requests=4).exit_code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0 and res.exception is None, (res.output, res.exception)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_stops_a_background_run_that_inherited_sigint_ignored(tmp_path, signame):
    """A script's background job starts with SIGINT ignored; SIGTERM, or SIGHUP from a dropped ssh
    session (forwarded as SIGINT), must still stop it and leave the partial run."""
    import signal

    out = tmp_path / "run"
    with fault_server("--slow", "1", "--slow-s", "0.2") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servelab", "bench", "--url", url, "--concurrency", "1", "--requests", "200", "--warmup", "0",
             "--input-tokens", "64", "--output-tokens", "8", "--output", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not ((out / "records.jsonl").exists() and len((out / "records.jsonl").read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() is not None else "timeout"
            time.sleep(0.05)  # polling a condition
        proc.send_signal(getattr(signal, signame))
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "partial" and run["levels"][0]["cut_short"]


@pytest.mark.parametrize(("fault", "anomaly", "tokens"), [
    ("--dup", {"usage_below_chunks": 4}, 16 * 8 + 4 * 16),  # the doubled chunks are what came: counted from the stream
    ("--choices", {"extra_choices": 4}, 20 * 8),
    ("--after-done", {"after_done": 4}, 20 * 8),
    ("--inflate", {"usage_above_max_tokens": 4, "usage_above_text": 4}, 20 * 8),  # not 16·8 + 4·80
    ("--deflate", {"usage_below_chunks": 4}, 20 * 8),
])  # fmt: skip
def test_a_lying_server_is_reported_never_believed(tmp_path, fault, anomaly, tokens):
    """4 of the 20 measured requests lie: the counts come from the stream received, the records say
    what was not believed, and a finding gives the number of requests affected."""
    with fault_server(fault, "5") as url:
        res = bench(url, tmp_path / "run")
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (level,) = run["levels"]
    assert level["stream_anomalies"] == anomaly and level["output_tokens"] == tokens and level["ok"] == 20
    (finding,) = [f for f in run["findings"] if f["kind"] == "stream_anomalies"]
    assert finding["evidence"]["requests"] == anomaly
    lied = [r for r in read_jsonl(tmp_path / "run" / "records.jsonl") if r["anomalies"]]
    assert len(lied) == 4 and all(r["output_tokens_source"] != "usage" for r in lied if "usage_below_chunks" in r["anomalies"] or "usage_above_text" in r["anomalies"])


@pytest.mark.parametrize("fault", ["--crlf", "--comments", "--split"])
def test_sse_framing_variants_change_nothing(tmp_path, fault):
    with fault_server(fault, "1") as url:
        res = bench(url, tmp_path / "run")
    assert res.exit_code == 0, res.output
    (level,) = json.loads((tmp_path / "run" / "run.json").read_text())["levels"]
    assert (level["ok"], level["output_tokens"], level["stream_anomalies"]) == (20, 160, {})


def test_cached_tokens_on_a_cold_run_are_contamination_without_metrics(tmp_path):
    with fault_server("--cached", "1") as url:
        res = bench(url, tmp_path / "run")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    (finding,) = [f for f in run["findings"] if f["kind"] == "prefix_cache_contamination"]
    assert finding["evidence"]["source"] == "usage" and finding["evidence"]["cached_prompt_tokens"] > 0, res.output


def test_a_full_disk_names_the_file(tmp_path):
    """Records written to a full disk (/dev/full: every write is ENOSPC) end in one line naming the file."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "records.jsonl").symlink_to("/dev/full")
    with fault_server() as url:
        res = bench(url, out, requests=4)
    lines = [line for line in res.output.splitlines() if line.strip().startswith("error:")]
    assert res.exit_code == 2 and lines and "records.jsonl" in lines[-1] and "No space left" in lines[-1], res.output
