"""``servelab bench`` and ``suite``: measure a server (a URL, or the embedded one) under a load bound to ``servelab.settings``."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from servelab import engines
from servelab.run.options import DoesNotFit
from servelab.cli.bind import LOAD_ALL, TARGET_ALL, bind
from servelab.cli.common import check_output_kind, console, err_console, event_loop_runner, fail, measured, output_dir, remember, sigterm_as_sigint
from servelab.errors import ServelabError
from servelab.rules.explain import explain
from servelab.load.apis import templated
from servelab.run.measure import bench_options, serve
from servelab.run.options import Ceiling
from servelab.plan.calibration import calibration
from servelab.report.explain_table import explain_table
from servelab.report.table import bench_table, repeats_table, server_table, suite_table, turns_table
from servelab.store.results import RunResult
from servelab.settings import Load, Target
from servelab.guards.untrusted import for_filename
from servelab.workloads.suites import Workload, load_workloads, pick


@bind(load=(Load, LOAD_ALL), target=(Target, TARGET_ALL))
def bench(
    load: Load,
    target: Target,
    output: Annotated[Path | None, typer.Option(help="Run directory (default servelab-runs/<time>-<model>).")] = None,
) -> None:
    """Closed-loop benchmark at each concurrency level; prints a table and writes a run directory."""
    sigterm_as_sigint()
    run_dir = output
    try:
        check_output_kind(output, "run")
        options = bench_options(load, embedded=target.url is None, first_look=True)  # every file read before a server starts
        with ExitStack() as stack, event_loop_runner() as runner:
            served = serve(stack, target, run_dir, console.status)
            run_dir = served.run_dir  # the embedded server's decides it: Ctrl-C names it
            run, run_dir = measured(runner, served, target, options, run_dir, load.api_key_env)
    except KeyboardInterrupt:
        fail(f"interrupted; the partial run is in {run_dir}" if run_dir and (run_dir / "run.json").exists() else "interrupted", 130)
    _print_run(run, options.ceiling)
    console.print(f"run saved in {run_dir}", markup=False)
    remember(run_dir)
    if run.status != "complete":
        fail(f"the run is partial: {run.partial_reason}; what ran is in {run_dir}", 1)
    if run.failed:
        failed = sum(lv.failed_requests for lv in run.levels)
        fail(f"{failed} measured requests failed; see {run_dir / run.records_file}", 1)


def _print_run(run: RunResult, ceiling: Ceiling | None) -> None:
    """A run's tables, findings, notes, predict's curve beside it (vLLM with a ceiling) and the prompt check."""
    console.print(bench_table(run))
    if (repeated := repeats_table(run)) is not None:
        console.print(repeated)
    if (turns_by_level := turns_table(run)) is not None:
        console.print(turns_by_level)
    if (server := server_table(run)) is not None:
        console.print(server)
    colors = {"info": "cyan", "warning": "yellow", "error": "red"}
    for f in run.findings:
        console.print(f"[{colors[f.severity]}]{f.severity}[/] {f.kind}: {escape(f.message)}", soft_wrap=True)
    for note in run.notes:  # what the run left out and why (dataset prompts or mix workloads longer than the context), also in run.json
        console.print(f"[cyan]note[/] {escape(note)}", soft_wrap=True)
    if (c := ceiling) is not None and run.endpoint.engine == engines.plan_engine().name:  # the prediction models this engine's scheduler
        try:
            cal = calibration(None, c.spec, c.fmt)
            console.print(explain_table(explain(run, c.spec, c.fmt, c.hardware, cal, tp=c.tp), f"measured vs servelab predict ({c.hardware.name})", cal))
        except ServelabError as exc:
            err_console.print(f"[yellow]no prediction beside the run:[/] {escape(str(exc))}")
    check = run.prompt_check
    if check and check.checked_requests:
        console.print(
            f"prompt tokens vs server usage: {check.mismatched_requests}/{check.checked_requests} requests differ, "
            f"max |Δ| {check.max_abs_deviation_tokens}, mean Δ {check.mean_deviation_tokens:+.2f} "
            + (f"(the server adds {check.template_overhead_tokens} special tokens; no chat template)" if not templated(run.load.endpoint)
               else f"(chat template adds {check.template_overhead_tokens} tokens)")
        )


SUITE_LOAD = ("tokenizer", "api_key_env", "workloads_file", "ignore_eos", "slo", "request_timeout_s", "seed")


@bind(load=(Load, SUITE_LOAD), target=(Target, TARGET_ALL))
def suite(
    load: Load,
    target: Target,
    only: Annotated[str | None, typer.Option(help="Workloads to run, e.g. qa,code,rag_8k (default all but rag_128k).")] = None,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per workload, after one warm-up.")] = 3,
    output: Annotated[Path | None, typer.Option(help="Directory for the runs, one per workload (default servelab-runs/<time>-suite).")] = None,
) -> None:
    """Single-stream suite: for each workload 1 warm-up + N runs; median and spread of decode tok/s, TTFT, E2E."""
    sigterm_as_sigint()
    rows: list[tuple[Workload, RunResult | None, str | None]] = []
    try:
        chosen = pick(only, load_workloads(load.workloads_file)[0])
        base = output_dir(output, "suite")
        with ExitStack() as stack, event_loop_runner() as runner:
            served = serve(stack, target, base, console.status)
            for w in chosen:
                shape = {"concurrency": [1], "requests": runs, "warmup": 1, "input_tokens": w.input_tokens, "output_tokens": w.max_tokens,
                         "ignore_eos": bool(load.ignore_eos), "workloads_file": None}  # natural answers unless --ignore-eos  # fmt: skip
                options = bench_options(load.model_copy(update=shape), served.embedded)
                options.lang, options.instruction, options.question = w.lang, w.instruction, w.question
                if w.multi_turn:  # a session workload (agentic): 1 warm-up + N sessions, each its turns
                    options.mix, options.workloads = {w.name: 1.0}, {w.name: w}
                try:
                    run, _ = measured(runner, served, target, options, base / for_filename(w.name), load.api_key_env)
                    rows.append((w, run, None))
                except DoesNotFit as exc:
                    err_console.print(f"[yellow]skipped {escape(w.name)}:[/] {escape(str(exc))}", soft_wrap=True)
                    rows.append((w, None, "skipped: longer than the server's context"))
    except KeyboardInterrupt:
        fail("interrupted; finished workloads are saved", 130)
    console.print(suite_table(rows, runs))
    console.print(f"runs saved in {base}")
    remember(base)
    if any(run is not None and run.failed for _, run, _ in rows):
        fail("some requests failed; see the runs", 1)
