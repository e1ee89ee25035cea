"""The CLI contract: every command, given a bad argument or a bad file, exits 2 with exactly one
line that starts with ``error:`` and names the input, no traceback, and writes nothing."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import COMMANDS, app
from servelab.store.results import run_lock
from test_fault_suite import bench, fault_server

READONLY = Path("/proc/servelab-cannot-write-here")  # a folder nobody can create files in


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A workspace with one real run (from the fault server), a binary file, YAML and logs."""
    root = tmp_path_factory.mktemp("contract")
    with fault_server() as url:
        res = bench(url, root / "run", requests=4)
    assert res.exit_code == 0, res.output
    (root / "binary.dat").write_bytes(b"\xff\xfe\x00\x81binary")
    (root / "notes.txt").write_text("hello\n")
    (root / "empty.log").write_text("")
    (root / "deep.jsonl").write_text('{"prompt": ' + "[" * 20000 + "]" * 20000 + "}\n")
    (root / "deep.yaml").write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    (root / "deep.json").write_text('{"a": ' + "[" * 20000 + "]" * 20000 + "}")
    (root / "zero-mix.yaml").write_text("mixes: {m: {qa: 0}}\n")
    (root / "nan-mix.yaml").write_text("mixes: {m: {qa: .nan, code: 1}}\n")
    (root / "sweep").mkdir()
    (root / "sweep" / "sweep.json").write_text("{}")
    (root / "bad-trace.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 1, "input_length": "x"}\n')
    (root / "columns.csv").write_text("time,tokens\n1,2\n")
    (root / "huge-config.json").write_text('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1e30, "vocab_size": 10, "num_attention_heads": 4}')
    return root


# (args with {W} = the workspace, needle the error line must contain)
CASES = [
    ("bench --concurrency 0", "--concurrency"),
    ("bench --concurrency 1,x", "--concurrency"),
    ("bench --rate -1", "--rate"),
    ("bench --duration 5x", "--duration"),
    ("bench --requests 2 --duration 5s", "--requests"),
    ("bench --url ftp://example", "--url"),
    ("bench --chat-template-kwargs [1]", "--chat-template-kwargs"),
    ("bench --dataset {W}/missing.jsonl", "missing.jsonl"),
    ("bench --dataset {W}/binary.dat", "binary.dat"),
    ("bench --mix nope", "--mix"),
    ("bench --workloads-file {W}/binary.dat --mix m", "binary.dat"),
    ("bench --closed-loop sideways", "--closed-loop"),
    ("bench --output-spread 1", "--output-spread"),
    ("bench --output-spread -0.1", "--output-spread"),
    ("bench --request-timeout 0", "--request-timeout"),
    ("bench --client-procs 0", "--client-procs"),
    ("bench --no-such-option", "--no-such-option"),
    ("bench --concurrency ²", "--concurrency"),  # a digit int() refuses
    ("bench --request-timeout 1e309", "--request-timeout"),  # inf: no float option means infinity
    ("bench --slo ttft_p99=2x", "--slo"),
    ("bench --endpoint grpc", "--endpoint"),
    ("bench --sessions 0", "--sessions"),
    ("bench --sessions 2,x", "--sessions"),
    ("bench --turns 3", "--turns"),
    ("bench --sessions 2 --think-time soon", "--think-time"),
    ("bench --sessions 2 --think-time 2h", "--think-time"),
    ("bench --sessions 2 --endpoint completions", "--endpoint chat"),
    ("bench --mix agentic --endpoint completions", "--endpoint chat"),  # a session workload drawn from a mix: a traceback before
    ("bench --sessions 2 --rate 1", "--rate"),
    ("bench --trace {W}/missing.jsonl", "missing.jsonl"),
    ("bench --trace {W}/binary.dat", "binary.dat"),
    ("bench --trace {W}/bad-trace.jsonl", "line 2"),
    ("bench --trace {W}/deep.jsonl", "nested deeper"),
    ("bench --trace {W}/columns.csv", "no column"),
    ("bench --trace {W}/bad-trace.jsonl --duration 5s", "--duration"),
    ("bench --trace {W}/bad-trace.jsonl --time-scale 0", "--time-scale"),
    ("bench --trace {W}/bad-trace.jsonl --trace-format csv", "--trace-format"),
    ("capacity --slo nope", "--slo"),
    ("tune recipes/vllm-docker-qwen3-8b.yaml --vary max_num_seqs=1,2", "--slo"),
    ("tune recipes/vllm-docker-qwen3-8b.yaml --slo tpot_p99=50ms", "--vary"),
    ("tune recipes/vllm-docker-qwen3-8b.yaml --slo tpot_p99=50ms --vary max_num_seq=1,2", "did you mean max_num_seqs"),
    ("tune {W}/missing.yaml --slo tpot_p99=50ms --vary max_num_seqs=1,2", "missing.yaml"),
    ("suite --slo tpot_p40=1s", "--slo"),
    ("bench --output {W}/sweep", "holds a sweep"),
    ("grid --output {W}/run", "holds a run"),  # a digit int() refuses
    ("bench --concurrency 99999999999999999999", "--concurrency"),
    ("bench --chat-template-kwargs " + '{"a":' + "[" * 20000 + "]" * 20000 + "}", "--chat-template-kwargs"),
    ("bench --dataset {W}/deep.jsonl", "nested deeper"),
    ("bench --workloads-file {W}/zero-mix.yaml --mix m", "mix"),
    ("bench --workloads-file {W}/nan-mix.yaml --mix m", "mix"),
    ("suite --only nope", "nope"),
    ("suite --runs 0", "--runs"),
    ("grid --pp x", "--pp"),
    ("grid --depth -1", "--depth"),
    ("grid --import-llama-benchy {W}/missing.csv", "missing.csv"),
    ("grid --import-llama-benchy {W}/binary.dat", "binary.dat"),
    ("serve-local --parallel 0", "--parallel"),
    ("plan", "--model"),
    ("plan --model no-such-model", "no-such-model"),
    ("plan --model qwen3-8b --hardware no-such-gpu", "no-such-gpu"),
    ("plan --model qwen3-8b --quant int3", "int3"),
    ("plan --model qwen3-8b --concurrency 0", "--concurrency"),
    ("plan --model qwen3-8b --speculative medusa:2", "--speculative"),
    ("plan --model qwen3-8b --speculative mtp:2", "--speculative"),
    ("plan --model qwen3-8b --vllm-version banana", "--vllm-version"),
    ("plan --model qwen3-8b --checkpoint-config {W}/deep.json", "--checkpoint-config"),
    ("plan --model qwen3-8b --checkpoint-config {W}/binary.dat", "--checkpoint-config"),
    ("plan --model qwen3-8b --checkpoint-config {W}/notes.txt", "--checkpoint-config"),
    ("predict --model qwen3-8b --checkpoint-config {W}/missing.json", "--checkpoint-config"),
    ("predict --model qwen3-8b --speculative medusa:2", "--speculative"),
    ("plan --model qwen3-8b --max-num-seqs 0", "--max-num-seqs"),
    ("plan --model qwen3-8b --gpu-memory-utilization 1.5", "--gpu-memory-utilization"),
    ("plan --model qwen3-8b --acceptance 2", "--acceptance"),
    ("predict --model no-such-model", "no-such-model"),
    ("predict --model qwen3-8b --concurrency 0", "--concurrency"),
    ("predict --model qwen3-8b --calibration nope", "--calibration"),
    ("predict --model qwen3-8b --output-tokens 1", "--output-tokens"),
    ("predict --model qwen3-8b --vary gpus=2", "--vary"),
    ("predict --model qwen3-8b --plot {W}/curve.png --overlay {W}/binary.dat", "binary.dat"),
    ("predict --model qwen3-8b --calibration {W}/binary.dat", "binary.dat"),
    ("predict --model qwen3-8b --calibration {W}/deep.yaml", "nested deeper"),
    ("predict --model qwen3-next-80b-a3b --hardware h200", "does not fit"),
    ("explain {W}/missing", "missing"),
    ("calibrate {W}/missing", "missing"),
    ("calibrate {W}/binary.dat", "binary.dat"),
    ("explain {W}/binary.dat", "binary.dat"),
    ("plan --model qwen3-8b --tp 3", "--tp 3"),
    ("predict --model qwen3-8b --tp 3", "--tp 3"),  # the same check at the same boundary (plan_memory): no curve for a TP vLLM refuses
    ("plan --model {W}/binary.dat", "binary.dat"),
    ("plan --model {W}/huge-config.json", "num_hidden_layers"),  # 1e30 layers: refused, not planned for ever
    ("plan --from-log {W}/missing.log", "--from-log"),
    ("plan --from-log {W}/notes.txt", "--from-log"),
    ("plan cudagraph --capture-sizes 1,x", "--capture-sizes"),
    ("lint {W}/missing.yaml", "missing.yaml"),
    ("lint {W}/binary.dat", "binary.dat"),
    ("lint recipes/llama-cpp-gemma-270m.yaml --set novalue", "novalue"),
    ("lint recipes/vllm-ray-two-sparks.yaml --hosts a,-oProxyCommand=x", "-oProxyCommand=x"),
    ("launch {W}/missing.yaml", "missing.yaml"),
    ("sweep {W}/binary.dat", "binary.dat"),
    ("compare {W}/missing", "missing"),
    ("compare {W}/run --metric nope", "--metric"),
    ("compare {W}/run --markdown " + str(READONLY / "x.md"), "--markdown"),
    ("import {W}/missing.json", "missing.json"),
    ("import {W}/binary.dat", "binary.dat"),
    ("import {W}/notes.txt", "notes.txt"),
    ("import {W}/deep.json", "nested deeper"),
    ("runs --db nope://x", "--db"),
    ("show no-such-run", "no-such-run"),
    ("show 1%", "1%"),
    ("export --output {W}/x.txt", "--output"),
    ("export --output " + str(READONLY / "x.csv"), "--output"),
    ("report {W}/run --output " + str(READONLY / "r.html"), "--output"),
    ("report no-such-run-id", "no-such-run-id"),
    ("report {W}/run -o {W}/run/run.json", "run.json"),  # an output never replaces a run's document (issue 51)
    ("report {W}/run -o {W}/run/records.jsonl", "records.jsonl"),
    ("export --output {W}/run/run.json", "run.json"),
    ("report {W}/run -o /dev/full", "not a regular file"),  # nor a device (os.replace would put a file in its place)
    ("predict --model qwen3-8b --plot /dev/null", "not a regular file"),
    ("ui --port 0", "--port"),
    ("ui --host 999.1.1.1", "--host 999.1.1.1"),
    ("bootlog {W}/missing.log", "missing.log"),
    ("bootlog {W}/binary.dat", "binary.dat"),
]


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


@pytest.mark.parametrize(("args", "needle"), CASES, ids=[c[0][:80] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(work, args, needle):
    before = snapshot(work)
    res = CliRunner().invoke(app, args.replace("{W}", str(work)).split())
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert needle in lines[0], lines[0]
    assert snapshot(work) == before  # nothing half-written


def test_every_command_is_in_the_table():
    named = {c[0].split()[0] for c in CASES}
    assert set(COMMANDS) - named == set() and "plan" in named


def test_a_second_run_on_the_same_output_is_refused(work):
    with fault_server() as url, run_lock(work / "run"):
        res = bench(url, work / "run", requests=4)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "another servelab run is writing to" in lines[0], res.output


def test_an_output_that_cannot_be_written_is_one_line():
    with fault_server() as url:
        res = bench(url, READONLY / "run", requests=4)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: --output {READONLY / 'run'}: cannot write"), res.output


def test_database_errors_are_one_line(work, tmp_path):
    db = tmp_path / "runs.db"
    assert CliRunner().invoke(app, ["import", str(work / "run"), "--db", str(db)]).exit_code == 0
    with sqlite3.connect(db) as conn:  # a run damaged in storage
        conn.execute("UPDATE runs SET document = 'not json'")
    res = CliRunner().invoke(app, ["show", "", "--db", str(db)])
    assert res.exit_code == 2 and "is damaged" in res.output and "Traceback" not in res.output, res.output
    with sqlite3.connect(db) as conn:  # written by a newer servelab
        conn.execute("UPDATE alembic_version SET version_num = 'from_the_future'")
    res = CliRunner().invoke(app, ["runs", "--db", str(db)])
    assert res.exit_code == 2 and "upgrade servelab" in res.output, res.output
    ro = read_only_db(tmp_path)
    res = CliRunner().invoke(app, ["import", str(work / "run"), "--db", ro])
    assert res.exit_code == 2 and "cannot store runs" in res.output and "Traceback" not in res.output, res.output


def read_only_db(tmp_path: Path) -> str:
    """A migrated SQLite database opened read-only (SQLite's own mode=ro: read-only for root too)."""
    path = tmp_path / "ro.db"
    assert CliRunner().invoke(app, ["runs", "--db", str(path)]).exit_code == 0
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def test_a_read_only_database_after_a_run_only_warns(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DB", read_only_db(tmp_path))
    with fault_server() as url:
        res = bench(url, tmp_path / "run", requests=4)
    assert res.exit_code == 0 and "not stored in the runs database" in res.output, res.output
    assert (tmp_path / "run" / "run.json").exists()


def test_a_huge_boot_log_line_is_read_in_linear_time(tmp_path):
    """One 760 KB line took 28 s with patterns quadratic in the line length; lines are now capped."""
    log = tmp_path / "server.log"
    log.write_text("INFO 11-20 10:00:00 [utils.py:1] non-default args: {'model': '" + "x" * 760_000 + "\n" + "INFO 11-20 10:00:01 [gpu_worker.py:1] Available KV cache memory: 10.5 GiB\n")
    start = time.perf_counter()
    res = CliRunner().invoke(app, ["bootlog", str(log), "--json"])
    assert res.exit_code == 0 and time.perf_counter() - start < 5, res.output[:300]


def test_the_leaderboard_takes_any_concurrency_text(tmp_path):
    from fastapi.testclient import TestClient

    from servelab.store.database import Store
    from servelab.report.ui import make_app

    client = TestClient(make_app(Store(f"sqlite:///{tmp_path / 'runs.db'}")))
    for value in ("²", "1" * 5000, "-1", "x"):
        assert client.get("/", params={"concurrency": value}).status_code == 200, value


def test_an_output_never_replaces_a_database(work, tmp_path):
    """report -o onto an SQLite database (the runs database, or any): refused in one line, the file byte for byte as it was."""
    db = tmp_path / "runs.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (x)")
    before = db.read_bytes()
    res = CliRunner().invoke(app, ["report", str(work / "run"), "-o", str(db)])
    assert res.exit_code == 2 and "the runs database" in res.output and "Traceback" not in res.output
    assert db.read_bytes() == before
