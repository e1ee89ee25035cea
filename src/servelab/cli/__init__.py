"""The ``servelab`` command line (Typer + Rich), assembled from one module per command group.

Each command is a thin adapter: parse the options, call the library, print. Shared consoles,
option parsers and the one-line error exit are in ``servelab.cli.common``; exit codes there. Every
command is wrapped so that library and file-system errors end as one line (``one_line_errors``),
and Click's own usage errors are one line too (:class:`OneLineUsageErrors`).

Layer: cli. May import: report, run, rules, launch, recipes, settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors (docs/architecture.md).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from servelab import __version__
from servelab.cli import bench, calibrate, capacity, grid, plan, predict, recipes, results, server, tune
from servelab.cli.common import console, err_console, one_line_errors
from servelab.guards.redaction import remember_environment


MAX_INT = 10_000_000  # no integer option means more (tokens, requests, runs); one with its own max keeps it
UNBOUNDED = {"seed"}


def _bounded_numbers(group: Any) -> None:
    """Every option of every command refuses a non-finite number (``inf``, ``nan``, ``1e309``) and an
    integer above ``MAX_INT`` (or its own max) as a usage error naming it: a value no run can mean
    would otherwise be planned or allocated (a billion-token prompt, 10²⁰ requests)."""
    for command in group.commands.values():
        if hasattr(command, "commands"):
            _bounded_numbers(command)
        for param in command.params:
            if getattr(param.process_value, "bounded", False):
                continue

            def process_value(ctx: Any, value: Any, _orig: Any = param.process_value, _param: Any = param) -> Any:
                out = _orig(ctx, value)
                if isinstance(out, float) and not math.isfinite(out):
                    raise typer.BadParameter(f"{value!r} is not a finite number", ctx=ctx, param=_param)
                if isinstance(out, int) and not isinstance(out, bool) and out > MAX_INT and _param.name not in UNBOUNDED:
                    raise typer.BadParameter(f"{out} is above {MAX_INT:,}: give a number a run can mean", ctx=ctx, param=_param)
                return out

            process_value.bounded = True  # type: ignore[attr-defined]
            param.process_value = process_value


class OneLineUsageErrors(TyperGroup):
    """Click's usage errors (a bad option value, an unknown option, a missing argument) as one line
    naming the option and where its help is, instead of a usage box; exit code 2 as before."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        _bounded_numbers(self)
        remember_environment(os.environ)  # HF_TOKEN's value is masked wherever a server or a log echoes it
        for stream in (sys.stdout, sys.stderr):  # a terminal in LC_ALL=C or PYTHONIOENCODING=ascii: "?" for "·", not a UnicodeEncodeError
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="replace")
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:  # the base of Typer's (vendored Click's) exceptions
            if type(exc).__name__ == "NoArgsIsHelpError":  # `servelab` alone: the help, as Click prints it
                exc.show()
            else:
                ctx = getattr(exc, "ctx", None)
                where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
                err_console.print(f"[bold red]error:[/] {escape(exc.format_message())}{escape(where)}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(help="Measure OpenAI-compatible LLM inference servers correctly.", no_args_is_help=True, add_completion=False, cls=OneLineUsageErrors)
COMMANDS = {
    "bench": bench.bench, "serve-local": server.serve_local, "suite": bench.suite, "grid": grid.grid,
    "lint": recipes.lint, "launch": recipes.launch, "sweep": recipes.sweep, "compare": recipes.compare,
    "import": results.import_, "runs": results.runs, "show": results.show, "export": results.export, "report": results.report,
    "ui": results.ui, "bootlog": server.bootlog, "predict": predict.predict_cmd, "explain": predict.explain_cmd, "calibrate": calibrate.calibrate_cmd,
    "capacity": capacity.capacity_cmd, "tune": tune.tune_cmd,
}  # fmt: skip
for name, command in COMMANDS.items():
    app.command(name)(one_line_errors(command))
app.add_typer(plan.plan_app, name="plan")


@app.command()
def version() -> None:
    """Print the servelab version."""
    console.print(__version__)
