"""Named workloads, user workload files, and servelab suite against the embedded server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.results import load_run
from servelab.workloads.suites import BUILTIN, load_workloads, pick

cli = CliRunner()


def test_builtin_workloads_cover_the_field():
    assert {"qa", "code", "json_kie", "multilingual", "rag_8k", "rag_32k", "rag_128k"} <= set(BUILTIN)
    assert BUILTIN["multilingual"].lang == "hu" and BUILTIN["rag_128k"].input_tokens == 131072
    assert [w.name for w in pick(None, BUILTIN)] == [n for n in BUILTIN if n != "rag_128k"]


def test_user_file_adds_workloads_and_mixes(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("workloads:\n  review: {input_tokens: 600, max_tokens: 50, instruction: 'Review:', question: 'Risks?'}\nmixes:\n  office: {qa: 3, review: 1}\n")
    workloads, mixes = load_workloads(f)
    assert workloads["review"].name == "review" and workloads["review"].input_tokens == 600
    assert mixes["office"] == {"qa": 3, "review": 1} and "mixed_typical" in mixes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workloads:\n  x: {input_tokens: many, max_tokens: 5}\n", "workloads.x.input_tokens"),
        ("workloads:\n  x: {input_tokens: 5, max_tokens: 5, colour: red}\n", "workloads.x.colour"),
        ("mixes:\n  m: {nope: 1}\n", "unknown workloads: nope"),
        ("workloads: [\n", "not valid YAML at line"),
    ],
)
def test_malformed_file_gets_one_line_naming_the_field(tmp_path, text, message):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(ServelabError, match=message.replace(".", r"\.")) as err:
        load_workloads(f)
    assert "\n" not in str(err.value)


def test_unknown_workload_name():
    with pytest.raises(ServelabError, match="--only nope"):
        pick("qa,nope", BUILTIN)


def test_suite_runs_and_skips_what_does_not_fit(llama, tmp_path):
    out = tmp_path / "suite"
    res = cli.invoke(app, ["suite", "--url", llama.url, "--only", "qa,rag_32k", "--runs", "2", "--output", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "skipped rag_32k" in text and "longer than the server's context" in text
    run, records = load_run(out / "qa")
    assert run.load.input_tokens == 256 and run.levels[0].ok == 2
    assert [r.phase for r in records] == ["calibration", "warmup", "measured", "measured"]
    assert all(r.prompt_tokens == 256 for r in records if r.phase == "measured")
    assert not (out / "rag_32k").exists()  # refused before anything was sent
