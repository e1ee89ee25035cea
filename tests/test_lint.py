"""``servelab lint``: each pitfall rule fires on a recipe that has it, with its reason, and not otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.values.argv import flag_values
from servelab.cli import app
from servelab.rules.lint import lint
from servelab.recipes import load_recipe

cli = CliRunner()


def rules(tmp_path: Path, text: str, hardware: str | None = None) -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    recipe = load_recipe(path)
    return {f.rule: f.message for f in lint(recipe, [recipe.resolve({})], hardware)}


CLEAN = """\
name: clean
engine: vllm
model: Qwen/Qwen3-8B
command: [vllm, serve, "{model}", --max-num-seqs, "64", --max-model-len, "32768"]
bench:
  concurrency: [1, 2, 4, 8, 16, 32]
"""


def test_a_clean_recipe_has_no_findings(tmp_path):
    assert rules(tmp_path, CLEAN, "h100-sxm") == {}


def test_enforce_eager(tmp_path):
    found = rules(tmp_path, CLEAN.replace('"32768"]', '"32768", --enforce-eager]'))
    assert found == {"enforce-eager": "--enforce-eager turns CUDA graphs off"}


def test_max_num_seqs_missing_under_high_concurrency_or_below_the_plan(tmp_path):
    text = CLEAN.replace('--max-num-seqs, "64", ', "").replace("[1, 2, 4, 8, 16, 32]", "[1, 64, 512]")
    assert "the bench plan keeps up to 512 requests in flight but --max-num-seqs is not set" in rules(tmp_path, text)["max-num-seqs"]
    text = CLEAN.replace("[1, 2, 4, 8, 16, 32]", "[1, 128]")
    assert rules(tmp_path, text)["max-num-seqs"] == "--max-num-seqs 64 is below the plan's 128 requests in flight"


def test_a_tensor_parallel_size_that_does_not_divide_the_heads(tmp_path):
    """Qwen3-8B has 32 attention heads: vLLM exits at TP 3, given in the command or as the recipe's tensor_parallel; TP 2 is fine."""
    in_command = rules(tmp_path, CLEAN.replace('"32768"]', '"32768", --tensor-parallel-size, "3"]'))
    assert in_command["tensor-parallel"] == ("tensor parallel 3: Qwen/Qwen3-8B has 32 attention heads, which must be divisible by the tensor-parallel "
                                             "size (vLLM refuses to start otherwise); TP sizes that divide them: 1, 2, 4, 8, 16")  # fmt: skip
    assert "tensor-parallel" in rules(tmp_path, CLEAN + "tensor_parallel: 3\n")
    assert "tensor-parallel" not in rules(tmp_path, CLEAN + "tensor_parallel: 2\n")
    assert "tensor-parallel" not in rules(tmp_path, CLEAN.replace("Qwen/Qwen3-8B", "not-a-model/anywhere") + "tensor_parallel: 3\n")


def test_concurrencies_that_are_not_capture_sizes(tmp_path):
    found = rules(tmp_path, CLEAN.replace("[1, 2, 4, 8, 16, 32]", "[1, 5, 10]"))["capture-sizes"]
    assert "c=5 pads 5 → 8 (38 % wasted); c=10 pads 10 → 16 (38 % wasted)" in found
    given = CLEAN.replace('"32768"]', '"32768", --cudagraph-capture-sizes, "1", "2", "4"]').replace("[1, 2, 4, 8, 16, 32]", "[1, 4, 8]")
    assert "c=8 runs without a graph (above the largest size 4)" in rules(tmp_path, given)["capture-sizes"]
    capped = CLEAN.replace('"64"', '"8"').replace("[1, 2, 4, 8, 16, 32]", "[1, 8, 32]")
    assert "capture-sizes" not in rules(tmp_path, capped)  # at most 8 sequences decode at once: c=32 runs the graph of 8
    assert flag_values(["--cudagraph-capture-sizes=1,2,5", "--x"], "--cudagraph-capture-sizes") == ["1", "2", "5"]


def test_a_sparse_capture_list_may_cost_the_kv_cache(tmp_path):
    """vLLM's sizes and nine more up to 2,048 made vLLM 0.25 reserve 20.9 GiB for 1.1 GiB of graphs
    (validation/capture-h100/): a list whose two largest sizes, above 512, are more than 16 apart is
    flagged, through --compilation-config as through --cudagraph-capture-sizes; vLLM's own list up to
    2,048 (--max-cudagraph-capture-size, every 16 tokens) is not."""
    sparse = """'--compilation-config', '{{"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 512, 1024, 1536, 2048]}}'"""
    found = rules(tmp_path, CLEAN.replace('"32768"]', f'"32768", {sparse}]'))
    assert found["capture-sizes-sparse"].startswith("the two largest CUDA-graph capture sizes are 2048 and 1536")
    assert "capture-sizes" not in found  # the plan's concurrencies are in that list
    listed = rules(tmp_path, CLEAN.replace('"32768"]', '"32768", --cudagraph-capture-sizes, "1", "2", "4", "8", "16", "32", "1024"]'))
    assert "capture-sizes-sparse" in listed
    dense = rules(tmp_path, CLEAN.replace('"32768"]', '"32768", --max-cudagraph-capture-size, "2048"]'))
    assert "capture-sizes-sparse" not in dense


def test_the_largest_capture_size_a_server_sets_extends_vllms_own_list(tmp_path):
    """--max-cudagraph-capture-size N (or --compilation-config's max_cudagraph_capture_size) makes vLLM
    capture its own list up to N, every 16 tokens above 256: a decode batch of 768 then has its graph."""
    wide = CLEAN.replace('"64"', '"1024"').replace('"32768"]', '"32768", --max-num-batched-tokens, "8192"]').replace("[1, 2, 4, 8, 16, 32]", "[1, 768]")
    assert "c=768 runs without a graph (above the largest size 512)" in rules(tmp_path, wide)["capture-sizes"]
    assert "capture-sizes" not in rules(tmp_path, wide.replace('"8192"]', '"8192", --max-cudagraph-capture-size, "1024"]'))
    config = wide.replace('"8192"]', """"8192", --compilation-config, '{{"max_cudagraph_capture_size": 1024}}']""")
    assert "capture-sizes" not in rules(tmp_path, config)


def test_speculative_decoding_with_prefix_caching(tmp_path):
    spec = CLEAN.replace('"32768"]', """"32768", --speculative-config, '{{"method": "ngram", "num_speculative_tokens": 3}}']""")
    assert "spec-with-prefix-cache" in rules(tmp_path, spec)
    assert "spec-with-prefix-cache" not in rules(tmp_path, spec.replace("--max-num-seqs,", "--no-enable-prefix-caching, --max-num-seqs,"))


def test_memory_utilization_on_a_unified_memory_machine(tmp_path):
    text = CLEAN.replace("--max-num-seqs,", "--gpu-memory-utilization, '0.95', --max-num-seqs,")
    found = rules(tmp_path, text, "dgx-spark")["unified-memory"]
    assert found.startswith("--gpu-memory-utilization 0.95 leaves 6.1 GiB of NVIDIA DGX Spark")
    assert "unified-memory" not in rules(tmp_path, text, "h100-sxm")


def test_max_model_len_above_the_planned_kv_capacity(tmp_path):
    found = rules(tmp_path, CLEAN.replace('"32768"', '"131072"'), "rtx-5090")["max-model-len"]
    assert found.startswith("max_model_len 131,072 is above the KV capacity servelab plan estimates:")
    assert "qwen3-8b bf16" in found.lower()


def test_readiness_timeout_too_short(tmp_path):
    found = rules(tmp_path, CLEAN + "ready:\n  timeout_s: 120\n")
    assert found["ready-timeout"] == "ready.timeout_s 120 s is below 900 s for vllm"


def test_llama_server_without_metrics(tmp_path):
    assert "llama-metrics" in rules(tmp_path, "name: l\nengine: llama.cpp\ncommand: [llama-server, -m, x.gguf]\n")


def test_lint_cli_explains_each_finding_and_exits_1(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(CLEAN.replace('"32768"]', '"32768", --enforce-eager]'))
    res = cli.invoke(app, ["lint", str(path), "--vary", "max_num_seqs=64,128"])
    assert res.exit_code == 1
    assert "warning enforce-eager: max_num_seqs=64: --enforce-eager turns CUDA graphs off" in res.output
    assert "why: Without CUDA graphs" in res.output
    path.write_text(CLEAN)
    assert cli.invoke(app, ["lint", str(path)]).exit_code == 0


def test_imported_recipe_notes_are_shown(tmp_path):
    res = cli.invoke(app, ["lint", str(Path(__file__).resolve().parent.parent / "recipes" / "spark-vllm-docker-gpt-oss-120b.yaml")])
    assert "warning import: spark-vllm-docker build_args ['--exp-mxfp4'] are not applied" in " ".join(res.output.split())


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\nengine: vllm\ncommand: [a]\nbogus: 1\n", "line 4: unknown field 'bogus'"),
    ("name: x\nengine: tgi\ncommand: [a]\n", "line 2: engine: Input should be 'vllm', 'sglang', 'llama.cpp', 'trtllm' or 'custom'"),
])  # fmt: skip
def test_lint_of_an_invalid_recipe_is_one_line(tmp_path, text, message):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    res = cli.invoke(app, ["lint", str(path)])
    assert res.exit_code == 2 and message in " ".join(res.output.split()) and "Traceback" not in res.output
