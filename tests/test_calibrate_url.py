"""``servelab calibrate --url``: the design measured on a real server (the embedded llama.cpp with
Gemma 3 270M), then the fit with priors and each parameter's interval (issue 53)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml
from typer.testing import CliRunner

from conftest import scrape_idle, wait_for_records
from servelab.cli import app
from servelab.plan.calibration import calibration
from servelab.plan.design import design_levels
from servelab.store.results import load_run


def test_calibrate_url_runs_its_design_and_fits_with_priors(llama, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    out, run_dir = tmp_path / "cal.yaml", tmp_path / "design"
    scrape_idle(llama.url)  # an earlier test's cut-off requests would share the 2 CI cores with the design's windows
    res = CliRunner().invoke(app, ["calibrate", "--url", llama.url, "--hardware", "h100-sxm", "--model", "gemma-3-270m", "--quant", "gguf-q4_k_m",
                                   "--input-tokens", "64", "--output-tokens", "8", "--duration", "6s", "--max-streams", "4", "--output", str(run_dir),
                                   "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    run, _ = load_run(run_dir)
    assert design_levels("gemma-3-270m", "gguf-q4_k_m", "h100-sxm", 1, 64, 8) == [1, 16, 64]  # an H100's vLLM: one stream, a quarter, 64
    assert [lv.concurrency for lv in run.levels] == [1, 2, 4]  # the embedded server's 4 slots (--max-streams)
    assert run.load.closed_loop == "stagger" and run.load.prefix_cache == "cold"
    cal = calibration(str(out))
    assert "prior vllm-0.25-h100-bf16" in cal.source and "leave-one-out" in cal.error
    assert set(cal.uncertainty) == {"bw_efficiency", "compute_efficiency", "layer_overhead_us", "eager_step_ms"}
    for key, (lo, hi) in cal.uncertainty.items():
        assert lo <= getattr(cal, key) <= hi, key
    assert "uncertainty (one standard deviation)" in res.output and yaml.safe_load(out.read_text())["mine"]["uncertainty"]


def test_calibrate_url_needs_hardware_and_model(tmp_path):
    res = CliRunner().invoke(app, ["calibrate", "--url", "http://127.0.0.1:9", "--hardware", "h100-sxm"])
    assert res.exit_code == 2 and "calibrate --url needs --hardware" in res.output and "Traceback" not in res.output


def test_ctrl_c_during_the_design_leaves_the_partial_run_and_names_it(llama, tmp_path):
    out = tmp_path / "design"
    env = {**os.environ, "SERVELAB_DB": str(tmp_path / "runs.db")}
    proc = subprocess.Popen([sys.executable, "-m", "servelab", "calibrate", "--url", llama.url, "--hardware", "h100-sxm", "--model", "gemma-3-270m",
                             "--quant", "gguf-q4_k_m", "--input-tokens", "64", "--output-tokens", "8", "--duration", "60s", "--max-streams", "4",
                             "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    wait_for_records(proc, out / "records.jsonl", 4, 120)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and f"the partial design run is in {out}" in " ".join(output.split()), output
    result, recs = load_run(out)
    assert result.status == "partial" and len(recs) >= 4
