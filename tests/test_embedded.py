"""The embedded server's backends: the xllamacpp wheel (default) and a native llama-server binary."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import run
from test_bench_local import Hooks, _bench

from servelab.server import local
from servelab.run.bench import BenchOptions
from servelab.errors import ServelabError
from servelab.server.local import LocalServer


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _native() -> str | None:
    """A native llama-server to compare with: $SERVELAB_TEST_LLAMA_SERVER, or the 'native' extra's build."""
    if os.environ.get("SERVELAB_TEST_LLAMA_SERVER"):
        return os.environ["SERVELAB_TEST_LLAMA_SERVER"]
    try:
        return str(local.native_binary(local.PACKAGED_NATIVE))
    except ServelabError:
        return None


def test_embedded_server_uses_gemmas_own_chat_template(llama):
    """The packaged GGUF has no chat template; llama.cpp would fall back to ChatML without ours."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    prompt = _post(llama.url + "/apply-template", {"messages": messages})["prompt"]
    assert prompt == "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert "<|im_start|>" not in prompt
    props = json.loads(urllib.request.urlopen(llama.url + "/props", timeout=5).read())
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 4096
    models = json.loads(urllib.request.urlopen(llama.url + "/v1/models", timeout=5).read())
    assert [m["id"] for m in models["data"]] == [local.MODEL_ALIAS]
    assert llama.backend.startswith("xllamacpp ")


def test_launcher_refuses_unknown_flags_and_bad_values(tmp_path):
    res = subprocess.run([sys.executable, "-m", "servelab.server.embedded", "--spec-type", "telepathy"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "--spec-type 'telepathy' is not one of" in res.stderr and "draft-simple" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "servelab.server.embedded", "--chat-template-file", str(tmp_path / "none.jinja")], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "--chat-template-file" in res.stderr and "Traceback" not in res.stderr


def test_interrupted_start_leaves_no_server(tmp_path, monkeypatch):
    """Ctrl-C while the server loads (KeyboardInterrupt in the readiness wait) stops it before propagating."""
    started = []

    def interrupted(url, timeout_s, procs, what):
        started.extend(procs)
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "wait_ready", interrupted)
    server = LocalServer(tmp_path / "server.log")
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert started and started[0].process is not None
    assert started[0].process.poll() is not None  # the child is gone, not orphaned


def test_embedded_server_exits_when_its_parent_is_killed(tmp_path):
    """servelab killed with SIGKILL (no chance to stop anything) still leaves no server behind."""
    script = (
        "import sys; from pathlib import Path; from servelab.server.local import LocalServer\n"
        f"s = LocalServer(Path({str(tmp_path / 'server.log')!r})).start()\n"
        "print(s.port, s.proc.process.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port, child = map(int, parent.stdout.readline().split())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # polling a condition: the watchdog notices the parent's exit within a second
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the embedded server outlived its parent"
        time.sleep(0.1)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_unknown_native_binary_is_one_line(tmp_path):
    with pytest.raises(ServelabError, match="--llama-server /no/such/llama-server: no such executable"):
        LocalServer(tmp_path / "server.log", llama_server="/no/such/llama-server").start()


@pytest.mark.skipif(_native() is None, reason="no native llama-server: set SERVELAB_TEST_LLAMA_SERVER or pip install -e '.[native]'")
def test_native_llama_server_gives_the_same_token_counts(tmp_path):
    """The same prompts through the wheel and a native build: same template, same counts."""
    counts = {}
    for name, choice in (("wheel", None), ("native", _native())):
        opts = BenchOptions(concurrency=[2], requests=4, warmup=0, input_tokens=200, output_tokens=16, seed=3)
        with LocalServer(tmp_path / f"{name}.log", llama_server=choice) as server:
            prompt = _post(server.url + "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})["prompt"]
            result = run(_bench(server.url, opts, tmp_path / name, Hooks()))
        level = result.levels[0]
        counts[name] = (prompt, level.ok, level.prompt_tokens, level.output_tokens, level.server.prompt_tokens, level.server.generation_tokens)
    assert counts["wheel"] == counts["native"]
    assert counts["wheel"][2] == 4 * 200 and counts["wheel"][3] == 4 * 16


def test_ctrl_c_during_the_embedded_start_names_no_partial_run(tmp_path, monkeypatch):
    """bench interrupted while its embedded server loads: exit 130, and no 'partial run' pointing at
    a directory without run.json."""
    from typer.testing import CliRunner

    from servelab.cli import app

    def interrupted(url, timeout_s, procs, what):
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "wait_ready", interrupted)
    res = CliRunner().invoke(app, ["bench", "--output", str(tmp_path / "run")])
    assert res.exit_code == 130 and "interrupted" in res.output and "partial run" not in res.output, res.output
    assert not (tmp_path / "run" / "run.json").exists()
