"""The engine registry: a new engine is one module plus one entry point, and no engine's name is
known outside ``servelab/engines/`` (docs/architecture.md, "Adding an engine")."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from typer.testing import CliRunner

from servelab import engines
from servelab.cli import app
from servelab.server.endpoint import discover
from servelab.engines.base import Engine, Flags, Gauges
from servelab.engines.bootfacts import Rule, set_fact
from servelab.errors import ServelabError
from servelab.rules.lint import LintFinding
from servelab.metrics.bootlog import parse_bootlog
from servelab.metrics.server import compute, parse
from servelab.recipes import load_recipe

SRC = Path(__file__).resolve().parent.parent / "src" / "servelab"


class Toy(Engine):
    """A made-up server: its own owner name, version and context endpoints, tokenize shape,
    metric names, log format, health path, port, TP flag and one lint rule."""

    name = "toy"
    title = "Toy"
    owned_by = ("toy-org",)
    exact_output_length = True
    gauges = Gauges(("toy:running",), ("toy:waiting",), ("toy:kv",))
    rules = [Rule(re.compile(r"cache holds (\d+) tokens"), set_fact("kv_cache_tokens", lambda m: int(m.group(1))), "toy 1.0")]
    ready = re.compile(r"toy is ready")
    ready_path = "/toy/health"
    launchers = (("toy-serve",),)
    default_port = 7777
    flags = Flags(max_num_seqs="--lanes", tp=("--shards",))
    max_num_seqs_floor = 2

    async def describe(self, get, card):
        version, limits = await get("/toy/version"), await get("/toy/limits")
        return version["v"], limits["ctx"]

    def tokenize_body(self, text):
        return {"text": text}

    def server_counters(self, s, stats):
        stats.prompt_tokens = s.delta("toy:prompt_tokens_total")
        stats.generation_tokens = s.delta("toy:generated_total")

    def strip_prefix(self, line):
        return (line[4:], None, "INFO") if line.startswith("TOY|") else None

    def lint_rules(self, recipe, resolved):
        return [LintFinding("toy-rule", "warning", "toys are not servers", "a test engine")]


TOY = Toy()


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    """Register ``TOY`` the way a third-party package does: an installed distribution whose
    entry_points.txt names it in the ``servelab.engines`` group."""
    dist = tmp_path / "servelab_toy_engine-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: servelab-toy-engine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{engines.GROUP}]\ntoy = {__name__}:TOY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    engines.all_engines.cache_clear()
    yield
    monkeypatch.undo()
    engines.all_engines.cache_clear()


def test_unregistered_engine_is_refused_and_unknown_names_are_generic(tmp_path):
    assert engines.lookup("toy") is None
    assert engines.get("toy").name == engines.GENERIC
    path = tmp_path / "toy.yaml"
    path.write_text("name: t\nengine: toy\ncommand: [toy-serve]\n")
    with pytest.raises(ServelabError, match="engine: Input should be 'vllm', 'sglang', 'llama.cpp', 'trtllm' or 'custom'"):
        load_recipe(path)


def test_builtin_engines_need_no_installed_metadata():
    """A source checkout run with PYTHONPATH=src (servelab not installed, no entry points at all,
    as on a GPU machine) still identifies vLLM: it once fell back to the generic engine there."""
    import subprocess
    import sys

    code = ("import importlib.metadata as m; m.entry_points = lambda **kw: (); from servelab import engines; "
            "print(','.join(e.name for e in engines.all_engines()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(Path(engines.__file__).parents[2]), "PATH": ""})
    assert out.stdout.strip() == "vllm,sglang,llama.cpp,trtllm,generic"


def test_builtin_engines_are_registered_in_order():
    assert [e.name for e in engines.all_engines()] == ["vllm", "sglang", "llama.cpp", "trtllm", "generic"]
    assert engines.get("custom").name == "generic"


def test_toy_engine_discovery_and_tokenize(toy_registered):
    async def main():
        async def models(_):
            return web.json_response({"data": [{"id": "toy-1", "owned_by": "toy-org"}]})

        async def tokenize(request):
            body = await request.json()
            return web.json_response({"tokens": [1, 2]} if set(body) == {"text"} else {"error": "shape"}, status=200 if set(body) == {"text"} else 400)

        async def version(_):
            return web.json_response({"v": "9.9"})

        async def limits(_):
            return web.json_response({"ctx": 2048})

        async def metrics(_):
            return web.Response(text="# TYPE toy:running gauge\ntoy:running 1\n")

        web_app = web.Application()
        web_app.router.add_get("/v1/models", models)
        web_app.router.add_get("/toy/version", version)
        web_app.router.add_get("/toy/limits", limits)
        web_app.router.add_post("/tokenize", tokenize)
        web_app.router.add_get("/metrics", metrics)
        async with TestServer(web_app, host="127.0.0.1") as server:
            return await discover(str(server.make_url("/v1")))

    ep = asyncio.run(main())
    assert (ep.info.engine, ep.info.engine_version, ep.info.max_model_len) == ("toy", "9.9", 2048)
    assert ep.tokenize_path == "/tokenize" and ep.info.metrics_url.endswith("/metrics")


def test_toy_engine_metrics_and_bootlog(toy_registered):
    before = parse("# TYPE toy:prompt_tokens counter\ntoy:prompt_tokens_total 10\n# TYPE toy:generated counter\ntoy:generated_total 5\n"
                   "# TYPE toy:running gauge\ntoy:running 0\n")  # fmt: skip
    after = parse("# TYPE toy:prompt_tokens counter\ntoy:prompt_tokens_total 110\n# TYPE toy:generated counter\ntoy:generated_total 45\n"
                  "# TYPE toy:running gauge\ntoy:running 3\n")  # fmt: skip
    stats = compute("toy", before, after, [])
    assert (stats.engine, stats.prompt_tokens, stats.generation_tokens, stats.peak_running) == ("toy", 100, 40, 3)
    facts = parse_bootlog("TOY| cache holds 4096 tokens\nTOY| toy is ready\n")
    assert (facts.engine, facts.kv_cache_tokens, facts.unrecognised_lines) == ("toy", 4096, 0)


def test_toy_engine_recipe_resolve_and_lint(toy_registered, tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text("name: t\nengine: toy\ncommand: [toy-serve, --model, '{model}']\nmodel: m\ntensor_parallel: 2\nbench: {concurrency: [1, 4]}\n")
    recipe = load_recipe(path)
    v = recipe.resolve()
    assert v.argv == ["toy-serve", "--model", "m", "--shards", "2"]
    assert (v.port, v.ready_url, v.ready_timeout_s) == (7777, "http://127.0.0.1:7777/toy/health", 600.0)
    res = CliRunner().invoke(app, ["lint", str(path)])
    assert res.exit_code == 1
    assert "toy-rule" in res.output and "max-num-seqs" in res.output and "--lanes" in res.output


ENGINE_WORDS = re.compile(r"(^|_)(vllm|sglang|llamacpp|llama_cpp|trtllm)(_|$)")
# Modules that read another tool's file format, which names the engine itself
FORMAT_READERS = {"store/imports.py", "recipes/spark_vllm_docker.py"}


def test_no_engine_name_outside_the_engines_package():
    """Outside engines/ (and the format readers), no string literal is an engine's name and no
    function or class is named after one: whatever depends on the engine asks the engine object.
    User-facing text (longer strings) and comments may still name engines."""
    names = {n for e in engines.all_engines() for n in (e.name, *e.recipe_names, *e.owned_by)}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("engines/") or rel in FORMAT_READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ENGINE_WORDS.search(node.name.lower()):
                found.append(f"{rel}:{node.lineno} def {node.name}")
    assert not found, found


def test_no_module_is_longer_than_about_400_lines():
    long = {p.relative_to(SRC).as_posix(): n for p in SRC.rglob("*.py") if (n := len(p.read_text(encoding="utf-8").splitlines())) > 420}
    assert not long, long


def test_jit_warnings_name_their_kernels_once_and_bounded():
    """vLLM's jit_monitor lines (Triton and TileLang) give the kernel names a level compiled; a name
    from the (untrusted) log is cut at KERNEL_NAME_CHARS."""
    from servelab.engines import KERNEL_NAME_CHARS, jit_kernels

    log = ("(EngineCore pid=1) WARNING 11-24 10:00:00 [jit_monitor.py:98] Triton kernel JIT compilation during inference: fused_moe_kernel. This causes a spike\n"
           "x TileLang JIT compilation during inference: mhc_pre_big_fuse_with_norm_tilelang\n"
           "Triton kernel JIT compilation during inference: fused_moe_kernel. again\n"
           "TileLang JIT compilation during inference: " + "k" * 5000 + ". x\nINFO nothing compiled here\n")  # fmt: skip
    assert jit_kernels(log) == ["fused_moe_kernel", "mhc_pre_big_fuse_with_norm_tilelang", "k" * KERNEL_NAME_CHARS]
