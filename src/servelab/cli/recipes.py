"""``servelab lint``, ``launch``, ``sweep`` and ``compare``: recipes, their variants and the tuning ledger."""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from servelab.cli.common import console, event_loop_runner, fail, measured, output_dir, remember, serve_until_ctrl_c, sigterm_as_sigint, warn, write_file
from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.rules.lint import lint as lint_recipe
from servelab.rules.lint import quant_of
from servelab.run.measure import Served, bench_options
from servelab.recipes import Recipe, expand, load_recipe, parse_assignments, redact, variant_label, with_hosts
from servelab.report.ledger import DEFAULT_METRICS, METRICS, build, collect, default_baseline, ledger_markdown, ledger_table, load_differences
from servelab.report.table import bench_table
from servelab.store.results import RunResult
from servelab.settings import Target
from servelab.run.sweep import run_sweep

RecipeArg = Annotated[Path, typer.Argument(help="Recipe YAML (servelab's format, or a spark-vllm-docker recipe_version \"1\").", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="NAME=VALUE: a placeholder value, or an engine flag to add (max_num_seqs=64 → --max-num-seqs 64). Repeatable.")]
VaryOpt = Annotated[list[str] | None, typer.Option("--vary", help="NAME=V1,V2,…: one variant per value; several --vary give every combination.")]
HostsOpt = Annotated[str | None, typer.Option("--hosts", help="Cluster hosts over ssh, head first: spark-1,spark-2 (replaces the recipe's cluster.hosts).")]
TrustOpt = Annotated[bool, typer.Option("--trust-recipe", help="Let the recipe put values where servelab's allowlist does not (inside a longer argument, into a program other than a known server, into any environment variable): only for a recipe you wrote. Each command prints what it let through.")]


def _recipe(path: Path, hosts: str | None, trusted: bool) -> Recipe:
    recipe = load_recipe(path, trusted)
    return with_hosts(recipe, hosts) if hosts else recipe


def _show_trusted(recipe: Recipe) -> None:
    """Say what ``--trust-recipe`` let through (after the variants are resolved)."""
    for note in recipe.trust_notes:
        warn(f"--trust-recipe: {note}")


def _fixed(items: list[str] | None) -> dict[str, str]:
    return {k: v[0] for k, v in parse_assignments(items or [], "--set").items()}


def _print_lint(recipe: Recipe, variants: list[dict[str, str]], fixed: dict[str, str], hardware: str | None) -> int:
    """Print the lint findings for the variants; returns how many are warnings or errors."""
    resolved = [recipe.resolve(v, variant_label(v, fixed)) for v in variants]
    colors = {"info": "cyan", "warning": "yellow", "error": "red"}
    findings = lint_recipe(recipe, resolved, hardware)
    for f in findings:
        console.print(f"[{colors[f.severity]}]{f.severity}[/] {f.rule}: {escape(f.message)}", soft_wrap=True, highlight=False)
        console.print(f"  [dim]why: {escape(f.why)}[/]", soft_wrap=True, highlight=False)
    return sum(f.severity != "info" for f in findings)


def lint(
    recipe_file: RecipeArg,
    vary: VaryOpt = None,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile or YAML (default the recipe's hardware): enables the memory checks.")] = None,
    trust_recipe: TrustOpt = False,
) -> None:
    """Check a recipe against known pitfalls (each with its reason); exit 1 when there are warnings."""
    recipe = _recipe(recipe_file, hosts, trust_recipe)
    fixed = _fixed(set_)
    count = _print_lint(recipe, expand(recipe, parse_assignments(vary or [], "--vary"), fixed), fixed, hardware)
    _show_trusted(recipe)
    if count:
        fail(f"{count} finding(s) in {recipe_file}", 1)
    console.print(f"{recipe_file}: no known pitfalls found")


def _print_commands(server: RecipeServer) -> None:
    v = server.resolved
    console.print(f"[bold]{escape(v.label)}[/]: ready when GET {escape(v.ready_url)} answers 200 (timeout {v.ready_timeout_s:.0f} s)", highlight=False)
    for argv in server.commands():
        console.print("  " + shlex.join(redact(argv)), soft_wrap=True, highlight=False, markup=False)


def launch(
    recipe_file: RecipeArg,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    log_dir: Annotated[Path | None, typer.Option(help="Where the server logs go (default a temporary folder).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact commands and exit.")] = False,
    trust_recipe: TrustOpt = False,
) -> None:
    """Start the server a recipe describes, wait until it is ready, and keep it up until Ctrl-C."""
    sigterm_as_sigint()
    try:
        recipe = _recipe(recipe_file, hosts, trust_recipe)
        fixed = _fixed(set_)
        server = RecipeServer(recipe, recipe.resolve(fixed, variant_label(fixed)), log_dir or Path(tempfile.mkdtemp(prefix="servelab-")))
        _show_trusted(recipe)
        if dry_run:
            _print_commands(server)
            return
        timeout = server.resolved.ready_timeout_s
        with console.status(f"starting {recipe.engine} ({recipe.name}); waiting up to {timeout:.0f} s for {server.resolved.ready_url}…"):
            server.start()
    except KeyboardInterrupt:
        fail("interrupted while starting; the server was stopped", 130)

    def wait() -> str:
        head = server.server_procs[0]
        head.process.wait()
        return f"the server stopped: {head.exited()}"

    serve_until_ctrl_c(server.url, f"(logs: {server.log_dir})", wait, server.stop)


def sweep(
    recipe_file: RecipeArg,
    vary: VaryOpt = None,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    output: Annotated[Path | None, typer.Option(help="Sweep directory (default servelab-runs/<time>-sweep-<recipe>); rerun with the same one to resume.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print each variant's exact commands and exit.")] = False,
    trust_recipe: TrustOpt = False,
) -> None:
    """For each variant: launch the recipe's server, run its bench plan, stop; then print the Δ% ledger."""
    sigterm_as_sigint()
    out = output
    try:
        recipe = _recipe(recipe_file, hosts, trust_recipe)
        fixed = _fixed(set_)
        variants = expand(recipe, parse_assignments(vary or [], "--vary"), fixed)
        if dry_run:
            for v in variants:
                _print_commands(RecipeServer(recipe, recipe.resolve(v, variant_label(v, fixed)), Path(".")))
            _show_trusted(recipe)
            return
        _print_lint(recipe, variants, fixed, None)
        _show_trusted(recipe)
        out = output_dir(output, "sweep", f"sweep-{recipe.name}")
        resolved = bench_options(recipe.bench, embedded=False)  # once, every file the load names read before a server starts

        with event_loop_runner() as runner:

            def bench_variant(server: RecipeServer, vdir: Path) -> RunResult:
                options = replace(resolved, recipe=server.info())  # a copy each: a measurement sets its ceiling and server log
                target = Target(url=server.url, hardware=recipe.hardware, quant=quant_of(recipe, server.resolved.argv))  # "% of ceiling" where the recipe names its hardware
                run, _ = measured(runner, Served(server.url, server, vdir), target, options, vdir, recipe.bench.api_key_env)
                console.print(bench_table(run))
                return run

            outcomes = run_sweep(
                recipe, variants, fixed, out, bench_variant, lambda line: console.print(line, highlight=False, soft_wrap=True), console.status
            )
        entries = collect([out])
        ledgers = [build(entries, METRICS[m], default_baseline(entries)) for m in DEFAULT_METRICS]
    except KeyboardInterrupt:
        fail(f"interrupted; the server was stopped and the sweep is in {out} (rerun the same command to resume)" if out else "interrupted", 130)
    for ledger in ledgers:
        console.print(ledger_table(ledger))
    write_file(out / "ledger.md", ledger_markdown(ledgers), "--output")
    console.print(f"sweep saved in {out} (ledger: {out / 'ledger.md'})")
    remember(out)
    bad = [o.variant for o in outcomes if o.status != "complete"]
    if bad:
        fail(f"{len(bad)} variant(s) did not complete: {', '.join(bad)}; see variant.json in each", 1)


def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run directories, sweep directories, or folders of runs.", show_default=False)],
    metric: Annotated[str, typer.Option(help=f"Metrics, comma-separated: {', '.join(METRICS)}.")] = ",".join(DEFAULT_METRICS),
    baseline: Annotated[str | None, typer.Option(help="The run Δ% is measured against: its name or 1-based position (default the first).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables as Markdown to this file.")] = None,
) -> None:
    """The tuning ledger: one table per metric, load levels as columns, Δ% against a baseline, best marked."""
    names = [m.strip() for m in metric.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise ServelabError(f"--metric {unknown[0] if unknown else metric!r} is not a ledger metric; use {', '.join(METRICS)}")
    entries = collect(runs)
    labels = [e.label for e in entries]
    if baseline is None:
        base = default_baseline(entries)
    elif baseline.isdecimal() and 1 <= int(baseline) <= len(entries):
        base = int(baseline) - 1
    elif baseline in labels:
        base = labels.index(baseline)
    else:
        raise ServelabError(f"--baseline {baseline!r} is not one of the runs: {', '.join(labels)} (or 1..{len(entries)})")
    ledgers = [build(entries, METRICS[m], base) for m in names]
    differences = load_differences(entries, base)
    if markdown is not None:  # before the tables: a failure is then the only line
        write_file(markdown, ledger_markdown(ledgers, differences), "--markdown")
    for ledger in ledgers:
        console.print(ledger_table(ledger))
    if differences:
        console.print("[yellow]warning[/] the runs were measured under different loads, so their Δ% compares different work, not a tuning gain: "
                      + escape("; ".join(differences)), soft_wrap=True)  # fmt: skip
    if markdown is not None:
        console.print(f"Markdown written to {markdown}")
