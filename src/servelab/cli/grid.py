"""``servelab grid``: pp/tg speeds over depth × concurrency (llama-bench style), resumable."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from servelab.run.options import DoesNotFit
from servelab.cli.bind import TARGET_ALL, bind
from servelab.cli.common import console, err_console, event_loop_runner, fail, measured, output_dir, remember, sigterm_as_sigint, write_file
from servelab.errors import ServelabError
from servelab.store.grid import CellStats, cell_stats, cells, grid_csv, llama_benchy_csv, read_llama_benchy
from servelab.run.measure import bench_options, serve
from servelab.report.table import grid_table
from servelab.store.results import load_run
from servelab.settings import MAX_STREAMS, Load, Target, parse_int_list


GRID_LOAD = ("tokenizer", "api_key_env", "seed", "slo", "request_timeout_s")


@bind(load=(Load, GRID_LOAD), target=(Target, TARGET_ALL))
def grid(
    load: Load,
    target: Target,
    pp: Annotated[str, typer.Option(help="New prompt tokens per request (chat template included), e.g. 512,2048.")] = "512",
    tg: Annotated[str, typer.Option(help="Generated tokens per request, e.g. 128.")] = "128",
    depth: Annotated[str, typer.Option(help="Tokens of earlier conversation before the prompt, e.g. 0,4096,16384.")] = "0",
    concurrency: Annotated[str, typer.Option(help="Concurrent requests per cell, e.g. 1,2,5,10 (a grid dimension: default 1, as llama-benchy).")] = "1",
    runs: Annotated[int, typer.Option(min=1, help="Measured requests per stream in each cell.")] = 3,
    output: Annotated[Path | None, typer.Option(help="Grid directory; rerun with the same one to resume (finished cells are skipped).")] = None,
    import_llama_benchy: Annotated[Path | None, typer.Option(help="Show a llama-benchy result (its CSV or Markdown table) as a servelab grid instead of measuring.")] = None,
) -> None:
    """pp/tg speeds over depth × concurrency (llama-bench style), resumable; writes grid.csv and llama-benchy.csv."""
    sigterm_as_sigint()
    if import_llama_benchy is not None:
        _show_imported(import_llama_benchy, output)
        return
    rows: list[CellStats] = []
    try:
        order = cells(parse_int_list(pp, "--pp"), parse_int_list(tg, "--tg"), parse_int_list(depth, "--depth", minimum=0),
                      parse_int_list(concurrency, "--concurrency", maximum=MAX_STREAMS), load.seed)  # fmt: skip
        base = output_dir(output, "grid")
        with ExitStack() as stack, event_loop_runner() as runner:
            served = serve(stack, target, base, console.status)
            too_long: list[str] = []  # cells the server's context cannot hold: a rerun would fail them again
            for cell in order:
                out = base / cell.name
                if (out / "run.json").exists():
                    earlier, records = load_run(out)
                    if earlier.status == "complete":
                        console.print(f"{cell.name}: done before, skipped")
                        rows.append(cell_stats(cell, records))
                        continue
                cell_load = load.model_copy(update={  # `runs` batches of `concurrency` requests started together
                    "concurrency": [cell.concurrency], "repeats": runs, "requests": cell.concurrency, "warmup": 1, "input_tokens": cell.depth + cell.pp,
                    "output_tokens": cell.tg, "ignore_eos": True, "prefix_cache": "shared-prefix" if cell.depth else "cold",
                    "shared_prefix_tokens": max(cell.depth, 1), "closed_loop": "burst",
                })  # fmt: skip
                try:
                    measured(runner, served, target, bench_options(cell_load, served.embedded), out, load.api_key_env)
                except KeyboardInterrupt:
                    raise
                except ServelabError as exc:  # recorded, and the grid goes on
                    out.mkdir(parents=True, exist_ok=True)
                    write_file(out / "error.txt", str(exc) + "\n", "--output")
                    err_console.print(f"[red]{cell.name} failed:[/] {escape(str(exc))}", soft_wrap=True)
                    if isinstance(exc, DoesNotFit):
                        too_long.append(cell.name)
                    continue
                rows.append(cell_stats(cell, load_run(out)[1]))
    except KeyboardInterrupt:
        fail("interrupted; finished cells are saved, rerun with the same --output to resume", 130)
    _report(base, rows, too_long, len(order))


def _show_imported(path: Path, output: Path | None) -> None:
    """A llama-benchy result shown as a servelab grid (and written as grid.csv to ``output``)."""
    try:
        imported = read_llama_benchy(path)
    except (OSError, ValueError) as exc:
        fail(f"--import-llama-benchy: {exc}")
    console.print(grid_table(imported))
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        write_file(output / "grid.csv", grid_csv(imported), "--output")


def _report(base: Path, rows: list[CellStats], too_long: list[str], cells_asked: int) -> None:
    """The grid's tables (grid.csv, llama-benchy.csv, the console) and its exit: 1 when cells the
    context cannot hold were left out, or cells or requests failed that a rerun may yet measure."""
    rows.sort(key=lambda s: (s.cell.pp, s.cell.tg, s.cell.depth, s.cell.concurrency))
    write_file(base / "grid.csv", grid_csv(rows), "--output")
    served = next((load_run(base / s.cell.name)[0].endpoint.model for s in rows), "model")
    write_file(base / "llama-benchy.csv", llama_benchy_csv(rows, served), "--output")
    console.print(grid_table(rows))
    console.print(f"cells saved in {base}; tables in {base / 'grid.csv'} and, in llama-benchy's columns, {base / 'llama-benchy.csv'}")
    remember(base)
    retryable = len(rows) + len(too_long) < cells_asked or any(s.failed for s in rows)  # cells or requests a rerun may yet measure
    if too_long:
        fail(f"{len(too_long)} cell(s) need more than the server's context and were not measured ({', '.join(too_long)}): lower --depth, --pp or --tg, "
             "or serve a longer context; " + ("the other failures can be retried with the same --output" if retryable else "the rest of the grid is complete"), 1)  # fmt: skip
    if retryable:
        fail("some cells or requests failed; rerun with the same --output to retry them", 1)
