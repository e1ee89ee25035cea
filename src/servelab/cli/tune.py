"""``servelab tune``: the configuration of a recipe that serves the most streams within an SLO, in a
few launches (``servelab.run.tune``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from servelab.cli.bind import CAPACITY_LOAD, bind
from servelab.cli.common import console, err_console, event_loop_runner, fail, measured, output_dir, read_model, remember, sigterm_as_sigint, warn, write_file
from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.plan.calibration import calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.curves import PredictedLoad
from servelab.plan.hardware import load_hardware
from servelab.recipes import Recipe, load_recipe, parse_assignments
from servelab.report.tune_table import ledger_table, points_table, verdict
from servelab.run.capacity import Capacity, Prober, probe_load, search
from servelab.run.measure import Served, bench_options
from servelab.plan.band import band_for, point_band
from servelab.plan.cohorts import HOST_SHARE
from servelab.plan.pricing import ASSUMPTIONS, PRIOR_BAND, Pricer, class_band, price_points, unreachable
from servelab.run.tune import Tuner, document_json, earlier, grid, points
from servelab.store.results import write_document
from servelab.settings import Load, Target
from servelab.store.tuning import TuneDocument

TUNE_LOAD = tuple(n for n in CAPACITY_LOAD if n not in ("trace",))  # the probes are closed-loop streams


@bind(load=(Load, TUNE_LOAD))
def tune_cmd(
    load: Load,
    recipe_file: Annotated[Path, typer.Argument(help="Recipe YAML (servelab's format, or a spark-vllm-docker recipe_version \"1\").", show_default=False)],
    vary: Annotated[list[str] | None, typer.Option("--vary", help="KEY=V1,V2,…: the grid, every combination of the --vary values; KEY a placeholder of the recipe or a flag servelab reads (max_num_seqs, max_num_batched_tokens, max_cudagraph_capture_size, kv_cache_dtype, gpu_memory_utilization, …).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="NAME=VALUE for every point: a placeholder value, or an engine flag to add. Repeatable.")] = None,
    launches: Annotated[int, typer.Option(min=1, max=100, help="Measurements at most (launches that fail do not count).")] = 3,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile or YAML that prices the grid (default the recipe's hardware).")] = None,
    model: Annotated[str | None, typer.Option(help="The model that prices the grid: catalog name, config.json or Hub id (default the recipe's model).")] = None,
    calibration_name: Annotated[str | None, typer.Option("--calibration", help="predict's calibration to start from (a shipped name or a servelab calibrate --out file).")] = None,
    repeats: Annotated[int, typer.Option(min=0, max=10, help="Extra measurements of each launch's boundary (capacity --repeats).")] = 1,
    max_load: Annotated[float | None, typer.Option(min=1, help="The most streams a probe runs (default: --requests, 4 × the server's max_num_seqs and KV capacity, else 4,096).")] = None,
    output: Annotated[Path | None, typer.Option(help="The tune's directory (default servelab-runs/<time>-tune-<recipe>); rerun with the same one to resume.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the whole tune as JSON (tune.json's content) on stdout, and nothing else.")] = False,
    trust_recipe: Annotated[bool, typer.Option("--trust-recipe", help="Let the recipe put values where servelab's allowlist does not (only for a recipe you wrote).")] = False,
) -> None:
    """The configuration that serves the most streams within --slo: every grid point priced by predict,
    the best launched and measured by capacity's search (up to --launches), the rest re-ranked and pruned."""
    sigterm_as_sigint()
    if not load.slo:
        raise ServelabError("tune needs --slo: the objectives a configuration must meet, e.g. --slo ttft_p99=2s,tpot_p99=50ms")
    shown = err_console if json_out else console  # with --json, stdout holds the JSON alone
    recipe = load_recipe(recipe_file, trust_recipe)
    fixed = {k: v[0] for k, v in parse_assignments(set_ or [], "--set").items()}
    combos = grid(recipe, parse_assignments(vary or [], "--vary"), fixed)
    load = load.for_target(embedded=False)
    bench_options(probe_load(load, "streams", 1.0), False)  # every file the load names read before a server starts
    grid_points = points(recipe, combos, fixed, load.input_tokens + load.output_tokens)
    for note in recipe.trust_notes:
        warn(f"--trust-recipe: {note}")
    pricer = _pricer(recipe, recipe_file, grid_points[0].settings["quantization"], load, hardware, model, calibration_name)
    doc = TuneDocument(recipe=recipe.name, sha256=recipe.sha256(), slo={o.key: o.target_ms for o in load.slo}, input_tokens=load.input_tokens,
                       output_tokens=load.output_tokens, grid=[p.label for p in grid_points], status="running", priced=pricer is not None,
                       assumptions=ASSUMPTIONS if pricer else None, calibration=pricer.cal.model_dump() if pricer else None, band=pricer.prior_band if pricer else PRIOR_BAND,
                       launches_budget=launches, points=grid_points)  # fmt: skip
    _price(doc, pricer)
    out = output_dir(output, "tune", f"tune-{recipe.name}")
    history = earlier(out, doc)
    write_document(out / "tune.json", doc)

    def say(line: str) -> None:
        shown.print(line, markup=False, highlight=False, soft_wrap=True)

    with event_loop_runner() as runner:

        def measure(server: RecipeServer, directory: Path, start: float | None) -> Capacity:
            served, target = Served(server.url, server, directory), Target(url=server.url)
            prober = Prober(directory, load, "streams", False, lambda options, probe_dir: measured(runner, served, target, options, probe_dir, load.api_key_env, shown)[0],
                            say, max_load)  # fmt: skip
            return search(prober, closed_loop=True, start=start or 1.0, repeats=repeats, maximum=prober.bound)

        try:
            Tuner(recipe, out, doc, pricer, measure, say, shown.status, lambda path, text: write_file(path, text, "--output"), history).run()
        except KeyboardInterrupt:
            done = sum(x.status == "complete" for x in doc.launches)
            fail(f"interrupted; the server was stopped; {done} finished launch(es) kept in {out} (rerun the same command to resume)", 130)
    remember(out, shown)
    _show(doc, out, json_out)


def _pricer(recipe: Recipe, recipe_file: Path, quant: str | None, load: Load, hardware: str | None, model: str | None, name: str | None) -> Pricer | None:
    """predict's pricing of the grid for the model and hardware (the options, else the recipe's: a
    profile file named beside the recipe is read there), or None without both."""
    beside = recipe_file.parent / recipe.hardware if recipe.hardware else None
    hardware, model = hardware or (str(beside) if beside and beside.is_file() else recipe.hardware), model or recipe.model
    if not (hardware and model):
        return None
    spec, hw = read_model(model), load_hardware(hardware)
    fmt = weight_format(quant, spec)
    band = band_for(spec, fmt.name)  # predict's honest band for the model's family class, and a host-bound point's
    return Pricer(spec, hw, calibration(name, spec, fmt), PredictedLoad(load.input_tokens, load.output_tokens, [1]), load.slo,
                  prior_band=class_band(band), host_band=class_band(point_band(band, HOST_SHARE)))  # fmt: skip


def _price(doc: TuneDocument, pricer: Pricer | None) -> None:
    """Price the grid under a progress bar, or say that it is not priced.

    Raises:
        ServelabError: no point can meet the SLO (``servelab.run.tune.unreachable``).
    """
    if pricer is None:
        warn("the grid is not priced (give --hardware and --model, or hardware: and model: in the recipe): points are launched in grid order")
        return
    with Progress(TextColumn("pricing the grid"), BarColumn(), MofNCompleteColumn(), console=err_console, transient=True) as progress:
        task = progress.add_task("", total=len(doc.points))
        price_points(doc, pricer, lambda: progress.advance(task))
    if reason := unreachable(doc, pricer):
        raise ServelabError(reason)


def _show(doc: TuneDocument, out: Path, json_out: bool) -> None:
    """The tune as JSON alone on stdout, or its tables and verdict."""
    if json_out:
        print(document_json(doc))
        return
    console.print(points_table(doc))
    console.print(ledger_table(doc))
    console.print(verdict(doc), soft_wrap=True, highlight=False)
    console.print(f"tune saved in {out}")
