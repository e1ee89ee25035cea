"""``servelab sweep`` over the embedded llama.cpp recipe, end to end: two variants, a variant
that fails to start, resuming, and the Δ% ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app

ROOT = Path(__file__).resolve().parent.parent
cli = CliRunner()
pytestmark = pytest.mark.server


def small_recipe(tmp_path: Path) -> Path:
    """The example llama.cpp recipe with a short bench plan."""
    text = (ROOT / "recipes" / "llama-cpp-gemma-270m.yaml").read_text()
    text = text.split("bench:")[0] + "bench:\n  concurrency: [1, 2]\n  requests: 4\n  input_tokens: 64\n  output_tokens: 16\n"
    path = tmp_path / "gemma.yaml"
    path.write_text(text)
    return path


def test_sweep_of_two_variants_ends_in_a_ledger_and_resumes(tmp_path):
    recipe, out = small_recipe(tmp_path), tmp_path / "sweep"
    # served as the catalog's name, on a named profile: the runs get servelab plan's ceiling
    recipe.write_text(recipe.read_text().replace("gemma-3-270m-q4_k_m", "gemma-3-270m") + "hardware: h100-sxm\n")
    res = cli.invoke(app, ["sweep", str(recipe), "--vary", "parallel=1,2", "--output", str(out)])
    assert res.exit_code == 0, res.output
    index = json.loads((out / "sweep.json").read_text())
    assert index["variants"] == ["parallel=1", "parallel=2"]
    for name, slots in (("parallel=1", "1"), ("parallel=2", "2")):
        run = json.loads((out / name / "run.json").read_text())
        assert run["status"] == "complete" and [lv["ok"] for lv in run["levels"]] == [4, 4]
        assert run["recipe"]["variant"] == name and run["recipe"]["values"] == {"parallel": slots}
        assert run["recipe"]["command"][run["recipe"]["command"].index("--parallel") + 1] == slots
        assert run["boot"] is not None  # the server log kept with the run was read
        assert run["ceiling"]["hardware"] == "NVIDIA H100 SXM5 80GB" and run["levels"][0]["decode_ceiling_tok_s"] > 0
        assert (out / name / "server.log").stat().st_size > 0
    ledger = (out / "ledger.md").read_text()
    assert "### output throughput, tok/s (higher is better; Δ% vs parallel=1)" in ledger
    assert "| parallel=1 | " in ledger and "(base)" in ledger and "★" in ledger and "%)" in ledger

    again = cli.invoke(app, ["sweep", str(recipe), "--vary", "parallel=1,2", "--output", str(out)])
    assert again.exit_code == 0, again.output
    assert again.output.count("already complete, skipped") == 2 and "starting" not in again.output


def test_a_variant_with_a_bad_flag_is_recorded_and_the_sweep_goes_on(tmp_path):
    recipe, out = small_recipe(tmp_path), tmp_path / "sweep"
    recipe.write_text(recipe.read_text() + "variants:\n  - {no_such_flag: 1}\n  - {parallel: 1}\n")
    res = cli.invoke(app, ["sweep", str(recipe), "--output", str(out)])
    assert res.exit_code == 1
    assert json.loads((out / "parallel=1" / "run.json").read_text())["status"] == "complete"
    status = json.loads((out / "no_such_flag=1" / "variant.json").read_text())
    assert status["status"] == "failed-to-start"
    assert "llama.cpp server (recipe 'gemma-3-270m on llama.cpp', variant no_such_flag=1) did not start" in status["error"]
    assert "exited with code" in status["error"] and "--no-such-flag" in status["error"]  # the server's own log lines
    assert "1 variant(s) did not complete: no_such_flag=1" in res.output
    ledger = (out / "ledger.md").read_text()
    assert "| no_such_flag=1 | failed to start (the error is in its variant.json)" in ledger and "(base)" in ledger  # the next variant is the baseline


def test_ctrl_c_stops_the_server_and_leaves_the_variant_partial(tmp_path):
    import signal
    import subprocess
    import sys
    import urllib.request

    recipe, out = small_recipe(tmp_path), tmp_path / "sweep"
    recipe.write_text(recipe.read_text().replace("requests: 4", "duration_s: 5"))  # SIGINT lands inside the c=2 level
    proc = subprocess.Popen([sys.executable, "-m", "servelab", "sweep", str(recipe), "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        for line in proc.stdout:  # blocks until servelab prints; no sleeps
            if "running the bench plan" in line:
                url = line.split("ready at ")[1].split(";")[0]
                break
        for line in proc.stdout:
            if line.startswith("c=1:"):  # a level finished: the run is on disk
                break
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 130
    finally:
        proc.kill()
    assert "interrupted; the server was stopped" in " ".join(rest.split())
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)
    run = json.loads((out / "default" / "run.json").read_text())
    levels = [(lv["concurrency"], lv["cut_short"]) for lv in run["levels"]]  # c=2 is there, cut short, if SIGINT came after its warm-up
    assert run["status"] == "partial" and levels in ([(1, False)], [(1, False), (2, True)])
    assert run["partial_reason"] == "interrupted by the user (Ctrl-C)"
    variant = json.loads((out / "default" / "variant.json").read_text())  # the interrupted variant says so too
    assert variant["status"] == "partial" and variant["error"] == "interrupted by the user (Ctrl-C)"
