"""The CLI contract under generated hostile input: every command that returns by itself is run
with Hypothesis-drawn hostile values for one of its options or arguments at a time (control and
escape sequences, markup, '²', huge, negative and non-finite numbers, path escapes, deep JSON,
canary secrets, hostile files), against the fault server lying in the modes of
docs/failure-semantics.md. Asserted for every run: the exit code is 0, 1, 2 or 130; no traceback;
no canary in any byte written; nothing written outside the workspace (``--output``, the database).
Commands that serve until stopped (serve-local, ui, launch, sweep) or measure many levels (capacity)
are left to their own tests and the contract table."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.cli import app
from test_fault_suite import fault_server

CANARY = "sk-CANARYfuzz0123456789"
SERVING = {"serve-local", "ui", "launch", "sweep", "version", "capacity"}  # serve until stopped, or (capacity) run up to 24 levels
COMMAND = typer.main.get_command(app)
OUTPUTS = {"--output", "-o", "--markdown", "--db", "--plot", "--log"}  # options naming where to write
LIES = ["--dup", "--choices", "--after-done", "--inflate", "--deflate", "--cached", "--crlf", "--comments", "--split"]


def _workspace(root: Path, url: str) -> dict[str, str]:
    """Hostile files in ``root``; returns the placeholders a value may use."""
    files = {
        "deep.json": '{"a": ' + "[" * 3000 + "]" * 3000 + "}",
        "binary.dat": "\udcff\x00\x81binary",
        "evil.yaml": f"name: r\nengine: custom\ncommand: [sh, -o, pipefail, -c, 'serve {{v}}']\ndefaults: {{v: '1'}}\nenv: {{TOKEN: {CANARY}}}\n",
        "evil.log": f"INFO 11-20 10:00:00 [utils.py:1] non-default args: {{'api_key': '{CANARY}', 'model': '\x1b]0;x\x07'}}\n" + "y" * 100_000 + "\n",
        "evil.jsonl": json.dumps({"prompt": f"hi {CANARY}", "output_tokens": 2}) + "\n" + '{"prompt": ' + "[" * 3000 + "]" * 3000 + "}\n",
        "mix.yaml": "workloads:\n  '../../x': {input_tokens: 8, max_tokens: 2}\nmixes:\n  m: {'../../x': .nan}\n",
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    return {"W": str(root), "URL": url}


HOSTILE = st.sampled_from([
    "", "0", "-1", "²", "1e309", "nan", "inf", "99999999999999999999", "1,²", "1,,2", "x" * 10_000, "\x1b]0;pwned\x07\x1b[2J",
    "[red]x[/red]", "[link=file:///etc]x[/link]", "$x^2$", "=HYPERLINK(\"x\")", "../../escaped", "/abs/escaped", "{W}/deep.json",
    "{W}/binary.dat", "{W}/evil.yaml", "{W}/evil.log", "{W}/evil.jsonl", "{W}/mix.yaml", "{W}/missing", "{URL}",
    f"http://:{CANARY}@127.0.0.1:9/", "{URL}/?api_key=" + CANARY, CANARY, '{"a": ' + "[" * 3000 + "]" * 3000 + "}",
    "qwen3-8b", "Qwen/Qwen3-8B", "acme/not-here", "1,2", "0.5", "m",
])  # fmt: skip


def _base(name: str, out: str) -> list[str]:
    """The arguments a command needs to run at all: the fault server, a small load, an output."""
    if name in ("bench", "suite", "grid"):
        load = {"bench": ["--concurrency", "1", "--requests", "2", "--warmup", "0", "--output-tokens", "2", "--input-tokens", "16"],
                "suite": ["--only", "qa", "--runs", "1"], "grid": ["--pp", "16", "--tg", "2", "--depth", "0", "--concurrency", "1"]}[name]  # fmt: skip
        return ["--url", "{URL}", *load, "--output", out]
    return {"plan": ["--model", "qwen3-8b"], "predict": ["--model", "qwen3-8b", "--concurrency", "1"], "export": ["--output", out + ".csv"],
            "report": ["{W}/run", "--output", out + ".html"], "compare": ["{W}/run"], "explain": ["{W}/run"], "calibrate": ["{W}/run"],
            "import": ["{W}/run"], "show": ["x"], "runs": [], "bootlog": ["{W}/evil.log"], "lint": ["{W}/evil.yaml"],
            "tune": ["{W}/evil.yaml", "--slo", "tpot_p99=50ms", "--vary", "v=1,2", "--output", out]}.get(name, [])  # fmt: skip


def _targets(name: str) -> list[str | None]:
    """The option names of a command, and None for its positional argument (if it has one)."""
    cmd = COMMAND.commands[name]
    return [p.opts[0] for p in cmd.params if p.param_type_name == "option" and p.opts[0] not in ("--help", "--llama-server")] + (
        [None] if any(p.param_type_name == "argument" for p in cmd.params) else [])  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The fault server lying in every mode at once (on different requests), and one real run."""
    lies = [a for i, mode in enumerate(LIES) for a in (mode, f"{len(LIES)}:{i}")]
    root = tmp_path_factory.mktemp("fuzz")
    with fault_server(*lies) as url:
        res = CliRunner().invoke(app, ["bench", "--url", url, "--concurrency", "1", "--requests", "4", "--warmup", "0", "--output-tokens", "4",
                                       "--output", str(root / "run")], env={"SERVELAB_DB": str(root / "seed.db")})  # fmt: skip
        assert res.exit_code == 0, res.output
        yield url, root


@pytest.mark.parametrize("name", sorted(set(COMMAND.commands) - SERVING))
def test_hostile_values_keep_the_contract(served, tmp_path_factory, name):
    url, seeded = served
    targets = _targets(name)

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(target=st.sampled_from(targets), value=HOSTILE)
    def check(target, value):
        ws = tmp_path_factory.mktemp(name)
        (ws / "run").symlink_to(seeded / "run")
        subs = _workspace(ws, url)
        args = [name, *_base(name, str(ws / "out"))]
        args = (args + [value] if target is None else args + [target, value])
        args = [a.replace("{W}", subs["W"]).replace("{URL}", subs["URL"]) for a in args]
        before = {p for p in ws.rglob("*")}
        cwd = os.getcwd()
        os.chdir(ws)
        try:
            res = CliRunner().invoke(app, args, env={"SERVELAB_DB": str(ws / "runs.db"), "FUZZ_KEY": CANARY, "SERVELAB_API_KEY": CANARY})
        finally:
            os.chdir(cwd)
        assert res.exit_code in (0, 1, 2, 130), (args, res.exit_code, res.output[-2000:])
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
        assert "Traceback" not in res.output and CANARY not in res.output, (args, res.output[-2000:])
        written = [p for p in ws.rglob("*") if p not in before and p.is_file() and not p.is_symlink()]
        for p in written:
            assert CANARY.encode() not in p.read_bytes(), (args, p)
        escapes = [p for p in (Path("/abs/escaped"), ws.parent / "escaped", ws.parent.parent / "escaped") if p.exists()]
        for p in escapes:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        assert not escapes or target in OUTPUTS, (args, escapes)  # only where the user pointed an output

    check()
