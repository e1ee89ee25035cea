"""The runs database: imports (servelab runs, vllm bench serve, llama-benchy), no duplicates,
clear errors that import nothing, export, the CLI, and the same store on a real PostgreSQL."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.store.imports import read_results
from servelab.store.database import Store, database_url

FIXTURES = Path(__file__).parent / "fixtures"
RUN = FIXTURES / "runs" / "vllm-0.25-h100-qwen3-8b-run.json"
LB_JSON = FIXTURES / "imports" / "llama-benchy-0.4.0-gemma-270m.json"
LB_CSV = FIXTURES / "imports" / "llama-benchy-0.4.0-gemma-270m.csv"
VLLM = sorted((FIXTURES / "imports").glob("vllm-bench-serve-*.json"))
cli = CliRunner()


def run_dir(tmp_path: Path, name: str = "run") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True)
    shutil.copy(RUN, d / "run.json")
    return d


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(database_url(str(tmp_path / "runs.db")))


def test_a_servelab_run_is_stored_once_and_reimport_replaces_it(tmp_path, store):
    d = run_dir(tmp_path)
    assert store.add(read_results(d)) == [True]
    assert store.add(read_results(d)) == [False]
    (stored,) = store.runs()
    assert (stored.source, stored.engine, stored.model, stored.hardware) == ("servelab", "vllm", "qwen3-8b", "NVIDIA H100 SXM5 80GB")
    doc = json.loads(RUN.read_text())
    first = doc["levels"][0]
    assert stored.levels[0].label == f"c={first['concurrency']}"
    assert stored.levels[0].output_tok_s == pytest.approx(first["output_throughput_tok_s"])
    assert stored.levels[0].ttft_ms_p99 == pytest.approx(first["ttft_ms"]["p99"])
    doc["levels"] = doc["levels"][:1]  # the same run, rewritten (a resumed run keeps its started_at)
    (d / "run.json").write_text(json.dumps(doc))
    store.add(read_results(d))
    assert [len(r.levels) for r in store.runs()] == [1]


def test_llama_benchy_json_and_csv_written_by_llama_benchy(store):
    as_json, as_csv = read_results(LB_JSON)[0], read_results(LB_CSV)[0]
    store.add([as_json, as_csv])
    assert [lv.label for lv in as_csv.levels] == ["pp128 tg16 (c1)", "pp128 tg16 (c2)", "pp256 tg16 (c1)", "pp256 tg16 (c2)"]
    c2 = as_csv.levels[1]
    assert (c2.concurrency, c2.output_tok_s, c2.decode_tok_s_mean, c2.ttft_ms_mean) == pytest.approx((2, 42.24291882134895, 28.167869244363157, 414.2826110000897))
    assert as_json.model == "google/gemma-3-270m" and as_json.started_at == "2026-11-21T08:48:00+00:00"
    assert as_json.levels[0].output_tok_s == pytest.approx(27.086168504765887) and as_json.levels[0].ttft_ms_p50 is None
    assert store.add(read_results(LB_JSON)) == [False]  # the same file again: no duplicate
    assert len(store.runs(source="llama-benchy")) == 2


@pytest.mark.skipif(not VLLM, reason="no vllm bench serve fixture")
def test_vllm_bench_serve_results_written_by_vllm(store):
    runs = [r for f in VLLM for r in read_results(f)]
    store.add(runs)
    data = json.loads(VLLM[0].read_text())
    (level,) = runs[0].levels
    assert runs[0].source == "vllm-bench-serve" and runs[0].model == data["model_id"]
    assert level.concurrency == data["max_concurrency"] and level.ok == data["completed"]
    assert level.output_tok_s == pytest.approx(data["output_throughput"]) and level.ttft_ms_p50 == pytest.approx(data["median_ttft_ms"])
    assert level.itl_ms_p99 == pytest.approx(data["p99_itl_ms"]) and level.decode_tok_s_p50 == pytest.approx(1000 / data["median_tpot_ms"])
    assert level.e2e_ms_p50 is None  # not in the file (vllm bench serve's default --percentile-metrics)
    assert [r.levels[0].label for r in runs] == ["c=1", "c=8"] and runs[0].started_at.startswith("2026-11-21T")
    assert store.add(read_results(VLLM[0])) == [False]


@pytest.mark.parametrize(("content", "message"), [
    ('{"foo": 1}', "JSON of an unknown kind"),
    ('{"schema_version": 3, "levels": []}', "a servelab run.json under another name; give its run directory"),
    ('{"benchmarks": [', "not JSON, CSV or Markdown"),
    ('{"model_id": "m", "output_throughput": 1.0}', "looks like a vllm bench serve result but has no 'completed'"),
    ('{"model_id": "m", "output_throughput": "fast", "completed": 3, "median_ttft_ms": 1}', "'output_throughput' is 'fast', not a number"),
    ('{"version": "0.4.0", "benchmarks": [{"concurrency": 1}]}', "llama-benchy test 1 lacks"),
])  # fmt: skip
def test_a_malformed_or_foreign_file_is_one_line_and_imports_nothing(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    res = cli.invoke(app, ["import", str(run_dir(tmp_path)), str(bad), "--db", str(tmp_path / "db.sqlite")])
    assert res.exit_code == 2 and message in " ".join(res.output.split()) and str(bad.name) in res.output and "Traceback" not in res.output
    assert Store(database_url(str(tmp_path / "db.sqlite"))).runs() == []  # the good run before it was not stored either


def test_a_broken_run_json_and_an_empty_folder_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ServelabError, match="no servelab run in it"):
        read_results(tmp_path / "empty")
    d = run_dir(tmp_path)
    (d / "run.json").write_text('{"schema_version": 1, "levels": []}')
    with pytest.raises(ServelabError, match=r"run.json: not a servelab run.json document"):
        read_results(tmp_path)


def test_cli_import_runs_show_export(tmp_path):
    db = str(tmp_path / "db.sqlite")
    res = cli.invoke(app, ["import", str(run_dir(tmp_path)), str(LB_CSV), "--db", db])
    assert res.exit_code == 0 and res.output.count("added") == 2
    listing = cli.invoke(app, ["runs", "--db", db, "--engine", "vllm"])
    assert listing.exit_code == 0 and "qwen3-8b" in listing.output and "gemma" not in listing.output
    run_id = read_results(LB_CSV)[0].id
    shown = cli.invoke(app, ["show", run_id[:6], "--db", db])
    assert shown.exit_code == 0 and "pp128 tg16" in " ".join(shown.output.split())
    assert "no run 'zzz'" in cli.invoke(app, ["show", "zzz", "--db", db]).output
    out = tmp_path / "all.csv"
    assert cli.invoke(app, ["export", "-o", str(out), "--db", db]).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("id,source,origin") and len(lines) == 1 + 4 + len(json.loads(RUN.read_text())["levels"])
    rows = json.loads((cli.invoke(app, ["export", "-o", str(tmp_path / "all.json"), "--db", db]), (tmp_path / "all.json").read_text())[1])
    assert {r["source"] for r in rows} == {"servelab", "llama-benchy"}
    assert "give a .csv or .json" in cli.invoke(app, ["export", "-o", str(tmp_path / "x.txt"), "--db", db]).output
    failing = json.loads(VLLM[-1].read_text()) | {"completed": 28, "failed": 4}  # vllm bench serve's own count of failed requests
    (tmp_path / "vb.json").write_text(json.dumps(failing))
    assert cli.invoke(app, ["import", str(tmp_path / "vb.json"), "--db", db]).exit_code == 0
    shown = cli.invoke(app, ["show", read_results(tmp_path / "vb.json")[0].id, "--db", db])
    assert "ok / failed" in shown.output and "28 / 4" in shown.output
    listing = cli.invoke(app, ["runs", "--db", db, "--source", "vllm-bench-serve"])
    row = next(line for line in listing.output.splitlines() if "vllm-bench-serve" in line)
    assert "failed requests" in listing.output and [c.strip() for c in row.split("│")][-3:-1] == ["4", "1,030.3"]


def test_a_bad_database_url_is_one_line(tmp_path):
    res = cli.invoke(app, ["runs", "--db", "nosuchdriver://u:secret@h/db"])
    assert res.exit_code == 2 and "not a usable database URL" in res.output and "secret" not in res.output
    res = cli.invoke(app, ["runs", "--db", "postgresql+psycopg://u:secret@127.0.0.1:1/db"])
    assert res.exit_code == 2 and "cannot open it" in res.output and "u:***@127.0.0.1" in res.output and "secret" not in res.output


def _postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres_url():
    """A real PostgreSQL server on loopback, started for these tests (Debian's postgresql package;
    as root it runs as the 'postgres' user)."""
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (Debian package postgresql)")
    data = Path(tempfile.mkdtemp(prefix="servelab-pg-", dir="/tmp"))
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    sock = data / "sock"
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "servelab"], check=True, capture_output=True)
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*as_user, "mkdir", str(sock)], check=True)
    subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data / "db"), "-l", str(data / "log"), "-w", "-o",
                    f"-p {port} -k {sock} -c listen_addresses=127.0.0.1", "start"], check=True, capture_output=True)  # fmt: skip
    try:
        yield f"postgresql+psycopg://servelab@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def test_the_same_store_on_postgresql(tmp_path, postgres_url):
    pg = Store(postgres_url)
    assert pg.add(read_results(run_dir(tmp_path)) + read_results(LB_JSON)) == [True, True]
    assert pg.add(read_results(LB_JSON)) == [False]
    assert Store(postgres_url).add(read_results(LB_CSV)) == [True]  # reopening runs the migrations again: nothing to do
    assert sorted(r.source for r in pg.runs()) == ["llama-benchy", "llama-benchy", "servelab"]
    assert pg.get(read_results(LB_CSV)[0].id[:8]).levels[1].label == "pp128 tg16 (c2)"


def test_run_ids_and_filters_are_text_not_like_patterns(tmp_path, store):
    store.add(read_results(run_dir(tmp_path)))
    (stored,) = store.runs()
    assert store.get(stored.id[:4]).id == stored.id
    for pattern in ("%", "_", stored.id[:3] + "%"):
        with pytest.raises(ServelabError, match="no run"):
            store.get(pattern)
    assert store.runs(model="%") == [] and store.runs(model="_") == [] and len(store.runs(model="qwen3")) == 1


@pytest.mark.parametrize(("key", "value", "message"), [
    ("output_throughput", "fast", "'output_throughput' is 'fast', not a number ≥ 0"),
    ("median_ttft_ms", -5, "'median_ttft_ms' is -5, not a number ≥ 0"),
    ("max_concurrency", "x", "'max_concurrency' is 'x'"),
])  # fmt: skip
def test_vllm_results_with_bad_figures_are_one_error(tmp_path, key, value, message):
    doc = json.loads(VLLM[0].read_text())
    doc[key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ServelabError, match=message):
        read_results(path)


def test_llama_benchy_csv_without_some_columns_reads_them_as_empty(tmp_path):
    rows = [line.split(",")[:3] for line in LB_CSV.read_text().splitlines()]  # model, test_name, t_s_mean only
    path = tmp_path / "lb.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    (run,) = read_results(path)
    assert run.levels and all(lv.output_tok_s is not None for lv in run.levels)
    path.write_bytes(b"\xff\xfe" + LB_CSV.read_bytes())
    with pytest.raises(ServelabError, match="not a text file"):
        read_results(path)


def test_the_migration_lock_lies_beside_an_sqlite_file_a_uri_included(tmp_path):
    """A read-only ``file:`` URI's lock goes beside the file, not into a ``file:`` folder in the working directory."""
    from servelab.store.database import _lock_path

    assert _lock_path(f"sqlite:///file:{tmp_path}/ro.db?mode=ro&uri=true") == f"{tmp_path}/ro.db.lock"
    assert _lock_path(f"sqlite:///{tmp_path}/runs.db") == f"{tmp_path}/runs.db.lock"
    assert not _lock_path("sqlite:///:memory:").startswith(":memory:")
