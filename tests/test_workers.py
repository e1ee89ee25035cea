"""Client worker processes (servelab bench --client-procs): the same run as one process against the
embedded llama.cpp server, and a worker killed mid-run (fault server: every request slow)."""

from __future__ import annotations

import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import read_jsonl, run, scrape, scrape_idle, wait_for_records
from servelab.run.bench import BenchOptions
from servelab.server.endpoint import discover
from servelab.load import workers
from servelab.load.body import request_body
from servelab.values.prompt import Prompt
from servelab.load.scheduler import closed_loop
from servelab.load.workers import ClientWorkersGone, auto_procs
from servelab.values.records import RequestRecord
from servelab.store.results import load_run
from test_bench_local import Hooks, _bench
from test_fault_suite import bench, fault_server


def test_auto_procs_one_per_256_streams_leaving_a_cpu():
    assert auto_procs(1, cpus=16) == auto_procs(256, cpus=16) == 1
    assert auto_procs(257, cpus=16) == 2 and auto_procs(4096, cpus=16) == 15
    assert auto_procs(4096, cpus=2) == 1 and auto_procs(4096, cpus=1) == 1


def test_two_processes_measure_what_one_does(llama, tmp_path):
    """Same token and request counts as one process, the server's counters agree, every record's
    times are in order on the one clock, and the latencies are alike."""
    results = {}
    for procs in (1, 2):
        before = scrape_idle(llama.url)
        opts = BenchOptions(concurrency=[3], requests=6, warmup=1, input_tokens=128, output_tokens=16, client_procs=procs)
        result = run(_bench(llama.url, opts, tmp_path / f"p{procs}", Hooks()))
        after = scrape(llama.url)
        records = read_jsonl(tmp_path / f"p{procs}" / "records.jsonl")
        assert result.status == "complete" and result.environment.client_procs == procs
        assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == sum(r["output_tokens"] for r in records)
        results[procs] = (result, records)
    (one, rec1), (two, rec2) = results[1], results[2]
    # the stagger ramp's requests are warm-up, as many as end during the ramp (timing): the rest match
    assert [r["phase"] for r in rec1 if r["phase"] != "warmup"] == [r["phase"] for r in rec2 if r["phase"] != "warmup"]
    measured = [[r for r in recs if r["phase"] == "measured"] for recs in (rec1, rec2)]
    assert [len(m) for m in measured] == [6, 6]
    for r in measured[1]:
        assert r["status"] == "ok" and r["output_tokens"] == 16 and r["prompt_tokens"] == r["expected_prompt_tokens"] == 128
        assert r["queued"] <= r["start"] < r["first_token"] <= r["end"]  # coordinator's hand-over, then the worker's clock
        assert len(r["chunk_times"]) == 16
    e2e = [statistics.median(r["end"] - r["start"] for r in m) for m in measured]
    assert 0.5 < e2e[1] / e2e[0] < 2.0  # the same server load, a different client: alike, not equal (a 2-core CI box)
    assert one.levels[0].output_tokens == two.levels[0].output_tokens


def _kill_workers(numbers):
    """SIGKILL this process's client workers ``python -m servelab.load.workers FD N`` for N in ``numbers``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if ppid == os.getpid() and b"servelab.load.workers" in argv and int(argv[-2]) in numbers:
            os.kill(int(stat.parent.name), signal.SIGKILL)


def test_a_killed_worker_fails_its_requests_and_the_run_goes_on(tmp_path):
    with fault_server("--slow", "1", "--slow-s", "0.5") as url:
        opts = BenchOptions(concurrency=[4], requests=12, warmup=0, input_tokens=64, output_tokens=4, client_procs=2, closed_loop="burst")
        hooks = Hooks(after=1, action=lambda: _kill_workers([0]))
        result = run(_bench(url, opts, tmp_path / "run", hooks))
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    lost = [r for r in records if r.get("error_kind") == "client_worker"]
    assert result.status == "complete" and lost and all(r["status"] == "failed" for r in lost)
    assert all("client worker process 0 exited" in r["error"] for r in lost)
    assert any("client worker process 0 exited" in n for n in result.notes)
    measured = [r for r in records if r["phase"] == "measured"]
    assert len(measured) == 12 and result.levels[0].failed_requests == sum(1 for r in measured if r.get("error_kind") == "client_worker")
    assert sum(1 for r in measured if r["status"] == "ok") == 12 - result.levels[0].failed_requests


def test_every_worker_killed_leaves_a_partial_run(tmp_path):
    with fault_server("--slow", "1", "--slow-s", "0.5") as url:
        opts = BenchOptions(concurrency=[4], requests=12, warmup=0, input_tokens=64, output_tokens=4, client_procs=2, closed_loop="burst")
        hooks = Hooks(after=1, action=lambda: _kill_workers([0, 1]))
        with pytest.raises(ClientWorkersGone, match="all 2 client worker processes died"):
            run(_bench(url, opts, tmp_path / "run", hooks))
    saved = load_run(tmp_path / "run")[0]
    assert saved.status == "partial" and "client worker processes died" in saved.partial_reason
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert any(r.get("error_kind") == "client_worker" for r in records)
    assert all(r["status"] in ("ok", "failed", "incomplete") for r in records)


def test_ctrl_c_with_workers_leaves_a_partial_run_and_no_traceback(tmp_path):
    out = tmp_path / "run"
    with fault_server("--slow", "1", "--slow-s", "0.3") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servelab", "bench", "--url", url, "--concurrency", "4", "--requests", "400", "--warmup", "0",
             "--input-tokens", "64", "--output-tokens", "4", "--client-procs", "2", "--output", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip  (its own process group: Ctrl-C in a terminal reaches the coordinator and its workers)
        wait_for_records(proc, out / "records.jsonl", 6, 60)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in output, output
    result, recs = load_run(out)
    assert result.status == "partial" and "interrupted" in result.partial_reason
    assert any(r.status == "incomplete" for r in recs)  # in flight in the workers at Ctrl-C: kept, marked
    group = subprocess.run(["ps", "-o", "stat=,args=", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    assert not [line for line in group.splitlines() if "servelab.load.workers" in line and not line.startswith("Z")], group  # no worker left running


def test_a_duration_ends_on_time_and_keeps_every_request(monkeypatch):
    """At a duration's end the requests in flight in the workers come back ``incomplete`` at once,
    also those cancelled before their worker had sent them (they once never answered, and every
    level waited CANCEL_WAIT_S for them)."""
    monkeypatch.setattr(workers, "CANCEL_WAIT_S", 30.0)

    async def main(url):
        endpoint = await discover(url)
        origin = time.perf_counter()

        def make(i):
            rec = RequestRecord(index=i, concurrency=32, phase="measured", max_tokens=4, queued=time.perf_counter() - origin)
            return rec, request_body(endpoint, Prompt("hello", 1), max_tokens=4, ignore_eos=False, cold=True)

        async def alive():
            return True

        phases = []
        async with workers.WorkerPool(endpoint, origin=origin, connections=32, request_timeout_s=60, procs=2) as pool:
            for _ in range(3):  # the race (a send and its cancel in one read) is likely in one phase, not certain
                seen, t0 = [], time.perf_counter()
                phase = await closed_loop(pool, make, concurrency=32, duration_s=1.0, on_record=seen.append, alive=alive)
                phases.append((time.perf_counter() - t0, phase.records, seen))
        return phases

    with fault_server() as url:
        phases = run(main(url))
    for elapsed, records, seen in phases:
        assert elapsed < 10  # not CANCEL_WAIT_S
        assert len(seen) == len(records) and len({r.index for r in records}) == len(records)
        cut = [r for r in records if r.status == "incomplete"]
        assert len(cut) <= 32 and all(r.error_kind == "cancelled" and r.end is not None for r in cut)  # (a level may end with all its requests just done)
        assert all(r.status == "ok" for r in records if r not in cut)


def test_ray_two_nodes_on_loopback_run_a_bench_and_merge_records(tmp_path, monkeypatch):
    """A two-node Ray cluster on this machine: one client worker actor per node, each clock offset
    measured and noted, every record back on the coordinator's clock and in the one records file."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80_000_000})
    cluster.add_node(num_cpus=1, object_store_memory=80_000_000)
    cluster.wait_for_nodes()
    try:
        with fault_server() as url:
            opts = BenchOptions(concurrency=[4], requests=16, warmup=2, input_tokens=64, output_tokens=8, ray_address=cluster.address)
            result = run(_bench(url, opts, tmp_path / "run", Hooks()))
    finally:
        cluster.shutdown()
    assert result.status == "complete" and result.environment.client_procs == 2
    placed = [n for n in result.notes if "clock offset" in n]
    assert len(placed) == 2 and len({n.split("Ray node ")[1].split()[0] for n in placed}) == 2  # one actor on each node
    for note in placed:  # one host: the offset is ~0, known to within the probe's half round trip
        offset, uncertainty = (float(x) for x in re.findall(r"([+-]?\d+\.\d+) ms", note))
        assert abs(offset) <= uncertainty + 1.0 and uncertainty < 50
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    measured = [r for r in records if r["phase"] == "measured"]
    assert len(measured) == 16 and all(r["status"] == "ok" and r["output_tokens"] == 8 for r in measured)
    assert all(r["queued"] <= r["start"] + 0.05 < r["end"] + 0.05 for r in records)  # coordinator's clock, ± the offset's uncertainty


def test_ten_thousand_streams_over_two_processes_are_all_accounted_for(tmp_path):
    """10,000 concurrent streams against the fast fault server, over two client processes: 1 in 500
    streams dropped (each drop asks the liveness probe) while /health and /v1/models answer 6 s late.
    The live server is never declared gone and every request is in the records and the summary."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 12_000:
        pytest.skip(f"needs 12,000 open files per process (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 12_000), hard))  # the fault server and the workers inherit it
    t0 = time.monotonic()
    try:
        with fault_server("--drop", "500", "--slow-probe", "6") as url:
            res = bench(url, tmp_path / "run", "--client-procs", "2", concurrency=10_000, requests=10_000)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert res.exit_code == 1 and "20 measured requests failed" in " ".join(res.output.split()), res.output
    saved, records = load_run(tmp_path / "run")
    (level,) = saved.levels
    assert saved.status == "complete" and not level.cut_short and saved.environment.client_procs == 2
    assert (level.ok, level.failed_requests, level.incomplete, level.error_kinds) == (9980, 20, 0, {"disconnected": 20})
    assert len(records) == 10_001 and len({r.index for r in records}) == 10_001
    assert time.monotonic() - t0 < 180


def test_an_echoed_api_key_never_leaves_a_worker_process(tmp_path, monkeypatch):
    """The key reaches the workers in their first message; a server that echoes the Authorization
    header into its error body must still find it masked in what the workers send back."""
    key = "sk-workers-" + os.urandom(6).hex()
    monkeypatch.setenv("FAULT_KEY", key)
    with fault_server("--echo", "5") as url:
        res = bench(url, tmp_path / "run", "--api-key-env", "FAULT_KEY", "--client-procs", "2")
    assert res.exit_code == 1 and key not in res.output
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert "bad header Bearer ***" in written and key not in written
