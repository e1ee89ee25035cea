"""Named workloads, user workload files, and servelab suite against the embedded server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.store.results import load_run
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


def test_duration_bounded_mix_draws_workloads_and_states_its_window(llama, tmp_path):
    f = tmp_path / "mix.yaml"
    f.write_text("workloads:\n  short_en: {input_tokens: 64, max_tokens: 8}\n  short_hu: {input_tokens: 96, max_tokens: 8, lang: hu}\n"
                 "  too_long: {input_tokens: 5000, max_tokens: 8}\nmixes:\n  both: {short_en: 1, short_hu: 1, too_long: 1}\n")  # fmt: skip
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--mix", str(f), "--workers", "2", "--duration", "6s", "--output", str(out)])
    assert res.exit_code == 0, res.output  # requests still in flight at the deadline are incomplete, not failures
    run, records = load_run(out)
    level = run.levels[0]
    assert level.window_s == pytest.approx(6.0) and level.concurrency == 2
    assert level.ok >= 2 and level.incomplete <= 2 and level.failed_requests == 0
    measured = [r for r in records if r.phase == "measured"]
    assert {r.workload for r in measured} == {"short_en", "short_hu"}
    for r in measured:
        if r.status == "ok":
            assert r.prompt_tokens == r.expected_prompt_tokens == {"short_en": 64, "short_hu": 96}[r.workload]
    assert any("too_long left out of the mix" in n for n in run.notes)
    assert "note workload too_long left out of the mix" in " ".join(res.output.split())
    assert run.load.mix == {"short_en": 1, "short_hu": 1, "too_long": 1}
    assert "mix short_en ×1" in " ".join(res.output.split())


def test_unknown_mix_is_one_line():
    res = cli.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--mix", "nope"])
    assert res.exit_code == 2 and "--mix 'nope': unknown" in res.output


def test_mix_file_errors_name_the_mix_option(tmp_path):
    (tmp_path / "broken.yaml").write_text("mixes: [\n")
    (tmp_path / "two.yaml").write_text("mixes: {a: {qa: 1}, b: {code: 1}}\n")
    res = cli.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--mix", str(tmp_path / "broken.yaml")])
    assert res.exit_code == 2 and "--mix" in res.output and "not valid YAML at line 2" in res.output
    res = cli.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--mix", str(tmp_path / "two.yaml")])
    assert res.exit_code == 2 and "defines 2 mixes" in res.output


def test_dataset_prompts_in_file_order_with_their_output_lengths(llama, tmp_path):
    ds = tmp_path / "d.jsonl"
    ds.write_text('{"prompt": "Name three rivers of Europe.", "output_tokens": 6}\n'
                  '{"conversations": [{"from": "human", "value": "What is a ledger?"}, {"from": "gpt", "value": "A record book."}]}\n'
                  '{"prompt": "' + "word " * 5000 + '"}\n')  # fmt: skip
    out = tmp_path / "run"
    res = cli.invoke(app, ["bench", "--url", llama.url, "--dataset", str(ds), "--concurrency", "1", "--requests", "4", "--warmup", "0", "--output", str(out)])
    assert res.exit_code == 0, res.output
    run, records = load_run(out)
    measured = [r for r in records if r.phase == "measured"]
    assert [r.max_tokens for r in measured] == [6, 4, 6, 4]  # the reply "A record book." sets 4 tokens; the long one is left out
    assert all(r.prompt_tokens == r.expected_prompt_tokens and r.workload == "dataset" for r in measured)
    assert any("1 of 3 dataset prompts left out" in n for n in run.notes)
    assert "note 1 of 3 dataset prompts left out" in " ".join(res.output.split())  # said on the console too, not only in run.json


@pytest.mark.parametrize(("line", "message"), [("not json", "line 1: not JSON"), ('{"x": 1}', 'line 1: needs a "prompt"'),
                                                ('{"prompt": "a", "output_tokens": -1}', "output_tokens must be")])  # fmt: skip
def test_bad_dataset_line_is_named(tmp_path, line, message):
    ds = tmp_path / "d.jsonl"
    ds.write_text(line + "\n")
    res = cli.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--dataset", str(ds)])
    assert res.exit_code == 2 and message in res.output
