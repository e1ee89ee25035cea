"""``servelab tune``'s tables: every grid point priced beside what was measured, the ledger of
launches (iteration, change, Δ% against the best before it), and the winner with why."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from servelab.store.tuning import TuneDocument, TunePoint

SHOWN = 30  # grid points shown in the table: the launched ones, then the best predicted (tune.json has them all)


def _num(value: float | None, capped: bool = False) -> str:
    return "–" if value is None else (f"≥ {value:g}" if capped else f"{value:g}")


def _shown(doc: TuneDocument) -> list[TunePoint]:
    """The launched and failed points, then the rest by predicted capacity, up to ``SHOWN`` (grid order kept)."""
    first = [p for p in doc.points if p.status in ("launched", "failed")]
    rest = sorted((p for p in doc.points if p not in first), key=lambda p: -(p.predicted or 0))
    keep = {id(p) for p in (first + rest)[: max(SHOWN, len(first))]}
    return [p for p in doc.points if id(p) in keep]


def points_table(doc: TuneDocument) -> Table:
    """Every grid point (up to ``SHOWN``): fits, predicted capacity [band] and bottleneck, measured
    capacity, Δ of the measurement against the prediction that chose it, status."""
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in doc.slo.items())
    t = Table(title=escape(f"tune: {doc.recipe} · {slo} · {doc.input_tokens:,} in / {doc.output_tokens:,} out · capacity in streams"))
    for col in ("point", "fits", "predicted [band]", "bottleneck", "measured", "Δ measured vs predicted", "status"):
        t.add_column(col, justify="left" if col in ("point", "bottleneck", "status", "fits") else "right")
    shown = _shown(doc)
    for p in shown:
        fits = "no: " + (p.why or "") if p.status == "unfit" else "yes" if doc.priced else "?"
        band = f" [{p.band[0]:g}–{p.band[1]:g}]" if p.band else ""
        predicted = f"{_num(p.predicted)}{band}" if doc.priced and p.status != "unfit" else "–"
        delta = f"{100 * (p.measured / p.predicted_at_launch - 1):+.0f} %" if p.measured and p.predicted_at_launch else "–"
        status = p.status + (f": {p.why}" if p.why and p.status in ("failed", "pruned") else "")
        style = "bold green" if p.label == doc.winner else None
        t.add_row(escape(p.label), escape(fits), predicted, escape(p.bottleneck or "–"), _num(p.measured, p.capped), delta, escape(status), style=style)
    hidden = len(doc.points) - len(shown)
    cal = doc.calibration
    t.caption = escape(
        (f"{hidden:,} more points in tune.json. " if hidden else "")
        + (f"Priced by servelab predict ({doc.assumptions}); band: every predicted time × (1 ± {doc.band:g}; a host-bound point's at least × (1 ± the host's band))"
           + (f"; measured ÷ predicted on the probes: {', '.join(f'{k} × {v:g}' for k, v in doc.factors.items())}" if doc.factors else "")
           + (f"; calibration η_bw {cal['bw_efficiency']}, η_c {cal['compute_efficiency']}, {cal['layer_overhead_us']} µs per layer per step" if cal else "")
           if doc.priced else "Not priced (no model or hardware profile): launched in grid order.")  # fmt: skip
    )
    return t


def ledger_table(doc: TuneDocument) -> Table:
    """One row per launch: iteration, point, what changed from the best before it, measured capacity, Δ% against that best, the prediction, wall time."""
    t = Table(title="tune ledger")
    for col in ("#", "point", "change", "capacity", "Δ% vs best before", "predicted", "binding objective", "wall s"):
        t.add_column(col, justify="left" if col in ("point", "change", "binding objective") else "right")
    for x in doc.launches:
        capacity = _num(x.capacity, x.capped) if x.status == "complete" else "[red]failed[/]"
        t.add_row(str(x.iteration), escape(x.label), escape(x.change or "–"), capacity, f"{x.delta_pct:+.1f} %" if x.delta_pct is not None else "–",
                  _num(x.predicted), escape(x.binding or (x.error or "–")[:120]), f"{x.wall_s:,.0f}")  # fmt: skip
    return t


def verdict(doc: TuneDocument) -> str:
    """The winner and why, as Rich markup lines."""
    if doc.winner is None:
        return "[red]no winner[/]: " + escape("; ".join(doc.why))
    lines = [f"[bold]winner: {escape(doc.winner)}[/]" + (f" (recipe written to {escape(doc.best_recipe)})" if doc.best_recipe else "")]
    lines += [f"  · {escape(w)}" for w in doc.why]
    measured = sum(x.status == "complete" for x in doc.launches)
    lines.append(f"{measured} launch{'es' if measured != 1 else ''} measured of {len(doc.points):,} points, {doc.wall_s:,.0f} s"
                 + (" [yellow](interrupted: rerun the same command to resume)[/]" if doc.status == "partial" else ""))  # fmt: skip
    return "\n".join(lines)
