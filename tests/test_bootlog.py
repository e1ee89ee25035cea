"""servelab bootlog on real published startup logs (sources cited in each fixture) and a real llama.cpp log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.cli import app
from servelab.metrics.bootlog import parse_bootlog

FIX = Path(__file__).parent / "fixtures" / "bootlogs"
cli = CliRunner()


def log(name: str) -> str:
    """The fixture without its '# source' header."""
    return "\n".join(line for line in (FIX / name).read_text().splitlines() if not line.startswith("# "))


INDEX = yaml.safe_load((FIX / "INDEX.yaml").read_text())


def test_every_fixture_is_indexed_with_its_source():
    assert sorted(e["file"] for e in INDEX) == sorted(p.name for p in FIX.glob("*.log"))
    for entry in INDEX:
        header = "".join(line for line in (FIX / entry["file"]).read_text().splitlines() if line.startswith("# "))
        if entry["source"].startswith("https://"):
            assert entry["source"] in header, entry["file"]
        else:
            assert entry["source"].startswith("servelab's own"), entry["file"]


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_fixture_facts(entry):
    """Each fact the index states for a real published log is extracted: a new format is one failing row."""
    f = parse_bootlog(log(entry["file"]))
    for fact, expected in entry["facts"].items():
        if fact == "max_concurrency":
            got = [f.max_concurrency.context_tokens, f.max_concurrency.factor] if f.max_concurrency else None
        elif fact == "pool_kinds":
            got = [p.kind for p in f.kv_pools]
        else:
            got = getattr(f, fact)
        if isinstance(expected, float):
            assert got == pytest.approx(expected, rel=1e-3), f"{entry['file']}: {fact}"
        else:
            assert got == expected, f"{entry['file']}: {fact}"


def test_vllm_011_warnings_are_kept():
    f = parse_bootlog(log("vllm-0.11.log"))
    assert any("padding layers" in w for w in f.warnings) and any("PIECEWISE" in w for w in f.warnings)


def test_llamacpp_json_log_lines():
    """The 2024 server's --log-format json (one object per line; "msg", or "message" before April 2024)."""
    lines = [
        '{"tid":"140301","timestamp":1714497121,"level":"INFO","function":"init","line":650,"msg":"initializing slots","n_slots":2}',
        '{"tid":"140301","timestamp":1714497121,"level":"INFO","function":"init","line":659,"msg":"new slot","id_slot":0,"n_ctx_slot":1024}',
        '{"tid":"140301","timestamp":1714497121,"level":"INFO","function":"init","line":659,"msg":"new slot","id_slot":1,"n_ctx_slot":1024}',
        '{"tid":"140301","timestamp":1714497123,"level":"INFO","function":"main","line":3031,"msg":"HTTP server listening","port":"8080"}',
        '{"not": "a llama.cpp line", "function": 3}',
    ]
    f = parse_bootlog("\n".join(lines))
    assert (f.engine, f.slots, f.max_model_len, f.kv_cache_tokens, f.ready_s) == ("llama.cpp", 2, 1024, 2048, 2.0)
    assert f.unrecognised_lines == 1


def test_rules_say_where_they_were_seen():
    from servelab.engines import all_engines

    with_rules = [e for e in all_engines() if e.rules]
    assert {e.name for e in with_rules} >= {"vllm", "sglang", "llama.cpp"}
    for engine in with_rules:
        assert all(rule.seen_in for rule in engine.rules), engine.name


def test_vllm_033_one_line_format_with_ansi_colours():
    """The 0.33 format strings (server-facts.md §2.1), as vLLM prints them with colours on a terminal."""
    green, reset = "\x1b[32m", "\x1b[0m"
    lines = [
        "(APIServer pid=1) INFO 11-20 09:00:00 [startup.py:88] vLLM server version 0.33.0, serving model Qwen/Qwen3-8B",
        "(APIServer pid=1) INFO 11-20 09:00:01 [startup.py:90] non-default args: {'model': 'Qwen/Qwen3-8B', 'max_num_seqs': 64}",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:00:05 [cuda.py:300] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER'].",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:00:40 [gpu_model_runner.py:3000] Model loading took 15.27 GiB memory and 30.123456 seconds",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:01:10 [monitor.py:40] torch.compile took 25.10 s in total",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:01:12 [gpu_worker.py:400] Available KV cache memory: 50.12 GiB",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:01:12 [kv_cache_utils.py:1300] GPU KV cache size: 364,960 tokens, Maximum concurrency for 32,768 tokens per request: 11.14x",
        "(EngineCore_DP0 pid=7) INFO 11-20 09:01:30 [gpu_model_runner.py:4000] Graph capturing finished in 17 secs, took 0.56 GiB",
        "(APIServer pid=1) INFO 11-20 09:01:35 [launcher.py:50] Application startup complete.",
    ]
    text = "\n".join(line.replace("INFO", f"{green}INFO{reset}", 1) for line in lines)
    f = parse_bootlog(text)
    assert (f.engine, f.version, f.attention_backend) == ("vllm", "0.33.0", "FLASH_ATTN")
    assert f.non_default_args == {"model": "Qwen/Qwen3-8B", "max_num_seqs": 64}
    assert (f.weights_gib, f.weights_load_s, f.compile_s, f.kv_cache_gib) == (15.27, 30.123456, 25.10, 50.12)
    assert f.kv_cache_tokens == 364960 and (f.max_concurrency.context_tokens, f.max_concurrency.factor) == (32768, 11.14)
    assert (f.graph_capture_s, f.graph_capture_gib) == (17, 0.56)
    assert f.ready_s == 95  # 09:00:00 → 09:01:35


def test_llamacpp_real_log_keeps_unknown_lines():
    f = parse_bootlog(log("llamacpp-embedded.log"))
    assert f.model.endswith("gemma-3-270m-q4_k_m.gguf") and f.ready_s == pytest.approx(1.742, abs=0.01)
    assert f.unrecognised_lines > 0 and f.unrecognised  # kept and counted


def test_cli_json_keys_and_stdin(tmp_path):
    res = cli.invoke(app, ["bootlog", "-", "--json"], input=log("vllm-0.11.log"))
    assert res.exit_code == 0
    out = json.loads(res.output)
    for key in ("engine", "version", "weights_gib", "weights_load_s", "compile_s", "graph_capture_s", "kv_cache_gib",
                "kv_cache_tokens", "max_concurrency", "cudagraph_sizes", "attention_backend", "moe_backend", "warnings"):  # fmt: skip
        assert key in out
    assert out["max_concurrency"] == {"context_tokens": 120000, "factor": 2.48}
    res = cli.invoke(app, ["bootlog", str(FIX / "sglang-2025-11.log")])
    assert res.exit_code == 0 and "2,243,474" in res.output
    res = cli.invoke(app, ["bootlog", str(tmp_path / "missing.log")])
    assert res.exit_code == 2 and "cannot read" in res.output


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.text(max_size=300), max_size=20))
def test_any_text_is_read_without_raising(lines):
    """A startup log is untrusted text: whatever its lines, reading it gives facts, never a traceback."""
    text = "\n".join(lines)
    facts = parse_bootlog(text)
    assert facts.recognised_lines + facts.unrecognised_lines <= len(text.splitlines())  # blank lines are not counted


@settings(max_examples=200, deadline=None)
@given(line=st.from_regex(r"(INFO \d\d-\d\d \d\d:\d\d:\d\d \[x\.py:1\] |\[20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\] )?"
                          r"(Available KV cache memory: [\d.]{1,6} GiB|CUDA graph pool memory: [\d.]{1,6} GiB \(actual\), [\d.]{1,6} GiB \(estimated\)"
                          r"|Graph capturing finished in [\d.]{1,5} secs, took [\d.]{1,5} GiB|KV cache size: [\d,]{1,9} tokens)", fullmatch=True))
def test_lines_of_a_known_shape_with_impossible_times_or_numbers_set_nothing_from_them(line):
    """A known line whose time is no time (month 99) or whose numbers are not numbers ("1.2.3") is read
    without raising, and what it sets is a number it really holds."""
    facts = parse_bootlog(line)
    for value in (facts.kv_cache_gib, facts.graph_pool_gib, facts.graph_estimate_gib, facts.graph_capture_gib, facts.kv_cache_tokens):
        assert value is None or value >= 0


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"E=[0-9]{1,3},N=[0-9]{1,5},device_name=[A-Za-z0-9_\-]{1,30}(,dtype=[a-z0-9_]{1,12})?\.json", fullmatch=True),
       folders=st.lists(st.from_regex(r"/[A-Za-z0-9_.=,\-]{1,12}", fullmatch=True), min_size=1, max_size=3), tuned=st.booleans())  # fmt: skip
def test_moe_kernel_config_lines_name_the_file(name, folders, tuned):
    """vLLM's fused-MoE config lines, in any folder (the paths it tried joined by ', ' when none was
    found): the file's name and whether it was found are read, whatever the folders are called."""
    paths = [f"{folder}/{name}" for folder in folders]
    line = (f"INFO 11-26 05:22:31 [fused_moe.py:1093] Using configuration from {paths[0]} for MoE layer." if tuned
            else f"WARNING 11-26 05:22:31 [fused_moe.py:1106] Using default MoE config. Performance might be sub-optimal! Config file not found at {', '.join(paths)}")  # fmt: skip
    facts = parse_bootlog(line)
    assert (facts.moe_config, facts.moe_config_tuned) == (name, tuned)
