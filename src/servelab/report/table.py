"""Terminal tables for runs (Rich)."""

from __future__ import annotations

from rich.table import Table

from servelab.metrics.summary import Distribution, LevelSummary
from servelab.results import RunResult


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _pair(d: Distribution, a: str, b: str, digits: int = 1) -> str:
    return f"{_num(getattr(d, a), digits)} / {_num(getattr(d, b), digits)}"


def bench_table(run: RunResult) -> Table:
    """One row per concurrency level: requests (ok/failed/incomplete), latencies and throughput.

    Latencies are ms (p50 / p99 unless the header says otherwise); throughput is tok/s and req/s;
    metric definitions are in docs/metrics.md. A level with failures is shown in red.
    """
    ep = run.endpoint
    title = f"{ep.model} · {ep.engine}{' ' + ep.engine_version if ep.engine_version else ''} · {ep.url}"
    caption = (
        f"{run.load.input_tokens} prompt tokens, {run.load.output_tokens} max output tokens, prefix cache {run.load.prefix_cache}"
        f"{', ignore_eos' if run.load.ignore_eos else ''}; latencies ms, p50 / p99"
    )
    if run.ceiling:
        c = run.ceiling
        caption += f"; ceiling: {c.model} {c.quant} on {c.hardware} at {c.context_tokens} tokens of context (servelab plan)"
    table = Table(title=title, caption=caption)
    columns = [
        "conc",
        "ok / fail / inc",
        "TTFT",
        "TPOT",
        "ITL",
        "E2E",
        "decode tok/s/req p50",
        "prefill tok/s/req p50",
        "output tok/s",
        "req/s",
        "window s",
    ] + (["% of ceiling"] if run.ceiling else [])
    for name in columns:
        table.add_column(name, justify="right")
    for lv in run.levels:
        row = _row(lv) + ([_num(lv.pct_of_ceiling, 0) + " %" if lv.pct_of_ceiling is not None else "–"] if run.ceiling else [])
        table.add_row(*row, style="red" if lv.failed else None)
    return table


def _row(lv: LevelSummary) -> list[str]:
    return [
        str(lv.concurrency),
        f"{lv.ok} / {lv.failed_requests} / {lv.incomplete}",
        _pair(lv.ttft_ms, "p50", "p99"),
        _pair(lv.tpot_ms, "p50", "p99", 2),
        _pair(lv.itl_ms, "p50", "p99", 2),
        _pair(lv.e2e_ms, "p50", "p99", 0),
        _num(lv.decode_tok_s.p50),
        _num(lv.prefill_tok_s.p50),
        _num(lv.output_throughput_tok_s),
        _num(lv.request_throughput_rps, 2),
        _num(lv.window_s, 2),
    ]
