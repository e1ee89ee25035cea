"""Recipes: validation with file and line, placeholders, variants, flags, spark-vllm-docker import."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.recipes import expand, load_recipe, parse_assignments, redact, variant_dir, variant_label, with_hosts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "recipes").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


VLLM = """\
name: qwen
engine: vllm
model: Qwen/Qwen3-8B
command: vllm serve {model} --port {port} --max-num-seqs {max_num_seqs}
defaults:
  port: 8000
  max_num_seqs: 256
"""


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_recipe_loads_and_resolves(path):
    recipe = load_recipe(path)
    for values in expand(recipe, {}, {}):
        resolved = recipe.resolve(values)
        assert resolved.argv and all(isinstance(a, str) and "{" not in a for a in resolved.argv)
        assert resolved.ready_url.startswith("http://")


def test_a_string_command_becomes_an_argument_list_with_values_filled_in(tmp_path):
    recipe = load_recipe(write(tmp_path, VLLM))
    r = recipe.resolve({})
    assert r.argv == ["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000", "--max-num-seqs", "256"]
    assert r.url == "http://127.0.0.1:8000" and r.ready_url == "http://127.0.0.1:8000/health"
    assert r.ready_timeout_s == 900  # vLLM's default allows for compile and graph capture


def test_a_value_never_becomes_extra_arguments_or_shell_code(tmp_path):
    recipe = load_recipe(write(tmp_path, VLLM))
    r = recipe.resolve({"max_num_seqs": "8; rm -rf / --enforce-eager"})
    assert r.argv[-1] == "8; rm -rf / --enforce-eager" and len(r.argv) == 7


def test_shell_syntax_in_the_command_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, VLLM.replace("--max-num-seqs {max_num_seqs}", "&& echo hi"))
    with pytest.raises(ServelabError, match=r"recipe.yaml, line 4: command: uses shell syntax \('&&'\)"):
        load_recipe(path)


def test_unknown_field_names_file_line_and_closest_name(tmp_path):
    path = write(tmp_path, VLLM + "bench:\n  concurrency: [1, 2]\n  reqests: 8\n")
    with pytest.raises(ServelabError, match=r"recipe.yaml, line 10: unknown field 'bench.reqests'; did you mean 'requests'\?"):
        load_recipe(path)


def test_wrong_type_names_file_line_and_field(tmp_path):
    path = write(tmp_path, VLLM + "bench:\n  concurrency:\n    - 1\n    - many\n")
    with pytest.raises(ServelabError, match=r"recipe.yaml, line 11: bench.concurrency\[1\]: Input should be a valid integer.*'many'"):
        load_recipe(path)


def test_missing_field_is_named(tmp_path):
    path = write(tmp_path, "name: x\ncommand: [a]\n")
    with pytest.raises(ServelabError, match=r"recipe.yaml: missing field 'engine'"):
        load_recipe(path)


def test_placeholder_without_value_names_line_and_fix(tmp_path):
    recipe = load_recipe(write(tmp_path, VLLM.replace("  max_num_seqs: 256\n", "")))
    with pytest.raises(ServelabError, match=r"recipe.yaml, line 4: placeholder \{max_num_seqs\} has no value; .*--set max_num_seqs=VALUE"):
        recipe.resolve({})
    assert recipe.resolve({"max_num_seqs": "64"}).argv[-1] == "64"  # the fix the message names works


def test_unbalanced_braces_are_one_line(tmp_path):
    path = write(tmp_path, "name: q\nengine: vllm\ncommand: [vllm, serve, 'a}b']\n")
    with pytest.raises(ServelabError, match=r"line 3: bad placeholder syntax \(Single '\}' encountered"):
        load_recipe(path)


def test_a_placeholder_filled_by_every_variant_needs_no_default(tmp_path):
    path = write(tmp_path, VLLM.replace("  max_num_seqs: 256\n", "variants:\n  - {max_num_seqs: 8}\n  - {max_num_seqs: 16}\n"))
    recipe = load_recipe(path)
    assert [variant_label(v) for v in expand(recipe, {}, {})] == ["max_num_seqs=8", "max_num_seqs=16"]


def test_values_that_are_not_placeholders_become_engine_flags(tmp_path):
    recipe = load_recipe(write(tmp_path, VLLM))
    argv = recipe.resolve({"kv_cache_dtype": "fp8", "enforce_eager": "true", "enable_prefix_caching": "false"}).argv
    assert argv[-3:] == ["--kv-cache-dtype", "fp8", "--enforce-eager"]


def test_json_argument_keeps_literal_braces(tmp_path):
    text = """\
name: q
engine: vllm
command: >-
  vllm serve m --speculative-config '{{"method": "mtp", "num_speculative_tokens": {k}}}'
defaults: {k: 3}
"""
    recipe = load_recipe(write(tmp_path, text))
    assert recipe.resolve({}).argv[-1] == '{"method": "mtp", "num_speculative_tokens": 3}'


def test_unescaped_json_braces_are_explained(tmp_path):
    path = write(tmp_path, """name: q\nengine: vllm\ncommand: [vllm, serve, m, --speculative-config, '{"method": "mtp"}']\n""")
    with pytest.raises(ServelabError, match=r'line 3: \{"method"\} is not a placeholder name; write \{\{ and \}\} for literal braces'):
        load_recipe(path)


def test_vary_gives_every_combination_and_set_applies_to_all(tmp_path):
    recipe = load_recipe(write(tmp_path, VLLM))
    vary = parse_assignments(["max_num_seqs=64,256", "kv_cache_dtype=auto,fp8"], "--vary")
    fixed = {k: v[0] for k, v in parse_assignments(["port=9000"], "--set").items()}
    variants = expand(recipe, vary, fixed)
    labels = [variant_label(v, fixed) for v in variants]
    assert labels == ["max_num_seqs=64,kv_cache_dtype=auto", "max_num_seqs=64,kv_cache_dtype=fp8",
                      "max_num_seqs=256,kv_cache_dtype=auto", "max_num_seqs=256,kv_cache_dtype=fp8"]  # fmt: skip
    assert all(recipe.resolve(v).port == 9000 for v in variants)
    assert variant_dir("a=1/2,b=x y") == "a=1_2,b=x_y"


@pytest.mark.parametrize("item", ["max_num_seqs", "=3", "a b=1", "x="])
def test_malformed_assignment_is_one_clear_error(item):
    with pytest.raises(ServelabError, match=r"--vary .*: give NAME=VALUE"):
        parse_assignments([item], "--vary")


def test_tensor_and_expert_parallel_flags_per_engine(tmp_path):
    vllm = load_recipe(write(tmp_path, VLLM + "tensor_parallel: 2\nexpert_parallel: true\n"))
    assert vllm.resolve({}).argv[-3:] == ["--tensor-parallel-size", "2", "--enable-expert-parallel"]
    sglang = load_recipe(write(tmp_path, "name: s\nengine: sglang\ncommand: [python3, -m, sglang.launch_server, --tp, '4']\nexpert_parallel: true\ntensor_parallel: 4\n"))
    assert sglang.resolve({}).argv[-3:] == ["4", "--ep-size", "4"]  # --tp given by the command: not added again
    ray = with_hosts(load_recipe(write(tmp_path, VLLM)), "spark-1,spark-2")
    r = ray.resolve({})
    assert r.argv[-2:] == ["--distributed-executor-backend", "ray"] and r.url == "http://spark-1:8000"


def test_clusters_only_for_engines_that_run_on_several_nodes(tmp_path):
    recipe = load_recipe(write(tmp_path, "name: l\nengine: llama.cpp\ncommand: [llama-server]\n"))
    with pytest.raises(ServelabError, match="clusters are supported for vllm .* and sglang"):
        with_hosts(recipe, "a,b")
    with pytest.raises(ServelabError, match="--hosts 'a': give at least two hosts"):
        with_hosts(load_recipe(write(tmp_path, VLLM)), "a")


def test_spark_vllm_docker_v1_recipe_is_imported(tmp_path):
    recipe = load_recipe(ROOT / "recipes" / "spark-vllm-docker-gpt-oss-120b.yaml")
    assert recipe.engine == "vllm" and recipe.container.image == "vllm-node-mxfp4" and recipe.model == "openai/gpt-oss-120b"
    r = recipe.resolve({})
    assert r.argv[:3] == ["vllm", "serve", "openai/gpt-oss-120b"]
    assert r.argv[r.argv.index("--gpu-memory-utilization") + 1] == "0.7"
    assert r.env == {"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "1"}
    assert any("build_args" in note for note in recipe.notes)


def test_v1_solo_drops_the_ray_backend_and_a_cluster_adds_it_back(tmp_path):
    path = write(tmp_path, 'recipe_version: "1"\nname: m\ncontainer: vllm-node\ndefaults: {tensor_parallel: 2}\n'
                           "command: |\n  vllm serve m \\\n    --distributed-executor-backend ray -tp {tensor_parallel}\n")  # fmt: skip
    recipe = load_recipe(path)
    assert recipe.resolve({}).argv == ["vllm", "serve", "m", "-tp", "2"]
    assert with_hosts(recipe, "s1,s2").resolve({}).argv[-2:] == ["--distributed-executor-backend", "ray"]


def test_unknown_v1_field_is_named(tmp_path):
    path = write(tmp_path, 'recipe_version: "1"\nname: m\ncontainer: c\ncommand: vllm serve m\nmodz: []\n')
    with pytest.raises(ServelabError, match="unknown spark-vllm-docker v1 field 'modz'"):
        load_recipe(path)


def test_secrets_are_redacted_but_token_counts_are_not():
    argv = ["vllm", "serve", "--api-key", "sk-1", "--hf-token=hf_x", "-e", "HF_TOKEN=hf_y", "-e", "HF_TOKEN",
            "--max-num-batched-tokens", "8192", "--tokenizer", "t"]  # fmt: skip
    assert redact(argv) == ["vllm", "serve", "--api-key", "***", "--hf-token=***", "-e", "HF_TOKEN=***", "-e", "HF_TOKEN",
                            "--max-num-batched-tokens", "8192", "--tokenizer", "t"]  # fmt: skip
