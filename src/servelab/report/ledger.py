"""The tuning ledger (``servelab compare``): runs side by side, one table per metric.

Rows are runs (a sweep's variants, or run directories given one by one), columns the load levels
(concurrency, or arrival rate for open-loop runs). Each cell is the level's value and its Δ%
against the baseline run at the same level; the best value of each column is marked. Δ% and
"best" are defined in docs/metrics.md ("Ledger").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from rich.markup import escape
from tabulate import tabulate

from servelab.errors import ServelabError
from servelab.metrics.repeats import Interval, interval
from servelab.metrics.summary import LevelSummary
from servelab.store.results import RunResult, SweepIndex, VariantStatus, read_document


@dataclass(frozen=True)
class Metric:
    """One ledger metric: its title, unit, direction and where it comes from in a level summary."""

    title: str
    unit: str
    higher_is_better: bool
    get: Callable[[LevelSummary], float | None]


# Definitions: docs/metrics.md (each names the same field of LevelSummary).
METRICS = {
    "output_tok_s": Metric("output throughput", "tok/s", True, lambda lv: lv.output_throughput_tok_s),
    "request_rps": Metric("request throughput", "req/s", True, lambda lv: lv.request_throughput_rps),
    "ttft_p50": Metric("TTFT p50", "ms", False, lambda lv: lv.ttft_ms.p50),
    "ttft_p99": Metric("TTFT p99", "ms", False, lambda lv: lv.ttft_ms.p99),
    "tpot_p50": Metric("TPOT p50", "ms", False, lambda lv: lv.tpot_ms.p50),
    "itl_p99": Metric("ITL p99", "ms", False, lambda lv: lv.itl_ms.p99),
    "e2e_p50": Metric("E2E latency p50", "ms", False, lambda lv: lv.e2e_ms.p50),
    "decode_tok_s_p50": Metric("decode tok/s per request p50", "tok/s", True, lambda lv: lv.decode_tok_s.p50),
    "goodput_rps": Metric("goodput (--slo)", "req/s", True, lambda lv: lv.slo.goodput_rps if lv.slo else None),
    "slo_attainment": Metric("share of requests within the SLOs", "", True, lambda lv: lv.slo.attainment if lv.slo else None),
}
DEFAULT_METRICS = ["output_tok_s", "ttft_p50", "tpot_p50", "ttft_p99"]


@dataclass
class Entry:
    """One row: a run, or a variant that produced none (failed to start)."""

    label: str
    run: RunResult | None
    status: str  # complete, partial, failed-to-start


def _read(directory: Path) -> Entry:
    """The entry of one run directory, or of a variant that has no run (failed to start)."""
    if (directory / "run.json").is_file():
        run = read_document(RunResult, directory / "run.json")
        return Entry(run.recipe.variant if run.recipe else directory.name, run, run.status)
    variant = read_document(VariantStatus, directory / "variant.json")
    return Entry(variant.variant, None, variant.status)


def collect(paths: list[Path]) -> list[Entry]:
    """The ledger's rows, in order: each path is a run directory, or a sweep directory (its
    variants in sweep order), or a folder of run directories (sorted by name).

    Raises:
        ServelabError: a path is none of these (naming it), or a file in it is malformed.
    """
    entries: list[Entry] = []
    for path in paths:
        if (path / "run.json").is_file() or (path / "variant.json").is_file():
            entries.append(_read(path))
        elif (path / "sweep.json").is_file():
            index = read_document(SweepIndex, path / "sweep.json")
            entries += [_read(path / d) for d in index.directories if (path / d).is_dir()]
        elif path.is_dir() and (subs := sorted(d for d in path.iterdir() if (d / "run.json").is_file())):
            entries += [_read(d) for d in subs]
        else:
            raise ServelabError(f"{path}: not a run or sweep directory (no run.json, variant.json or sweep.json)")
    if not entries:
        raise ServelabError("nothing to compare: the sweep has no variant directories yet")
    labels = [e.label for e in entries]
    for i, e in enumerate(entries):  # the same variant name from two sweeps: tell them apart
        if labels.count(e.label) > 1:
            e.label = f"{e.label} #{labels[: i + 1].count(e.label)}"
    return entries


def default_baseline(entries: list[Entry]) -> int:
    """The first entry with measured levels (a failed first variant cannot be the reference)."""
    return next((i for i, e in enumerate(entries) if e.run and e.run.levels), 0)


# What a run's load says about the work of each request and how it was sent (LoadSpec fields, in words):
# two runs apart in any of them measured different work, so their Δ% is not a tuning gain (docs/metrics.md "Ledger").
LOAD_FIELDS = {
    "input_tokens": "prompt tokens", "output_tokens": "output tokens", "output_spread": "output spread", "endpoint": "API",
    "traffic": "traffic", "mix": "mix", "turns": "turns", "prefix_cache": "prefix cache", "shared_prefix_tokens": "shared prefix tokens",
    "ignore_eos": "ignore_eos",
}  # fmt: skip


def _load_facts(run: RunResult) -> dict[str, object]:
    """The run's load by ``LOAD_FIELDS``, plus how closed-loop streams started and the trace's file."""
    load = run.load
    facts: dict[str, object] = {name: getattr(load, name) for name in LOAD_FIELDS}
    if not load.rates and load.trace is None:
        facts["closed_loop"] = load.closed_loop
    if load.trace is not None:
        facts["trace"] = load.trace.file
    return facts


def load_differences(entries: list[Entry], baseline: int) -> list[str]:
    """For each run whose load differs from the baseline run's, one line naming the differences
    (``"b: prompt tokens 512 (a: 64), output tokens 64 (a: 16)"``); empty when all were measured
    alike (a sweep's variants always are)."""
    base = entries[baseline]
    if base.run is None:
        return []
    ref = _load_facts(base.run)
    names = {**LOAD_FIELDS, "closed_loop": "closed loop", "trace": "trace"}
    out = []
    for e in entries:
        if e.run is None or e is base:
            continue
        facts = _load_facts(e.run)
        diff = [f"{names[k]} {v} ({base.label}: {ref.get(k, '–')})" for k, v in facts.items() if k not in ref or ref[k] != v]
        if diff:
            out.append(f"{e.label}: {', '.join(diff)}")
    return out


def _level(lv: LevelSummary) -> tuple[tuple, str]:
    """Sort key and column title of a level: closed-loop concurrencies first, then rates."""
    if lv.rate_rps is not None:
        return (1, lv.rate_rps), f"{lv.rate_rps:g} req/s"
    return (0, lv.concurrency), f"c={lv.concurrency}"


@dataclass
class Cell:
    """One value of the ledger."""

    value: float | None  # the level's value, or its mean over repeats (bench --repeats)
    delta_pct: float | None = None  # vs the baseline at the same level
    best: bool = False
    failed: bool = False  # requests failed at this level
    jit: bool = False  # the server compiled a kernel during the level (finding jit_compile): not a measurement, never the best
    interval: Interval | None = None  # 95 % confidence interval over repeats (metrics/repeats.py), 2 or more
    significant: bool | None = None  # both sides repeated: the intervals do not overlap (None: cannot tell)


@dataclass
class Ledger:
    """One metric's table: columns are levels, rows are entries (cells, or a reason they have none)."""

    metric: Metric
    columns: list[str]
    rows: list[tuple[str, list[Cell] | str]]  # (label, cells, or why there are none)
    baseline: int  # index of the baseline row


def build(entries: list[Entry], metric: Metric, baseline: int = 0) -> Ledger:
    """The ledger of ``metric`` with ``entries[baseline]`` as the Δ% reference (docs/metrics.md "Ledger")."""
    keys: dict[tuple, str] = {}
    for e in entries:
        for lv in e.run.levels if e.run else []:
            key, title = _level(lv)
            keys[key] = title
    order = sorted(keys)
    table: list[dict[tuple, list[LevelSummary]]] = []
    for e in entries:
        grouped: dict[tuple, list[LevelSummary]] = {}
        for lv in e.run.levels if e.run else []:
            grouped.setdefault(_level(lv)[0], []).append(lv)
        table.append(grouped)
    base = table[baseline]
    rows: list[tuple[str, list[Cell] | str]] = []
    for e, levels in zip(entries, table, strict=True):
        if e.run is None:
            rows.append((e.label, f"{e.status.replace('-', ' ')} (the error is in its variant.json)"))
            continue
        cells = []
        for key in order:
            value, spread = _mean(metric, levels.get(key, []))
            ref, ref_spread = _mean(metric, base.get(key, []))
            delta = 100.0 * (value - ref) / ref if value is not None and ref else None
            significant = None if spread is None or ref_spread is None else not spread.overlaps(ref_spread)
            cells.append(Cell(value, delta, failed=any(lv.failed for lv in levels.get(key, [])), interval=spread, significant=significant,
                              jit=any(lv.jit_kernels for lv in levels.get(key, []))))  # fmt: skip
        rows.append((e.label + ("" if e.status == "complete" else f" ({e.status})"), cells))
    for col in range(len(order)):
        column = [cells[col] for _, cells in rows if not isinstance(cells, str) and cells[col].value is not None and not cells[col].jit]
        if len(column) > 1:
            pick = max if metric.higher_is_better else min
            best = pick(c.value for c in column)
            for c in column:
                c.best = c.value == best
    return Ledger(metric, [keys[k] for k in order], rows, baseline)


def _mean(metric: Metric, levels: list[LevelSummary]) -> tuple[float | None, Interval | None]:
    """A level's value, or over its repeats their mean and 95 % confidence interval."""
    values = [v for lv in levels if (v := metric.get(lv)) is not None]
    if not values:
        return None, None
    ci = interval(values)
    return ci.mean, ci if len(values) > 1 else None


def cell_text(cell: Cell, is_base: bool) -> str:
    """A ledger cell as text: value (± its interval over repeats), then (base) or (Δ%, "within
    noise" when both sides were repeated and their intervals overlap), then † when requests failed,
    ‡ when the server compiled a kernel during the level (not a measurement)."""
    if cell.value is None:
        return "–"
    digits = 1 if abs(cell.value) >= 10 else 2
    text = f"{cell.value:,.{digits}f}" + (f" ± {cell.interval.half_width:,.{digits}f}" if cell.interval else "")
    if is_base:
        text += " (base)"
    elif cell.delta_pct is not None:
        text += f" ({cell.delta_pct:+.1f}%{', within noise' if cell.significant is False else ''})"
    return text + ("†" if cell.failed else "") + ("‡" if cell.jit else "")


def ledger_table(ledger: Ledger) -> Table:
    """The ledger as a Rich table: best per column in bold green with ★, failed levels marked †, levels with a JIT compile ‡."""
    m = ledger.metric
    direction = "higher" if m.higher_is_better else "lower"
    table = Table(title=escape(f"{m.title}, {m.unit} ({direction} is better; Δ% vs {ledger.rows[ledger.baseline][0]})"))
    table.add_column("run")
    for col in ledger.columns:
        table.add_column(col, justify="right")
    for i, (label, cells) in enumerate(ledger.rows):
        if isinstance(cells, str):
            table.add_row(escape(label), f"[red]{escape(cells)}[/]", *[""] * (len(ledger.columns) - 1))
            continue
        is_base = i == ledger.baseline
        table.add_row(escape(label), *[f"[bold green]{cell_text(c, is_base)} ★[/]" if c.best else cell_text(c, is_base) for c in cells])
    return table


def ledger_markdown(ledgers: list[Ledger], differences: list[str] | None = None) -> str:
    """The ledgers as Markdown: a heading and a GitHub table each; best per column in bold with ★;
    ``differences`` (:func:`load_differences`) as a warning after them."""
    parts = []
    for ledger in ledgers:
        m = ledger.metric
        rows = []
        for i, (label, cells) in enumerate(ledger.rows):
            if isinstance(cells, str):
                rows.append([label, cells, *[""] * (len(ledger.columns) - 1)])
                continue
            is_base = i == ledger.baseline
            rows.append([label, *[f"**{cell_text(c, is_base)}** ★" if c.best else cell_text(c, is_base) for c in cells]])
        heading = f"### {m.title}, {m.unit} ({'higher' if m.higher_is_better else 'lower'} is better; Δ% vs {ledger.rows[ledger.baseline][0]})"
        parts.append(heading + "\n\n" + tabulate(rows, headers=["run", *ledger.columns], tablefmt="github", disable_numparse=True))
    failed = any(c.failed for ledger in ledgers for _, cells in ledger.rows if not isinstance(cells, str) for c in cells)
    jit = any(c.jit for ledger in ledgers for _, cells in ledger.rows if not isinstance(cells, str) for c in cells)
    notes = ("\n\n† requests failed at this level (see the run)." if failed else "") + (
        "\n\n‡ the server compiled a kernel during this level (finding jit_compile): not a measurement." if jit else "")
    if differences:
        notes += "\n\n**Measured under different loads** (Δ% compares different work): " + "; ".join(differences) + "."
    return "\n\n".join(parts) + notes + "\n"
