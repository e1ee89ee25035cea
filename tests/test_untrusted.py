"""Text from outside at every sink (servelab/guards/untrusted.py): hostile strings (control and escape
sequences, Rich markup, HTML, math text, formulas, paths, secrets) through the terminal, HTML,
plots, CSV and file names, as functions (Hypothesis) and end to end from a server's model id."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.markup import escape
from rich.table import Table
from typer.testing import CliRunner

from servelab.cli import app
from servelab.cli.common import SafeConsole
from servelab.store.imports import read_results
from servelab.report import plots
from servelab.report.html import run_page
from servelab.guards.untrusted import CONTROL, for_csv, for_filename, plain
from test_fault_suite import fault_server

PIECES = ["\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\x00", "\u202e", "[red]", "[/red]", "[link=file:///etc]x[/link]", "<script>alert(1)</script>",
          "$x^2$", "$", "=HYPERLINK(\"http://x\")", "+1", "-2", "@SUM(A1)", "../", "/etc/passwd", "..", " sk-abcdefgh12345678 ", "é", "\n", "\t"]  # fmt: skip
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=8).map("".join)
SAFE_NAME = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._=,+-")


@given(HOSTILE)
def test_every_sink_is_safe_for_any_text(text):
    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=True, width=120)
    console.print(f"[bold]model[/] {escape(text)}")  # how the CLI prints untrusted text: escaped into its markup
    console.print(text, markup=False)
    table = Table(title=escape(text))
    table.add_column(escape(text))
    table.add_row(escape(text))
    console.print(table)
    shown = buf.getvalue()
    rich_codes = shown.replace("\x1b[", "")  # Rich's own styling codes (CSI) are the only escape sequences left
    assert "\x1b" not in rich_codes and "\x9b" not in shown and "\x07" not in shown and "sk-abcdefgh12345678" not in shown
    assert not CONTROL.search(plain(text))
    cell = for_csv(text)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    name = for_filename(text)
    assert name and set(name) <= SAFE_NAME and not name.startswith(".") and len(name) <= 120


def test_a_hostile_model_id_is_text_in_the_terminal_the_report_the_plots_and_the_export(tmp_path, monkeypatch):
    evil = "=HYPERLINK(\"x\")$x^2$\x1b]0;pwned\x07\x1b[2J[/red]<script>alert(1)</script>"
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    with fault_server("--model-id", evil) as url:
        res = CliRunner().invoke(app, ["bench", "--url", url, "--concurrency", "1", "--requests", "4", "--warmup", "0", "--output-tokens", "4",
                                       "--output", str(tmp_path / "run")])  # fmt: skip
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert "\x1b]" not in res.output and "\x1b[2J" not in res.output
    (run,) = read_results(tmp_path / "run")
    page = run_page(run)  # plots with a $…$ legend render (math text off) and the page escapes
    assert "<script>alert" not in page and "\x1b" not in page and page.count("data:image/png;base64,") >= 3
    assert plots.throughput([run]).startswith(b"\x89PNG")
    out = tmp_path / "export.csv"
    res = CliRunner().invoke(app, ["export", "--output", str(out)])
    assert res.exit_code == 0, res.output
    (row,) = list(csv.DictReader(out.open(encoding="utf-8")))
    assert row["model"].startswith("'=HYPERLINK") and "\x1b" not in row["model"]


def test_a_workload_named_like_a_path_stays_inside_the_output(tmp_path):
    names = ["../../escaped", "/abs/escaped", ".."]
    workloads = tmp_path / "w.yaml"
    workloads.write_text("workloads:\n" + "".join(f"  {json.dumps(n)}: {{input_tokens: 16, max_tokens: 4}}\n" for n in names))
    out = tmp_path / "deep" / "out"
    with fault_server() as url:
        res = CliRunner().invoke(app, ["suite", "--url", url, "--workloads-file", str(workloads), "--only", ",".join(names),
                                       "--runs", "1", "--output", str(out)])  # fmt: skip
    assert "Traceback" not in res.output, res.output
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and out not in p.parents and p != workloads]
    assert not outside and not Path("/abs/escaped").exists(), outside
    assert os.listdir(out), res.output


def test_concurrency_axes_label_their_ticks_as_numbers_with_math_text_off():
    """Math text is off for untrusted text; a log axis's own tick labels ("$\\mathdefault{2^{4}}$")
    must then be plain numbers, not that source printed under the plot."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8, 16], [1, 2, 3, 4, 5])
    plots._concurrency_axes([(ax, "t")])
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert labels and all("$" not in s and "mathdefault" not in s for s in labels), labels
    assert {"1", "4", "16"} <= set(labels)
