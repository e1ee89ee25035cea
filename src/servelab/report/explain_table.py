"""Tables of ``servelab explain`` (and of ``servelab bench --hardware`` on the plan engine): a run
beside the predicted curve, and the repeatability of repeated runs (``servelab.rules.explain``)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from servelab.rules.explain import Row
from servelab.metrics.repeats import TOK_S_SPREAD, TTFT_SPREAD, RepeatStats
from servelab.plan.calibration import Calibration


def explain_table(rows: list[Row], title: str, cal: Calibration) -> Table:
    """Measured beside predicted per level, the predicted bottleneck and the cause of the gap."""
    table = Table(title=escape(title))
    for col in ("streams", "tok/s measured", "predicted", "err", "TPOT ms meas / pred", "TTFT ms meas / pred (p50; bursts: mean)", "predicted bottleneck", "the gap"):
        table.add_column(col, justify="left" if col in ("predicted bottleneck", "the gap") else "right")
    for r in rows:
        table.add_row(str(r.concurrency), f"{r.measured_tok_s:,.0f}", f"{r.predicted.aggregate_tok_s:,.0f}", f"{r.tok_s_error:+.0%}",
                      f"{r.measured_tpot_s * 1e3:,.1f} / {r.predicted.tpot_s * 1e3:,.1f}", f"{r.measured_ttft_s * 1e3:,.1f} / {r.predicted_ttft_s * 1e3:,.1f}",
                      r.predicted.bottleneck, escape(r.cause))  # fmt: skip
    table.caption = escape(f"calibration {cal.name}: {cal.error}")  # a calibration file's text is the user's, not markup
    return table


def repeat_table(spreads: list[RepeatStats]) -> Table:
    """Per level: min – max of repeated runs' aggregate tok/s and TTFT p50, unstable ones marked."""
    table = Table(title="repeatability: the same load, repeated")
    for col in ("streams", "runs", "tok/s min – max", "spread", "TTFT p50 ms min – max", "spread", ""):
        table.add_column(col, justify="right")
    for sp in spreads:
        table.add_row(str(sp.concurrency), str(sp.runs), f"{sp.tok_s[0]:,.0f} – {sp.tok_s[1]:,.0f}", f"{sp.tok_s_spread:.1%}",
                      f"{sp.ttft_ms[0]:,.1f} – {sp.ttft_ms[1]:,.1f}", f"{sp.ttft_spread:.1%}", "[red]unstable measurement[/]" if sp.unstable else "")  # fmt: skip
    table.caption = f"unstable: tok/s apart by more than {TOK_S_SPREAD:.0%} or TTFT p50 by more than {TTFT_SPREAD:.0%} of their median (servelab/metrics/repeats.py)"
    return table
