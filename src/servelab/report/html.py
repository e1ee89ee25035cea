"""HTML pages for stored runs: one run, a comparison, and the leaderboard (Jinja2, autoescaped).

Each page is one self-contained file: styles inline and plots as PNG data URIs, so it opens
without a network. Every text that came from a model, a server or a file (model names, log
lines, findings, error messages) goes through Jinja2's HTML escaping.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from servelab import __version__
from servelab.metrics.turns import TurnStats
from servelab.values.records import RequestRecord
from servelab.report import plots
from servelab.report.ledger import DEFAULT_METRICS, METRICS, Entry, build, cell_text, default_baseline, load_differences
from servelab.store.results import load_run
from servelab.store.database import Level, Run
from servelab.guards.untrusted import plain
from servelab.errors import ServelabError

ENV = Environment(loader=PackageLoader("servelab", "report/templates"), autoescape=select_autoescape(default=True),
                  finalize=lambda v: plain(v) if isinstance(v, str) else v)  # escaped, and no control characters (servelab.guards.untrusted)

# Level columns of the tables (store column, title); docs/metrics.md defines each.
COLUMNS = [
    ("output_tok_s", "output tok/s"), ("request_rps", "req/s"), ("decode_tok_s_p50", "per-user tok/s p50"),
    ("decode_tok_s_mean", "per-user tok/s mean"), ("ttft_ms_p50", "TTFT p50 ms"), ("ttft_ms_p99", "TTFT p99 ms"),
    ("ttft_ms_mean", "TTFT mean ms"), ("tpot_ms_p50", "TPOT p50 ms"), ("tpot_ms_p99", "TPOT p99 ms"), ("itl_ms_p99", "ITL p99 ms"),
    ("e2e_ms_p50", "E2E p50 ms"), ("goodput_rps", "goodput req/s"), ("goodput_tok_s", "goodput tok/s"), ("slo_attainment", "SLO met"),
]  # fmt: skip
HIGHER_IS_BETTER = {"output_tok_s", "request_rps", "decode_tok_s_p50", "decode_tok_s_mean", "goodput_rps", "goodput_tok_s", "slo_attainment"}


def fmt(value: float | None) -> str:
    """A number for a table cell ("–" when missing)."""
    if value is None:
        return "–"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def _columns(levels: list[Level]) -> list[tuple[str, str]]:
    """The columns that have a value in at least one level."""
    return [(k, t) for k, t in COLUMNS if any(getattr(lv, k) is not None for lv in levels)]


def _b64(png: bytes | None) -> str | None:
    return base64.b64encode(png).decode() if png else None


def records_of(run: Run) -> list[RequestRecord]:
    """The request records of a servelab run, read from its run directory (empty when gone)."""
    if run.source != "servelab" or not (Path(run.origin) / "run.json").is_file():
        return []
    try:
        return load_run(Path(run.origin))[1]
    except (OSError, ValueError, ServelabError):
        return []


def _facts(run: Run) -> tuple[list[tuple[str, list[tuple[str, str]]]], list[dict], str | None]:
    """Key/value sections (environment, endpoint, load, recipe, boot log), findings and the partial reason of a servelab run;
    for an imported file its top-level scalar fields."""
    doc = run.doc()
    if run.source != "servelab":
        scalars = [(k, str(v)) for k, v in doc.items() if not isinstance(v, (list, dict))]
        return [(f"{run.source} file", [("file", run.origin), *scalars])], [], None
    sections = []
    for key in ("environment", "endpoint", "load", "recipe", "boot", "prompt_check", "ceiling"):
        value = doc.get(key)
        if isinstance(value, dict):
            sections.append((key, [(k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in value.items() if v is not None]))
    sections.append(("run directory", [("path", run.origin), ("notes", "; ".join(doc.get("notes", [])))]))
    return sections, doc.get("findings", []), doc.get("partial_reason") if doc.get("status") != "complete" else None


def _turns(run: Run) -> list[tuple[int, TurnStats, str]]:
    """The per-turn rows of a servelab run's sessions (level, turn, the level's end reasons on its first row)."""
    if run.source != "servelab":
        return []
    rows = []
    for lv in run.result().levels:
        if lv.sessions is not None:
            ended = ", ".join(f"{k} {n}" for k, n in lv.sessions.ended.items())
            rows += [(lv.concurrency, t, ended if i == 0 else "") for i, t in enumerate(lv.sessions.turns)]
    return rows


def run_page(run: Run, links: bool = False) -> str:
    """One run: header, levels, findings, plots (throughput, latency, distributions, Pareto), environment."""
    pngs = [("throughput vs concurrency", plots.throughput([run])), ("latency vs concurrency", plots.latency([run])),
            ("latency distributions", plots.distributions(records_of(run))), ("per-user vs aggregate", plots.pareto([run]))]  # fmt: skip
    facts, findings, partial = _facts(run)
    return ENV.get_template("run.html").render(
        title=f"servelab · {run.model} · {run.id}", run=run, rows=[(run, lv) for lv in run.levels], columns=_columns(run.levels), turns=_turns(run),
        show_run=False, plots=[(n, _b64(p)) for n, p in pngs if p], facts=facts, findings=findings, partial_reason=partial,
        links=links, fmt=fmt, run_label=plots.run_name, version=__version__,
    )  # fmt: skip


def compare_page(runs: list[Run], links: bool = False) -> str:
    """Several runs side by side: for servelab runs the Δ% ledger (``servelab compare``), then a
    table of every level and the cross-run plots."""
    pngs = [("throughput vs concurrency", plots.throughput(runs)), ("latency vs concurrency", plots.latency(runs)),
            ("per-user vs aggregate (Pareto)", plots.pareto(runs))]  # fmt: skip
    rows = [(run, lv) for run in runs for lv in run.levels]
    ledgers, differences = [], []
    if len(runs) > 1 and all(r.source == "servelab" for r in runs):  # the Δ% ledger of servelab compare
        entries = [Entry(plots.run_name(r), r.result(), r.status) for r in runs]
        ledgers = [build(entries, METRICS[m], default_baseline(entries)) for m in DEFAULT_METRICS]
        differences = load_differences(entries, default_baseline(entries))
    return ENV.get_template("compare.html").render(
        ledgers=ledgers, cell_text=cell_text, differences=differences,
        title=f"servelab · comparison of {len(runs)} runs", runs=runs, rows=rows, columns=_columns([lv for _, lv in rows]), show_run=True,
        plots=[(n, _b64(p)) for n, p in pngs], links=links, fmt=fmt, run_label=plots.run_name, version=__version__,
    )  # fmt: skip


def leaderboard_rows(runs: list[Run], concurrency: int | None, sort: str, order: str) -> list[tuple[Run, Level]]:
    """Every (run, level), optionally at one concurrency, sorted by a level column (missing values last)."""
    rows = [(run, lv) for run in runs for lv in run.levels if concurrency is None or lv.concurrency == concurrency]
    known = [r for r in rows if getattr(r[1], sort) is not None]
    known.sort(key=lambda r: getattr(r[1], sort), reverse=order == "desc")
    return known + [r for r in rows if getattr(r[1], sort) is None]


def leaderboard_page(
    runs: list[Run], rows: list[tuple[Run, Level]], filters: dict, sort: str, order: str, sort_url: Callable[[str], str]
) -> str:
    """The leaderboard: filter form, sortable columns, a compare button for ticked runs."""
    choices = {name: sorted({getattr(r, name) for r in runs}) for name in ("model", "engine", "hardware")}
    choices["concurrency"] = sorted({lv.concurrency for r in runs for lv in r.levels if lv.concurrency})
    return ENV.get_template("leaderboard.html").render(
        title="servelab leaderboard", rows=rows, run_count=len({r.id for r, _ in rows}), columns=COLUMNS, filters=filters,
        choices=choices, sort=sort, order=order, sort_url=sort_url, links=False, fmt=fmt, version=__version__,
    )  # fmt: skip
