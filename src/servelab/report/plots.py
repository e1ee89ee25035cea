"""Plots of stored runs (matplotlib, PNG bytes): throughput and latency against concurrency,
latency distributions, and per-user against aggregate tok/s (the Pareto view).

Closed-loop levels are plotted against their concurrency; open-loop levels (a request rate) and
levels of other tools without a concurrency are left out of the concurrency axes. Per-user tok/s
is decode tok/s per request p50 (its mean for tools that report means only); metric definitions
are in docs/metrics.md.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
matplotlib.rcParams["text.parse_math"] = False  # a model id with $…$ is text, not math (servelab.guards.untrusted)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from servelab.values.records import RequestRecord  # noqa: E402
from servelab.store.database import Level, Run  # noqa: E402
from servelab.guards.untrusted import plain  # noqa: E402


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def run_name(run: Run) -> str:
    """A short legend name: variant or model, engine, the tool for imported results, id prefix."""
    what = run.variant or run.model.rsplit("/", 1)[-1]
    tool = "" if run.source == "servelab" else f" ({run.source})"
    return plain(f"{what} · {run.engine}{tool} [{run.id[:6]}]")


def per_user(lv: Level) -> float | None:
    """Per-user tok/s of a level: decode tok/s per request p50, else its mean."""
    return lv.decode_tok_s_p50 if lv.decode_tok_s_p50 is not None else lv.decode_tok_s_mean


def _closed(run: Run) -> list[Level]:
    return sorted((lv for lv in run.levels if lv.rate_rps is None and lv.concurrency > 0), key=lambda lv: lv.concurrency)


def _series(runs: list[Run]) -> Iterator[tuple[Run, list[Level], list[int]]]:
    """(run, its closed-loop levels, their concurrencies) for each run that has any."""
    for run in runs:
        if levels := _closed(run):
            yield run, levels, [lv.concurrency for lv in levels]


def _ceilings(run: Run) -> list[tuple[int, float]]:
    """(concurrency, decode ceiling per stream) from a servelab run's document, where it was computed."""
    if run.source != "servelab":
        return []
    levels = run.doc().get("levels", [])
    return [(lv["concurrency"], lv["decode_ceiling_tok_s"]) for lv in levels if lv.get("decode_ceiling_tok_s") and lv.get("rate_rps") is None]


def _legend(ax) -> None:
    """A legend where the axes have labelled lines (an open-loop-only run has none here)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _concurrency_axes(axes: tuple) -> None:
    """Title each (axis, title) pair; concurrency on a log2 x axis, y from 0."""
    for ax, title in axes:
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        # log axes label their ticks as math text ("$2^{4}$"), which is off for untrusted text: plain numbers
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)


def throughput(runs: list[Run]) -> bytes:
    """Output tok/s (aggregate) and per-user tok/s against concurrency, one line per run; the
    roofline decode ceiling per stream (``servelab plan``) dashed where the run has it."""
    fig, (agg, user) = plt.subplots(1, 2, figsize=(11, 4))
    for run, levels, x in _series(runs):
        (line,) = agg.plot(x, [lv.output_tok_s for lv in levels], marker="o", label=run_name(run))
        user.plot(x, [per_user(lv) for lv in levels], marker="o", color=line.get_color(), label=run_name(run))
        if ceiling := _ceilings(run):
            user.plot(*zip(*ceiling, strict=True), linestyle="--", color=line.get_color(), label=f"ceiling {run.id[:6]}")
    _concurrency_axes(((agg, "output throughput (aggregate), tok/s"), (user, "per-user decode tok/s")))
    _legend(user)
    return _png(fig)


def latency(runs: list[Run]) -> bytes:
    """TTFT and TPOT p50 (solid) and p99 (dotted) against concurrency, one colour per run (ms)."""
    fig, (ttft, tpot) = plt.subplots(1, 2, figsize=(11, 4))
    for run, levels, x in _series(runs):
        (line,) = ttft.plot(x, [lv.ttft_ms_p50 if lv.ttft_ms_p50 is not None else lv.ttft_ms_mean for lv in levels], marker="o", label=f"{run_name(run)} p50")
        ttft.plot(x, [lv.ttft_ms_p99 for lv in levels], linestyle=":", marker=".", color=line.get_color(), label=f"{run_name(run)} p99")
        tpot.plot(x, [lv.tpot_ms_p50 if lv.tpot_ms_p50 is not None else lv.tpot_ms_mean for lv in levels], marker="o", color=line.get_color())
        tpot.plot(x, [lv.tpot_ms_p99 for lv in levels], linestyle=":", marker=".", color=line.get_color())
    _concurrency_axes(((ttft, "TTFT, ms (p50 solid, p99 dotted)"), (tpot, "TPOT, ms (p50 solid, p99 dotted)")))
    _legend(ttft)
    return _png(fig)


def distributions(records: list[RequestRecord]) -> bytes | None:
    """Empirical CDFs of TTFT and E2E latency per level (ms) from a run's successful measured
    requests (open-loop levels grouped by their in-flight cap); None without any."""
    by_level: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.phase == "measured" and r.status == "ok" and None not in (r.start, r.first_token, r.end):
            by_level.setdefault(f"c={r.concurrency}", []).append(r)
    if not by_level:
        return None
    fig, (ttft, e2e) = plt.subplots(1, 2, figsize=(11, 4))
    for label, recs in by_level.items():
        for ax, values in ((ttft, [1000 * (r.first_token - r.start) for r in recs]), (e2e, [1000 * (r.end - r.start) for r in recs])):
            data = sorted(values)
            ax.step(data, [(i + 1) / len(data) for i in range(len(data))], where="post", label=label)
    for ax, title in ((ttft, "TTFT, ms (CDF)"), (e2e, "E2E latency, ms (CDF)")):
        ax.set_title(title)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    _legend(ttft)
    return _png(fig)


def pareto(runs: list[Run]) -> bytes:
    """Per-user tok/s (x) against aggregate output tok/s (y): each level a point, each run a line;
    the points no other point beats on both axes (the Pareto front) are ringed."""
    fig, ax = plt.subplots(figsize=(7, 5))
    points = []
    for run in runs:
        levels = [lv for lv in run.levels if per_user(lv) is not None and lv.output_tok_s is not None]
        levels.sort(key=lambda lv: per_user(lv), reverse=True)
        if not levels:
            continue
        xs, ys = [per_user(lv) for lv in levels], [lv.output_tok_s for lv in levels]
        ax.plot(xs, ys, marker="o", label=run_name(run))
        for lv, x, y in zip(levels, xs, ys, strict=True):
            ax.annotate(lv.label, (x, y), fontsize=6, alpha=0.7)
            points.append((x, y))
    front = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)]
    if front:
        ax.scatter(*zip(*front, strict=True), s=140, facecolors="none", edgecolors="black", label="Pareto front")
    ax.set_xlabel("per-user decode tok/s")
    ax.set_ylabel("aggregate output tok/s")
    ax.set_title("per-user vs aggregate throughput")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _png(fig)


def prediction(curves: list[tuple[str, list[tuple[int, float, float]]]], measured: list[tuple[str, list[tuple[int, float, float]]]]) -> bytes:
    """``servelab predict --plot``: aggregate and per-stream decode tok/s against concurrency, each
    predicted curve a line, each measured run (``--overlay``) markers. Points are (concurrency,
    aggregate tok/s, per-stream decode tok/s)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, pts in curves:
        line = axes[0].plot([c for c, _, _ in pts], [a for _, a, _ in pts], marker=".", label=f"predicted: {label}")[0]
        axes[1].plot([c for c, _, _ in pts], [d for _, _, d in pts], marker=".", color=line.get_color())
    for label, pts in measured:
        axes[0].plot([c for c, _, _ in pts], [a for _, a, _ in pts], linestyle="none", marker="o", label=f"measured: {label}")
        axes[1].plot([c for c, _, _ in pts], [d for _, _, d in pts], linestyle="none", marker="o", color=axes[0].lines[-1].get_color())
    _concurrency_axes(((axes[0], "output throughput (aggregate), tok/s"), (axes[1], "decode tok/s per stream")))
    _legend(axes[0])
    return _png(fig)
