"""``servelab calibrate``: predict's efficiencies and times per step fitted on your own runs, or
(``--url``) on a short design it runs itself on your server (``servelab.plan.design``), with priors
and each parameter's uncertainty (``servelab.plan.fit``)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.markup import escape

from servelab.cli.bind import bind
from servelab.cli.common import DbOpt, console, event_loop_runner, fail, measured, output_dir, remember, sigterm_as_sigint, store_at, write_file
from servelab.cli.predict import HardwareOpt, ModelOpt, QuantOpt, TpOpt, read_run, setup_for
from servelab.errors import ServelabError
from servelab.plan.calibration import BW_RANGE, COMPUTE_RANGE, Calibration, calibration
from servelab.plan.cohorts import MIXED_SHARE
from servelab.plan.design import design_levels
from servelab.plan.fit import HOST_SCALES, MIXED_FLOORS, fit, measured_levels, prior_widths
from servelab.plan.holdout import error_summary, leave_one_out
from servelab.run.measure import bench_options, serve
from servelab.settings import Load, Target
from servelab.store.results import RunResult

STORED_KEYS = ("model", "engine", "hardware")
DESIGN_LOAD = ("input_tokens", "output_tokens", "duration_s", "endpoint", "api_key_env", "seed")  # the --url design's load settings
TIMES = ("layer_overhead_us", "eager_step_ms", "moe_layer_us", "moe_eager_layer_ms", "mla_layer_us", "mla_eager_layer_ms", "untuned_moe_layer_us", "draft_overhead_ms")
DESIGN_DURATION_S = 30.0  # each design level's window when --duration is not given: 3 levels and their ramps in about 2 minutes


@bind(load=(Load, DESIGN_LOAD), target=(Target, ("url", "server_log")))
def calibrate_cmd(
    load: Load,
    target: Target,
    runs: Annotated[list[Path] | None, typer.Argument(help="Run directories (servelab bench --output) or their run.json files.")] = None,
    stored: Annotated[list[str] | None, typer.Option(help="Also fit on the servelab runs in the runs database whose KEY contains TEXT: KEY=TEXT with KEY model, engine or hardware (repeatable, all must hold).")] = None,
    db: DbOpt = None,
    hardware: HardwareOpt = None,
    model: ModelOpt = None,
    quant: QuantOpt = None,
    tp: TpOpt = 1,
    prior: Annotated[bool, typer.Option("--prior/--no-prior", help="Pull each parameter toward the shipped calibration of the model's class (and report its uncertainty), or fit the levels alone.")] = True,
    name: Annotated[str, typer.Option(help="The calibration's name.")] = "mine",
    out: Annotated[Path | None, typer.Option(help="Write it as YAML here (use with servelab predict/explain --calibration FILE).")] = None,
    output: Annotated[Path | None, typer.Option(help="--url: the design run's directory (default servelab-runs/<time>-calibrate).")] = None,
    max_streams: Annotated[int | None, typer.Option(min=1, help="--url: the most sequences your server runs at once, where below its engine's default max_num_seqs (the design's high level is at most this).")] = None,
) -> None:
    """Fit servelab predict's efficiencies and times per step on your runs, or with --url on a short design it runs on your server
    (one stream, a middle and a high level, steady state, cold prompts): with priors, each parameter's uncertainty and the leave-one-out error."""
    found = [(str(r), read_run(r)) for r in runs or []] + (_stored(db, stored) if stored else [])
    if target.url is not None:
        found.append(_design_run(load, target, (hardware, model, quant, tp), output, max_streams))
    if not found:
        raise ServelabError("calibrate needs runs: give run directories, --stored KEY=TEXT for runs in the runs database (servelab runs lists them), "
                            "or --url to measure its own design on your server")  # fmt: skip
    measured_runs, setups = [], []
    for label, run in found:
        setup = setup_for(run, label, model, quant, hardware)
        if levels := measured_levels(run, *setup, tp=tp):
            measured_runs.append(levels)
            setups.append(setup)
    if sum(len(levels) for levels in measured_runs) < 3:
        raise ServelabError("calibrate needs at least 3 closed-loop levels with successful requests (to fit, and to hold one out)")
    spec, fmt, hw = setups[0]
    start = calibration(None, spec, fmt) if prior else None
    widths = prior_widths(hw, start) if start else None
    error = "leave-one-out: " + error_summary(leave_one_out(measured_runs, name, start, widths))
    source = f"servelab calibrate on {', '.join(label for label, _ in found)}" + (f", prior {start.name}" if start else "")
    cal = fit([m for levels in measured_runs for m in levels], name, source, start, widths).model_copy(update={"error": error, "gpu": hw.generation})
    _show(cal, error)
    if out is not None:
        write_file(out, yaml.safe_dump({cal.name: cal.model_dump(exclude={"name"})}, sort_keys=False, allow_unicode=True), "--out")
        console.print(escape(f"written to {out}: servelab predict --calibration {out}"))


def _design_run(load: Load, target: Target, roofline: tuple, output: Path | None, most: int | None) -> tuple[str, RunResult]:
    """The design measured on ``target.url`` (``servelab.plan.design``) for ``roofline`` = (hardware, model, quant, tp), its high
    level at most ``most`` streams: (label, run).

    Raises:
        ServelabError: no --hardware or --model (the design and the fit need them), the model does not fit, or the run failed.
    """
    hardware, model, quant, tp = roofline
    if hardware is None or model is None:
        raise ServelabError("calibrate --url needs --hardware (the profile to calibrate, e.g. h100-sxm) and --model (the served model: catalog name, config.json or Hub id)")
    target = target.model_copy(update={"hardware": hardware, "roofline_model": model, "quant": quant})
    base = load.for_target(embedded=False)
    load = base.model_copy(update={"closed_loop": "stagger", "prefix_cache": "cold", "duration_s": load.duration_s or DESIGN_DURATION_S})
    levels = design_levels(model, quant, hardware, tp, load.input_tokens, load.output_tokens, most)
    console.print(escape(f"design: {', '.join(map(str, levels))} streams, steady state, cold prompts, {load.duration_s:g} s each"), soft_wrap=True)
    options = bench_options(load.model_copy(update={"concurrency": levels}), embedded=False)
    run_dir = output_dir(output, "run", "calibrate")
    sigterm_as_sigint()
    try:
        with ExitStack() as stack, event_loop_runner() as runner:
            served = serve(stack, target, run_dir, console.status)
            run, run_dir = measured(runner, served, target, options, run_dir, load.api_key_env)
    except KeyboardInterrupt:
        fail(f"interrupted; the partial design run is in {run_dir}" if (run_dir / "run.json").exists() else "interrupted", 130)
    remember(run_dir)
    if run.status != "complete" or run.failed:
        raise ServelabError(f"the design run did not complete ({run.partial_reason or 'failed requests'}): see {run_dir}")
    return str(run_dir), run


def _interval(key: str, low: float, high: float) -> str:
    """One parameter's interval as calibrate prints it: ``low–high``, or, where the levels pin a parameter fitted on a grid
    within one of its steps (``fit.HOST_SCALES``, ``fit.MIXED_FLOORS``), the value and that step."""
    grids = {"host_scale": f"{(HOST_SCALES[1] / HOST_SCALES[0] - 1) * 100:.0f} %", "mixed_floor": f"{MIXED_FLOORS[1] - MIXED_FLOORS[0]:g}"}
    return f"{key} {low:g} (within the grid's step, {grids[key]})" if low == high and key in grids else f"{key} {low:g}–{high:g}"


def _show(cal: Calibration, error: str) -> None:
    """The fitted calibration, its intervals, its leave-one-out error, and a parameter at the edge of its range named."""
    times = ", ".join(f"{key} {getattr(cal, key)}" for key in TIMES if key in TIMES[:2] or getattr(cal, key))  # the MoE, MLA and drafting times where non-zero
    fitted = "".join(f", {key} {getattr(cal, key):g}" for key in ("host_scale", "mixed_floor") if key in cal.uncertainty)  # with a prior, where the levels pin them (fit._fit_host, fit._fit_floor)
    console.print(escape(f"{cal.name}: bw_efficiency {cal.bw_efficiency}, compute_efficiency {cal.compute_efficiency}{fitted}, {times}\n{error}"))
    if cal.uncertainty:
        console.print(escape("uncertainty (one standard deviation): " + ", ".join(_interval(k, lo, hi) for k, (lo, hi) in cal.uncertainty.items())))
    if cal.mixed_share:
        console.print(escape(f"cohorts: s = {cal.mixed_share:g}, the share of the steady state's steps that carry prompts once k ≥ s prompts arrive a decode step "
                             f"(measured: its levels' prompts a step; predict's default {MIXED_SHARE:g})"))
    if cal.uncertainty and "mixed_floor" not in cal.uncertainty:
        console.print(f"mixed_floor {cal.mixed_floor:g} (not fitted: no level beyond one stream has steps with prompts without CUDA graphs and a host's floor for them)")
    if cal.uncertainty and "host_scale" not in cal.uncertainty:
        console.print(f"host_scale {cal.host_scale:g} (not fitted: the host binds no level beyond one stream, so these levels cannot tell its speed)")
    if cal.bw_efficiency in BW_RANGE or cal.compute_efficiency in COMPUTE_RANGE:
        console.print("[yellow]an efficiency sits at the edge of its range: these runs do not pin it down; add levels at other concurrencies (1 stream fixes the prefill efficiency)[/]")


def _stored(db: str | None, filters: list[str]) -> list[tuple[str, RunResult]]:
    """(label, run) of the servelab runs in the runs database matching every ``KEY=TEXT`` filter.

    Raises:
        ServelabError: a filter that is not KEY=TEXT with a known key; the database cannot be read.
    """
    wanted = {}
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep or key not in STORED_KEYS or not value:
            raise ServelabError(f"--stored {item!r}: give KEY=TEXT with KEY one of {', '.join(STORED_KEYS)} (e.g. --stored model=qwen3-8b)")
        wanted[key] = value
    return [(f"stored run {r.id}", r.result()) for r in store_at(db).runs(source="servelab", **wanted)]
