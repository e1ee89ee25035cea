"""The ``servelab`` command line (Typer + Rich), assembled from one module per command group.

Each command is a thin adapter: parse the options, call the library, print. Shared consoles,
option parsers and the one-line error exit are in ``servelab.cli.common``; exit codes there.
"""

from __future__ import annotations

import typer

from servelab import __version__
from servelab.cli import bench, plan, recipes, results, server
from servelab.cli.common import console

app = typer.Typer(help="Measure OpenAI-compatible LLM inference servers correctly.", no_args_is_help=True, add_completion=False)
app.command()(bench.bench)
app.command("serve-local")(server.serve_local)
app.command()(bench.suite)
app.command()(bench.grid)
app.add_typer(plan.plan_app, name="plan")
for command in (recipes.lint, recipes.launch, recipes.sweep, recipes.compare):
    app.command()(command)
app.command("import")(results.import_)
for command in (results.runs, results.show, results.export, results.report, results.ui, server.bootlog):
    app.command()(command)


@app.command()
def version() -> None:
    """Print the servelab version."""
    console.print(__version__)
