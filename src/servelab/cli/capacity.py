"""``servelab capacity``: the largest concurrency (or request rate) whose level meets every SLO."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from servelab.run.capacity import Capacity, Predicted, Prober, dimension, predicted_start, probe_load, search, slowest_rate
from servelab.cli.bind import CAPACITY_LOAD, TARGET_ALL, bind
from servelab.cli.common import console, err_console, event_loop_runner, measured, output_dir, remember, sigterm_as_sigint
from servelab.errors import ServelabError
from servelab.run.measure import bench_options, serve
from servelab.settings import Load, Target
from servelab.guards import jsonfile


@bind(load=(Load, CAPACITY_LOAD), target=(Target, TARGET_ALL))
def capacity_cmd(
    load: Load,
    target: Target,
    open_loop: Annotated[bool, typer.Option("--open-loop/--closed-loop", help="Search request rates (open loop, Poisson) instead of streams (closed loop, the default).")] = False,
    sessions: Annotated[bool, typer.Option("--sessions", help="Search the number of multi-turn sessions kept open (bench --sessions) instead of streams.")] = False,
    start: Annotated[float | None, typer.Option(min=0.001, help="The first load probed (default servelab predict's estimate with --hardware, else 1).")] = None,
    repeats: Annotated[int, typer.Option(min=0, max=10, help="Extra measurements of the boundary, for its spread.")] = 2,
    max_load: Annotated[float | None, typer.Option(min=0.001, help="The largest load probed (streams, sessions, req/s or × trace speed). Streams also stop at --requests and at 4 × the server's max_num_seqs and KV capacity when its boot log gives them; without any of these, 4,096 streams or sessions, 10,000 req/s, × 1,000.")] = None,
    output: Annotated[Path | None, typer.Option(help="Directory of the probes, one run each; rerun with the same one to resume.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: max_concurrency or max_rate, probes, slo, predicted.")] = False,
) -> None:
    """Search the largest concurrency (or request rate, sessions, trace speed-up) whose level meets
    every SLO: predicted start, ×4 until a probe misses, bisection to 10 %, the boundary measured again."""
    sigterm_as_sigint()
    if not load.slo:
        raise ServelabError("capacity needs --slo: the objectives every probe must meet, e.g. --slo ttft_p99=2s,tpot_p99=50ms")
    kind = dimension(load, open_loop=open_loop, sessions=sessions)
    embedded = target.url is None
    bench_options(probe_load(load, kind, 1.0), embedded)  # every file read (a trace's bad lines refused) before a server starts
    load = load.for_target(embedded)
    base = output_dir(output, "capacity")
    shown = err_console if json_out else console  # with --json, stdout holds the JSON alone
    with ExitStack() as stack, event_loop_runner() as runner:
        served = serve(stack, target, base, shown.status)
        # predict models single requests in a closed loop: no start for sessions, a rate or a trace
        guess = predicted_start(target, load) if target.hardware and kind == "streams" else None
        probed = target.model_copy(update={"hardware": None})  # --hardware feeds the prediction; the probes need no roofline
        prober = Prober(base, load, kind, served.embedded, lambda options, out: measured(runner, served, probed, options, out, load.api_key_env, shown)[0],
                        lambda line: shown.print(line, markup=False), max_load)  # fmt: skip
        found = search(prober, closed_loop=kind in ("streams", "sessions"), start=start or (guess and guess.streams) or 1.0, repeats=repeats,
                       minimum=slowest_rate(load, kind), maximum=prober.bound)  # fmt: skip
    remember(base, shown)
    unit = {"trace": "× trace speed", "sessions": "sessions", "rate": "req/s", "streams": "streams"}[kind]
    if json_out:
        key = {"trace": "max_time_scale", "sessions": "max_sessions", "rate": "max_rate", "streams": "max_concurrency"}[kind]
        print(jsonfile.dumps({key: found.capacity, "converged": found.converged, "bracket": found.bracket, "spread_goodput_rps": found.spread,
                          "capped": found.capped, "capped_by": prober.bound_reason() if found.capped else None,
                          "boundary_passes": found.boundary_passes,
                          "slo": {o.key: o.target_ms for o in load.slo}, "predicted": guess and guess.streams, "bottleneck": guess and guess.bottleneck,
                          "predicted_band": guess and {"streams": guess.bracket, "family_class": guess.band.family_class, "tok_s": guess.band.tok_s,
                                                       "evidence": guess.band.evidence},
                          "probes": [p.model_dump() for p in found.probes]}, indent=1))  # fmt: skip
        return
    console.print(_table(found, load.slo, unit))
    console.print(_answer(found, guess, unit, prober.bound_reason()), soft_wrap=True)


def _table(found: Capacity, objectives: list, unit: str) -> Table:
    """The probes in order: load (in ``unit``), pass or miss, each objective's level percentile, goodput, attainment."""
    t = Table(title="capacity probes (" + ", ".join(f"{o.key} ≤ {o.target_ms:g} ms" for o in objectives) + ")")
    for col in ("#", unit, "SLO", *(o.key + " ms" for o in objectives), "goodput req/s", "met"):
        t.add_column(col, justify="right")
    for i, p in enumerate(found.probes, 1):
        checks = {c.key: c for c in p.slo.checks}
        t.add_row(f"{i}{' (again)' if p.repeat else ''}", f"{p.load:g}", "[green]pass[/]" if p.passed else "[red]miss[/]",
                  *(f"{checks[o.key].measured_ms:,.1f}" if checks[o.key].measured_ms is not None else "–" for o in objectives),
                  f"{p.slo.goodput_rps:,.2f}" if p.slo.goodput_rps is not None else "–", f"{p.slo.attainment:.0%}" if p.slo.attainment is not None else "–")  # fmt: skip
    return t


def _answer(found: Capacity, guess: Predicted | None, unit: str, bound: str) -> str:
    what = unit.removesuffix("s") if found.capacity == 1 and unit in ("streams", "sessions") else unit
    if found.capacity is None:
        return f"[red]no load meets the SLOs[/]: even {found.bracket[1]:g} {what} missed"
    lo, hi = found.bracket
    text = (f"capacity: [bold]{found.capacity:g} {what}[/] (the smallest miss: {hi:g})" if hi is not None
            else f"capacity: at least {found.capacity:g} {what} (no probe missed; the search stops at {escape(bound)})" if found.capped
            else f"capacity: at least {found.capacity:g} {what} (no probe missed)")  # fmt: skip
    if found.spread:
        passed, measured = found.boundary_passes
        text += f"; goodput at the boundary {found.spread[0]:.2f}–{found.spread[1]:.2f} req/s over {measured} measurements"
        if passed < measured:
            text += f", [yellow]{passed} of {measured} met the SLOs[/]: the boundary is within the run-to-run noise"
    if guess is not None and guess.streams is not None:
        lo, hi = guess.bracket
        text += (f"; predicted {guess.streams} streams ({100 * (guess.streams / found.capacity - 1):+.0f} %; band {lo}–{hi}, the {guess.band.family_class} "
                 f"class's ± {guess.half_width:.0%}: {'inside' if lo <= found.capacity <= hi else 'outside'})")
        text += f", bottleneck there: {escape(guess.bottleneck)}" if guess.bottleneck else ""
    if not found.converged:
        text += " [yellow](not converged: see the probes)[/]"
    return text
