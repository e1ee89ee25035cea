"""``servelab import``, ``runs``, ``show``, ``export``, ``report`` and ``ui``: the runs database and reports."""

from __future__ import annotations

import csv
import io
import socket
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.markup import escape

from servelab.cli.common import DbOpt, console, fail, store_at, write_file
from servelab.store.imports import read_results
from servelab.report.html import compare_page, run_page
from servelab.report.table import bench_table
from servelab.store.database import METRICS as STORE_METRICS
from servelab.guards.untrusted import for_csv
from servelab.guards import jsonfile


def import_(
    paths: Annotated[list[Path], typer.Argument(help="Run directories (any depth), vllm bench serve --save-result JSON, llama-benchy JSON/CSV.", show_default=False)],
    db: DbOpt = None,
) -> None:
    """Add runs to the runs database (importing one twice replaces it; a bad file imports nothing)."""
    runs = [run for path in paths for run in read_results(path)]
    store = store_at(db)
    new = store.add(runs)
    for run, is_new in zip(runs, new, strict=True):
        console.print(f"{'added' if is_new else 'updated'} {run.id} {run.source} {run.model} ({len(run.levels)} levels) from {run.origin}", markup=False, highlight=False, soft_wrap=True)


def _filtered(db: str | None, model: str | None, engine: str | None, hardware: str | None, source: str | None) -> list:
    return store_at(db).runs(model=model, engine=engine, hardware=hardware, source=source)


ModelFilter = Annotated[str | None, typer.Option("--model", help="Only runs whose model contains this.")]
EngineFilter = Annotated[str | None, typer.Option("--engine", help="Only runs of this engine (vllm, sglang, llama.cpp, …).")]
HardwareFilter = Annotated[str | None, typer.Option("--hardware", help="Only runs whose hardware contains this.")]
SourceFilter = Annotated[str | None, typer.Option("--source", help="Only runs from servelab, vllm-bench-serve or llama-benchy.")]


def runs(db: DbOpt = None, model: ModelFilter = None, engine: EngineFilter = None, hardware: HardwareFilter = None, source: SourceFilter = None) -> None:
    """List stored runs, newest first (best output tok/s over their levels)."""
    found = _filtered(db, model, engine, hardware, source)
    table = Table(title=f"{len(found)} runs")
    for name in ("id", "started", "source", "model", "engine", "hardware", "variant", "status", "levels", "failed requests", "best output tok/s"):
        table.add_column(name, justify="right" if name in ("levels", "failed requests", "best output tok/s") else "left")
    for r in found:
        best = max((lv.output_tok_s for lv in r.levels if lv.output_tok_s is not None), default=None)
        failed = sum(lv.failed for lv in r.levels)  # a run whose levels lost requests reads "complete" too: its figures cover the successful ones
        cells = [r.id, (r.started_at or "")[:19], r.source, r.model, r.engine, r.hardware, r.variant or "", r.status, str(len(r.levels)), str(failed)]
        table.add_row(*map(escape, cells), "–" if best is None else f"{best:,.1f}")  # fmt: skip
    console.print(table)


def show(run_id: Annotated[str, typer.Argument(help="A run id from `servelab runs` (a unique prefix is enough).", show_default=False)], db: DbOpt = None) -> None:
    """Print one stored run: its settings and every level."""
    run = store_at(db).get(run_id)
    console.print(f"[bold]{escape(run.model)}[/] · " + escape(f"{run.engine} {run.engine_version or ''} · {run.hardware} · {run.source} · {run.status}"), highlight=False)
    console.print(f"id {run.id} · started {run.started_at or '?'} · from {run.origin}", markup=False, highlight=False, soft_wrap=True)
    if run.source == "servelab":
        console.print(bench_table(run.result()))
        return
    shown = [m for m in STORE_METRICS if any(getattr(lv, m) is not None for lv in run.levels)]
    table = Table()
    for name in ("level", "ok / failed", *shown):  # the failed requests the file reported, beside the figures of the ones that succeeded
        table.add_column(name, justify="right")
    for lv in run.levels:
        table.add_row(escape(lv.label), f"{lv.ok} / {lv.failed}", *[("–" if getattr(lv, m) is None else f"{getattr(lv, m):,.2f}") for m in shown])
    console.print(table)


def export(
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write; .csv or .json.", show_default=False)],
    db: DbOpt = None, model: ModelFilter = None, engine: EngineFilter = None, hardware: HardwareFilter = None, source: SourceFilter = None,
) -> None:  # fmt: skip
    """Write stored runs as CSV or JSON: one row per (run, level) with the run's fields and the level's figures."""
    if output.suffix.lower() not in (".csv", ".json"):
        fail(f"--output {output}: give a .csv or .json file name")
    found = _filtered(db, model, engine, hardware, source)
    keys = ["id", "source", "origin", "started_at", "status", "model", "engine", "engine_version", "hardware", "host", "recipe", "variant",
            "input_tokens", "output_tokens", "prefix_cache", "traffic"]  # fmt: skip
    rows = [{**{k: getattr(r, k) for k in keys}, "level": lv.label, "concurrency": lv.concurrency, "rate_rps": lv.rate_rps, "ok": lv.ok,
             "failed": lv.failed, **{m: getattr(lv, m) for m in STORE_METRICS}} for r in found for lv in r.levels]  # fmt: skip
    if output.suffix.lower() == ".json":
        text = jsonfile.dumps(rows, indent=1)
    else:
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=[*keys, "level", "concurrency", "rate_rps", "ok", "failed", *STORE_METRICS])
        writer.writeheader()
        writer.writerows({k: for_csv(v) for k, v in row.items()} for row in rows)
        text = buffer.getvalue()
    write_file(output, text, "--output")
    console.print(f"{len(rows)} rows of {len(found)} runs written to {output}")


def report(
    runs_: Annotated[list[str], typer.Argument(metavar="RUN...", help="Run directories, sweep/suite/grid directories, or stored run ids.", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("servelab-report.html"),
    db: DbOpt = None,
) -> None:
    """Write a self-contained HTML report (tables, plots, findings, environment): one run, or a comparison of several."""
    found = []
    for item in runs_:
        found += read_results(Path(item)) if Path(item).exists() else [store_at(db).get(item)]
    page = run_page(found[0]) if len(found) == 1 else compare_page(found)
    write_file(output, page, "--output")
    console.print(f"report of {len(found)} run(s) written to {output}")


def ui(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Interface to listen on (loopback by default: the page has no login).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8765,
) -> None:
    """Serve the leaderboard of stored runs, run pages and comparisons on a local web page until Ctrl-C."""
    import uvicorn

    from servelab.report.ui import make_app

    try:
        store = store_at(db)
        store.runs()  # a damaged database is one line now, not a page that fails later
        app_ = make_app(store)
        with socket.create_server((host, port)):  # the address is usable (uvicorn binds it again at once)
            pass
    except OSError as exc:
        fail(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})")
    console.print(f"leaderboard at [bold]{escape(f'http://{host}:{port}/')}[/] (Ctrl-C to stop)", soft_wrap=True)
    uvicorn.run(app_, host=host, port=port, log_level="warning")
