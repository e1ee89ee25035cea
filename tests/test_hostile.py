"""Hostile cases, one class of docs/failure-semantics.md at a time (issue 51): what a user sees (exit
code, one line, no traceback) and what is kept (files byte for byte). Fakes on 127.0.0.1 only, no
network, each case bounded in time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.recipes import load_recipe

RECIPES = Path(__file__).parent.parent / "recipes"


def cli(*args: str, env: dict | None = None):
    """Run the CLI in-process: (exit code, everything printed)."""
    res = CliRunner().invoke(app, list(args), env=env)
    return res.exit_code, res.output


def one_line_error(code: int, out: str, *needles: str) -> None:
    """The user saw exit 2 and one ``error:`` line holding ``needles``, no traceback."""
    assert code == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), out
    assert "Traceback" not in out and all(n in out for n in needles), out


# --- recipes on an allowlist (servelab/recipes/trust.py) -------------------------------------------------

INJECTED = [
    ["env", "-S", "sh -c 'echo serving {v}; exec vllm serve m'"],
    ["awk", 'BEGIN{{system("echo {v}")}}'],
    ["sh", "-c", "exec vllm serve m --x \"$1\"", "sh", "{v}"],  # a positional parameter: still a shell
    ["python3", "-c", "import os; os.system('{v}')"],
    ["perl", "-e", "print {v}"],
    ["nice", "vllm", "serve", "{v}"],  # a wrapper in front of a known server
    ["timeout", "5", "vllm", "serve", "{v}"],
    ["xargs", "-I{{}}", "sh", "-c", "{v}"],
    ["ssh", "host", "vllm serve {v}"],
    ["/bin/sh", "{v}"],
]


@pytest.mark.parametrize("command", INJECTED)
@pytest.mark.parametrize("verb", ["lint", "launch"])
def test_a_value_reaches_no_program_but_a_known_server(tmp_path, monkeypatch, command, verb):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nengine: vllm\ncommand: {json.dumps(command)}\ndefaults: {{v: '1'}}\n")
    code, out = cli(verb, str(path), "--set", "v=$(touch marker)")
    one_line_error(code, out, "r.yaml, line 3", "--trust-recipe")
    assert not (tmp_path / "marker").exists()


def test_trust_recipe_lets_a_recipe_through_and_says_so(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: custom\ncommand: [env, -S, \"sh -c 'serve {v}'\"]\ndefaults: {v: '1'}\n")
    code, out = cli("launch", str(path), "--set", "v=2", "--dry-run", "--trust-recipe")
    assert code == 0 and "--trust-recipe: " in out and "serve 2" in out, out


@pytest.mark.parametrize(("values", "fine"), [
    ({"n": "64"}, True), ({"n": "-1"}, True), ({"n": "--trust-remote-code"}, False), ({"n": "-x"}, False),
    ({"k": "3"}, True), ({"k": '3, "model": "/evil"'}, False), ({"k": "3}"}, False), ({"k": "3 4"}, False),
    ({"max_num_seqs": "--api-key=x"}, False), ({"enforce_eager": "true"}, True),
])  # fmt: skip
def test_a_known_server_takes_whole_values_and_plain_words(tmp_path, values, fine):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: vllm\ncommand: [vllm, serve, m, --max-num-seqs, '{n}', --speculative-config, "
                    "'{{\"method\": \"mtp\", \"num_speculative_tokens\": {k}}}']\ndefaults: {n: '8', k: '1'}\n")
    recipe = load_recipe(path)
    if fine:
        recipe.resolve(values)
    else:
        with pytest.raises(ServelabError, match="--trust-recipe"):
            recipe.resolve(values)


def test_the_program_a_placeholder_names_must_be_a_known_server(tmp_path):
    recipe = load_recipe(RECIPES / "llama-cpp-gemma-270m.yaml")
    assert recipe.resolve({"embedded_llama_server": "/opt/llama.cpp/bin/llama-server"}).argv[0].endswith("llama-server")
    with pytest.raises(ServelabError, match="'/bin/sh', which is not a server servelab knows"):
        recipe.resolve({"embedded_llama_server": "/bin/sh"})


def test_appended_flags_reach_a_known_server_only(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: custom\ncommand: [my-server, --port, '{port}']\n")
    recipe = load_recipe(path)
    assert recipe.resolve({"port": "9000"}).argv == ["my-server", "--port", "9000"]  # {port} is an integer, checked: anywhere
    with pytest.raises(ServelabError, match="'my-server', which is not a server servelab knows"):
        recipe.resolve({"max_num_seqs": "64"})
    with pytest.raises(ServelabError, match="not a TCP port"):
        recipe.resolve({"port": "$(touch x)"})


@pytest.mark.parametrize("name", ["VLLM_ATTENTION_BACKEND", "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "LD_PRELOAD", "RAY_RUNTIME_ENV_HOOK"])
def test_no_environment_variable_takes_a_placeholder(tmp_path, name):
    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nengine: vllm\ncommand: [vllm, serve, m]\nenv: {{{name}: '{{v}}'}}\ndefaults: {{v: x}}\n")
    with pytest.raises(ServelabError, match=f"line 4: a placeholder in the environment variable {name}"):
        load_recipe(path)
    assert load_recipe(path, trusted=True).resolve().env == {name: "x"}


@given(program=st.from_regex(r"[a-z][a-z0-9_./-]{0,12}", fullmatch=True), at=st.integers(1, 3), shape=st.sampled_from(["{v}", "x{v}", "--f={v}"]))
@settings(max_examples=80, deadline=None)
def test_any_unknown_program_with_a_placeholder_is_refused(tmp_path_factory, program, at, shape):
    if program.rsplit("/", 1)[-1] in ("vllm", "llama-server", "servelab-llama-server"):
        return
    command = [program, *["a"] * (at - 1), shape]
    path = tmp_path_factory.mktemp("r") / "r.yaml"
    path.write_text(f"name: r\nengine: vllm\ncommand: {json.dumps(command)}\ndefaults: {{v: '1'}}\n")
    with pytest.raises(ServelabError, match="--trust-recipe"):
        load_recipe(path).resolve()


@given(value=st.text(min_size=1, max_size=40).filter(lambda v: "\x00" not in v))
@settings(max_examples=120, deadline=None)
def test_a_whole_value_stays_one_argument_or_is_refused(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("r") / "r.yaml"
    path.write_text("name: r\nengine: vllm\ncommand: [vllm, serve, '{model}', '--served-model-name={v}']\nmodel: m\ndefaults: {v: x}\n")
    recipe = load_recipe(path)
    try:
        argv = recipe.resolve({"model": value, "v": value}).argv
    except ServelabError as exc:
        assert "starts with '-'" in str(exc)
        return
    assert argv[:4] == ["vllm", "serve", value, f"--served-model-name={value}"]


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_recipes_are_on_the_allowlist(recipe):
    load_recipe(recipe).resolve()


# --- writing an output (cli/common.py write_file) ----------------------------------------------------

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "runs" / "vllm-0.25-h100-qwen3-8b-run.json"


def _run_dir(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.json").write_bytes(FIXTURE_RUN.read_bytes())
    (folder / "records.jsonl").write_text("")
    return folder


def test_an_output_never_replaces_a_run_or_a_device(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    a, b = _run_dir(tmp_path / "a"), _run_dir(tmp_path / "b")
    kept = (b / "run.json").read_bytes()
    for args in (["report", str(a), "-o", str(b / "run.json")], ["report", str(a), "-o", "/dev/full"], ["export", "-o", str(b / "records.jsonl")]):
        code, out = cli(*args)
        assert code == 2 and "Traceback" not in out and len(out.strip().splitlines()) == 1, (args, out)
    assert (b / "run.json").read_bytes() == kept and Path("/dev/full").is_char_device()


# --- untrusted text (guards/untrusted.py outside, guards/redaction.py scrub) ------------------------


def test_credentials_in_a_boot_log_and_an_environment_are_masked(tmp_path, monkeypatch):
    from servelab.guards.redaction import remember_environment, scrub
    from servelab.metrics.bootlog import parse_bootlog

    facts = parse_bootlog("WARNING 11-20 10:00:00 [x.py:1] proxy said Authorization: Token abcdefgh12345678 \x1b[2J\n"
                          "WARNING 11-20 10:00:01 [x.py:1] x-api-key: zyxwvut987 cookie: sid=s3ss10n\n")
    text = " ".join(facts.warnings)
    assert "abcdefgh12345678" not in text and "zyxwvut987" not in text and "s3ss10n" not in text and "\x1b" not in text, text
    remember_environment({"MY_SERVICE_TOKEN": "tok-value-9876", "PATH": "/usr/bin"})
    assert scrub("server echoed tok-value-9876") == "server echoed ***" and scrub("/usr/bin") == "/usr/bin"


def test_a_recipe_env_value_and_a_secret_variant_are_never_printed(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: vllm\ncommand: [vllm, serve, m]\nenv: {token: envsecret123, key: envsecret456}\n"
                    "cluster:\n  hosts: [127.0.0.2, gpu-2]\n")
    code, out = cli("launch", str(path), "--dry-run", "--set", "api_key=setsecret789")
    assert code == 0 and "envsecret" not in out and "setsecret789" not in out and "token=***" in out, out


# --- outside numbers -------------------------------------------------------------------------------


def test_impossible_metrics_are_left_out_and_reported():
    from servelab.metrics.server import compute, parse
    from servelab.rules.diagnose import _server_findings  # noqa: F401 (the finding's text is checked in test_diagnose)

    before = parse("vllm:prompt_tokens_total 10\nvllm:generation_tokens_total 5\nvllm:kv_cache_usage_perc 0.1\n")
    after = parse("vllm:prompt_tokens_total +Inf\nvllm:generation_tokens_total 7e300\nvllm:kv_cache_usage_perc NaN\n")
    stats = compute("vllm", before, after, [])
    assert stats.prompt_tokens is None and stats.generation_tokens is None and stats.peak_kv_usage is None
    assert set(stats.rejected) >= {"prompt_tokens", "generation_tokens"}
    shares = compute("vllm", before, parse("vllm:prompt_tokens_total 20\nvllm:kv_cache_usage_perc 5\n"), [])
    assert shares.peak_kv_usage is None and "peak_kv_usage" in shares.rejected and shares.prompt_tokens == 10


def test_cached_tokens_above_the_prompt_are_not_believed():
    from servelab.load.outcome import Texts, disbelieve_usage
    from servelab.values.records import RequestRecord

    record = RequestRecord(index=0, phase="measured", level=1, concurrency=1, queued=0.0, max_tokens=4, prompt_tokens=10, cached_prompt_tokens=50)
    disbelieve_usage(record, Texts("", "", 0))
    assert record.cached_prompt_tokens is None and "cached_above_prompt" in record.anomalies


def _safetensors(folder: Path, header: object) -> Path:
    import struct

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "max_position_embeddings": 512}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg))
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 64)
    return folder


@pytest.mark.parametrize("tensor", [
    {"dtype": "F16", "shape": [4, 4], "data_offsets": [-32, 0]},
    {"dtype": "F16", "shape": [2**62, 4], "data_offsets": [0, 32]},
    {"dtype": "F16", "shape": [-4, 4], "data_offsets": [0, 32]},
    {"dtype": "Q9_K", "shape": [4, 4], "data_offsets": [0, 32]},
    {"dtype": "F16", "shape": [4, 4], "data_offsets": [32, 0]},
])  # fmt: skip
def test_a_crafted_safetensors_header_is_one_line_never_a_figure(tmp_path, tensor):
    folder = _safetensors(tmp_path / "m", {"model.layers.0.mlp.up_proj.weight": tensor})
    code, out = cli("plan", "--model", str(folder), "--json")
    one_line_error(code, out, "safetensors header")


def test_a_length_prefix_of_two_to_the_63_is_a_damaged_header_not_the_formula(tmp_path):
    """A safetensors file whose first 8 bytes claim a 2⁶³-byte header: huggingface_hub refuses to parse it, and plan says the
    checkpoint is damaged instead of planning from the formula as if there were no shards."""
    import struct

    folder = _safetensors(tmp_path / "m", {})
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    code, out = cli("plan", "--model", str(folder))
    one_line_error(code, out, "safetensors header could not be read", "damaged")


def test_shards_not_downloaded_are_not_a_damaged_checkpoint(tmp_path):
    """Git LFS pointers in place of the shards (GIT_LFS_SKIP_SMUDGE=1) beside the index plan from the index; an empty
    placeholder with no index plans from the formula: neither is called damaged."""
    lfs = _safetensors(tmp_path / "lfs", {})
    (lfs / "model.safetensors").write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 1234\n")
    (lfs / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123456}, "weight_map": {"lm_head.weight": "model.safetensors"}}))
    code, out = cli("plan", "--model", str(lfs))
    assert code == 0 and "total_size" in out and "damaged" not in out, out
    empty = _safetensors(tmp_path / "empty", {})
    (empty / "model.safetensors").write_bytes(b"")
    code, out = cli("plan", "--model", str(empty))
    assert code == 0 and "damaged" not in out, out


def test_a_header_nested_100000_deep_is_one_line(tmp_path):
    folder = _safetensors(tmp_path / "m", "[" * 100_000 + "]" * 100_000)
    code, out = cli("plan", "--model", str(folder))
    assert code in (0, 2) and "Traceback" not in out and "RecursionError" not in out.replace("(RecursionError)", ""), out


def test_a_boolean_is_not_a_layer_count(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": True, "vocab_size": 64, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out = cli("plan", "--model", str(tmp_path / "config.json"))
    one_line_error(code, out, "num_hidden_layers")


def test_a_run_json_with_nan_or_a_boolean_figure_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    doc = json.loads(FIXTURE_RUN.read_text())
    nan = _run_dir(tmp_path / "nan")
    (nan / "run.json").write_text(FIXTURE_RUN.read_text().replace('"p50": ', '"p50": NaN, "x": ', 1))
    code, out = cli("import", str(nan))
    one_line_error(code, out, "NaN")
    code, out = cli("explain", str(nan), "--hardware", "h100-sxm")
    one_line_error(code, out, "NaN")
    boolean = _run_dir(tmp_path / "bool")
    doc["levels"][0]["output_throughput_tok_s"] = -414.0
    (boolean / "run.json").write_text(json.dumps(doc))
    for verb in (["import"], ["compare"], ["explain", "--hardware", "h100-sxm"]):  # every reader of a run directory
        code, out = cli(*verb[:1], str(boolean), *verb[1:])
        one_line_error(code, out, "run.json", "greater than or equal to 0")


# --- strict JSON and one database ---------------------------------------------------------------------


def test_export_writes_strict_json(tmp_path):
    from servelab.guards import jsonfile

    assert jsonfile.dumps({"a": float("inf"), "b": [float("nan"), 1.5]}) == '{"a": null, "b": [null, 1.5]}'
    with pytest.raises(ServelabError, match="Infinity"):
        jsonfile.loads('{"a": Infinity}', "x", finite=True)


def test_concurrent_first_imports_create_one_database(tmp_path):
    import subprocess
    import sys

    run = _run_dir(tmp_path / "run")
    env = {**__import__("os").environ, "SERVELAB_DB": str(tmp_path / "new.db")}
    procs = [subprocess.Popen([sys.executable, "-m", "servelab", "import", str(run)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(8)]  # fmt: skip
    outs = [(p.wait(timeout=120), p.stdout.read()) for p in procs]
    assert all(code == 0 for code, _ in outs), [out for code, out in outs if code]


def test_a_damaged_database_column_is_one_line(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    assert cli("import", str(_run_dir(tmp_path / "run")))[0] == 0
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("UPDATE levels SET ttft_ms_p50 = 'abc'")
    for args in (["runs"], ["export", "-o", str(tmp_path / "x.csv")]):
        code, out = cli(*args)
        one_line_error(code, out, "damaged", "ttft_ms_p50")


def test_plan_reads_its_data_whatever_the_locale(tmp_path):
    import subprocess
    import sys

    env = {**__import__("os").environ, "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "latin-1", "PYTHONUTF8": "0"}
    res = subprocess.run([sys.executable, "-m", "servelab", "plan", "--model", "qwen3-8b", "--json"], env=env, capture_output=True, timeout=120)
    assert res.returncode == 0 and json.loads(res.stdout)["family"], res.stderr[-800:]


# --- the Hub (plan/hub.py): bounded, offline means offline, the cache stays the cache, one line ------


@pytest.fixture
def hub_env(tmp_path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return env | {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "SERVELAB_HUB_DEADLINE_S": "3", "COLUMNS": "200"}


class RawServer:
    """A TCP server on 127.0.0.1 that answers each connection with ``behave(conn)`` in a thread; ``hits`` counts connections."""

    def __init__(self, behave):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.hits, self.behave, self.open = 0, behave, True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading

        while self.open:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            threading.Thread(target=self.behave, args=(conn,), daemon=True).start()

    def close(self):
        self.open = False
        self.sock.close()


def _silent(conn):
    conn.recv(65536)
    threading_event = __import__("threading").Event()
    threading_event.wait(60)  # never answers (the daemon thread dies with the test process)


def _trickle(conn):
    import time

    conn.recv(65536)
    try:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100:
            conn.send(bytes([byte]))
            time.sleep(0.5)
    except OSError:  # servelab gave up and closed the connection: the point
        pass


def _drop(conn):
    conn.recv(65536)
    conn.close()


def _plan(args: list[str], env: dict):
    import subprocess
    import sys
    import time

    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "servelab", "plan", *args], env=env, capture_output=True, text=True, timeout=120)
    return res, time.monotonic() - started


@pytest.mark.parametrize("behave", [_silent, _trickle, _drop], ids=["silent", "trickle", "drop"])
def test_a_hub_that_hangs_trickles_or_drops_is_one_line_within_the_deadline(hub_env, behave):
    server = RawServer(behave)
    try:
        res, took = _plan(["--model", "acme/tiny"], hub_env | {"HF_ENDPOINT": server.url})
    finally:
        server.close()
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "acme/tiny" in res.stderr and took < 40, (took, res.stderr)


def test_offline_means_no_request_at_all(hub_env):
    server = RawServer(_drop)
    try:
        res, _ = _plan(["--model", "acme/tiny"], hub_env | {"HF_ENDPOINT": server.url, "HF_HUB_OFFLINE": "1"})
    finally:
        server.close()
    assert res.returncode == 2 and "HF_HUB_OFFLINE" in res.stderr and server.hits == 0, res.stderr


def test_a_cache_reference_outside_the_cache_is_one_line(hub_env, tmp_path):
    repo = tmp_path / "hf" / "hub" / "models--acme--evil"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("../../../../../../../../etc")
    (tmp_path / "etc").mkdir()
    res, _ = _plan(["--model", "acme/evil"], hub_env | {"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_hub_header_nested_deep_is_one_line(hub_env, tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fakehub import FakeHub

    _safetensors(tmp_path / "repo", "[" * 100_000 + "]" * 100_000)
    with FakeHub({"acme/deep": tmp_path / "repo"}) as hub:
        res, _ = _plan(["--model", "acme/deep"], hub_env | {"HF_ENDPOINT": hub.url})
    assert res.returncode in (0, 2) and "Traceback" not in res.stderr and "RecursionError" not in res.stdout, res.stderr


# --- bounded reads and waits ------------------------------------------------------------------------


def test_a_trace_of_one_endless_line_is_refused_after_a_mebibyte():
    from servelab.workloads.traces import load_trace

    with pytest.raises(ServelabError, match="line 1: longer than 1,048,576 characters"):
        load_trace(Path("/dev/zero"), "mooncake")


def test_requests_n_stops_reading_a_trace_after_n(tmp_path):
    from servelab.workloads.traces import load_trace

    path = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}\n'
    path.write_text(good * 5 + "not json\n" * 3)  # what comes after the first 5 is never read
    assert len(load_trace(path, first=5).requests) == 5
    with pytest.raises(ServelabError, match="line 6"):
        load_trace(path)


def test_repeats_with_a_trace_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}\n')
    code, out = cli("bench", "--url", "http://127.0.0.1:9", "--trace", str(path), "--repeats", "3")
    one_line_error(code, out, "--repeats")


def test_capacity_stops_at_requests_and_never_passes_a_probe_without_requests(tmp_path, monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_capacity import batch_server

    from servelab.metrics.slo import SloResult

    assert not SloResult(attainment=None, good_requests=0, goodput_rps=None, goodput_tok_s=None, checks=[]).passed
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    with batch_server(0.002, 0.001) as url:
        code, out = cli("capacity", "--url", url, "--slo", "ttft_p99=1000s", "--requests", "4", "--repeats", "0", "--input-tokens", "64",
                        "--output-tokens", "16", "--output", str(tmp_path / "cap"), "--json")  # fmt: skip
    assert code == 0, out
    doc = json.loads(out[out.index("{\n"):])
    assert doc["max_concurrency"] == 4 and doc["capped"] == 4 and "--requests" in doc["capped_by"]
    assert max(p["load"] for p in doc["probes"]) == 4


def test_no_cudagraph_padding_for_levels_without_a_batch():
    from servelab.rules.diagnose import _padding
    from servelab.store.results import RunResult

    run = RunResult.model_validate_json(FIXTURE_RUN.read_text())
    for lv in run.levels:
        lv.concurrency = 0  # a trace's or an open loop's levels
    assert _padding(run, None) == []


# --- a second replay's cases (kept back from the first pass) ------------------------------------------


@pytest.mark.parametrize("line", [
    "x-goog-api-key: AIzaSyA1234567890abcdefgh", "github token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "aws AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "token=tok0000dddd1111",
    "Bearer\teyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "non-default args: {'api_key': ['k1secretvalue']}",
])  # fmt: skip
def test_credentials_by_shape_are_masked(line):
    from servelab.guards.redaction import scrub

    secret = line.split()[-1].split("=")[-1].strip("[]'}")
    assert secret not in scrub(line), scrub(line)


def test_ordinary_log_text_is_kept():
    from servelab.guards.redaction import scrub

    text = "sha1 0123456789abcdef0123456789abcdef01234567 key=max_num_seqs model=Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"
    assert scrub(text) == text


def test_a_server_that_echoes_its_recipe_secrets_leaks_none(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = bin_dir / "llama-server"
    server.write_text('#!/bin/sh\necho "starting with token=$MY_TOKEN key=$SOME_KEY pw=$DB_PASSWORD argv: $*"\nexit 1\n')
    server.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: llama.cpp\ncommand: [llama-server, --port, '{port}', --api-key, cliapikey9999]\n"
                    "env: {MY_TOKEN: envtok1234abcd, SOME_KEY: envkey5678efgh, DB_PASSWORD: dbpw0000zzzz}\nready: {timeout_s: 5}\n")
    code, out = cli("launch", str(path), "--log-dir", str(tmp_path / "logs"))
    assert code == 2 and "did not start" in out, out
    assert not any(s in out for s in ("envtok1234abcd", "envkey5678efgh", "dbpw0000zzzz", "cliapikey9999")), out


@pytest.mark.parametrize("args", [
    ["bootlog", "/dev/zero"], ["plan", "--from-log", "/dev/zero"], ["import", "/dev/zero"], ["lint", "/dev/zero"],
    ["plan", "--model", "qwen3-8b", "--hardware", "/dev/zero"],
])  # fmt: skip
def test_an_endless_file_is_read_no_further_than_a_bound(args):
    code, out = cli(*args)
    assert code in (1, 2) and "Traceback" not in out and "MemoryError" not in out and len(out.strip().splitlines()) <= 2, out


def test_encoding_errors_never_end_in_a_traceback(tmp_path):
    import subprocess
    import sys

    env = {**__import__("os").environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    for args in (["predict", "--model", "qwen3-8b", "--hardware", "h100-sxm"], ["bench", "--help"]):
        res = subprocess.run([sys.executable, "-m", "servelab", *args], env=env, capture_output=True, timeout=120)
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr[-600:]


def test_a_hardware_profile_of_booleans_is_refused(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("name: Bool GPU\nmemory_gib: true\nunified: 'yes'\nbandwidth_gbs: true\ntflops: {bf16: true}\n")
    code, out = cli("plan", "--model", "qwen3-8b", "--hardware", str(path))
    one_line_error(code, out, "memory_gib")


def test_a_run_json_with_booleans_or_floats_for_integers_is_refused(tmp_path):
    doc = json.loads(FIXTURE_RUN.read_text())
    for bad in (True, 1e30):
        run = _run_dir(tmp_path / f"r{bad}")
        doc["levels"][0]["concurrency"] = bad
        (run / "run.json").write_text(json.dumps(doc))
        code, out = cli("explain", str(run), "--hardware", "h100-sxm")
        one_line_error(code, out, "run.json")


def test_an_open_loop_start_is_held_within_its_bounds():
    from servelab.metrics.slo import SloResult
    from servelab.run.capacity import search

    asked: list[float] = []

    def probe(rate: float) -> SloResult:
        asked.append(rate)
        return SloResult(attainment=1.0, good_requests=4, goodput_rps=rate, goodput_tok_s=None, checks=[])

    found = search(probe, closed_loop=False, start=1e9, repeats=0, maximum=lambda: 10_000.0)
    assert max(asked) <= 10_000 and found.capped == 10_000
    asked.clear()
    search(lambda r: asked.append(r) or SloResult(attainment=0.0, good_requests=0, goodput_rps=0.0, goodput_tok_s=None, checks=[]),
           closed_loop=False, start=0.001, repeats=0, minimum=100 / 600)  # fmt: skip
    assert min(asked) >= 100 / 600
