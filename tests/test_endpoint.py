"""Endpoint discovery per engine (canned answers shaped as in ../shared/reference/server-facts.md)."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from canned import canned_server
from servelab.cli import app
from servelab.server.endpoint import discover, split_url
from servelab.errors import ServelabError

VLLM = {
    ("GET", "/v1/models"): {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "max_model_len": 32768}]},
    ("GET", "/version"): {"version": "0.11.0"},
    ("POST", "/tokenize"): {"count": 1, "max_model_len": 32768, "tokens": [14990]},
    ("GET", "/metrics"): None,  # filled below: Prometheus text
}
SGLANG = {
    ("GET", "/v1/models"): {"object": "list", "data": [{"id": "qwen", "object": "model", "owned_by": "sglang", "max_model_len": 40960}]},
    ("GET", "/server_info"): {"version": "0.5.23", "context_length": 40960},
    ("POST", "/tokenize"): {"tokens": [1], "count": 1, "max_model_len": 40960},
}
GENERIC = {("GET", "/v1/models"): {"object": "list", "data": [{"id": "gpt-x", "object": "model", "owned_by": "acme"}]}}


async def _metrics(request):
    from aiohttp import web

    return web.Response(text="# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")


def discover_with(routes, **kw):
    async def go():
        async with canned_server(routes) as url:
            return await discover(url + "/v1/", **kw)

    return asyncio.run(go())


def test_vllm():
    ep = discover_with({**VLLM, ("GET", "/metrics"): _metrics})
    info = ep.info
    assert (info.engine, info.engine_version, info.model, info.max_model_len) == ("vllm", "0.11.0", "Qwen/Qwen3-8B", 32768)
    assert ep.tokenize_path == "/tokenize" and info.metrics_url.endswith("/metrics")
    assert ep.api_base.endswith("/v1") and not ep.root.endswith("/v1")


def test_sglang():
    info = discover_with(SGLANG).info
    assert (info.engine, info.engine_version, info.max_model_len) == ("sglang", "0.5.23", 40960)
    assert info.metrics_url is None  # SGLang without --enable-metrics


def test_generic_has_no_tokenizer_and_bench_says_what_to_do():
    ep = discover_with(GENERIC)
    assert ep.info.engine == "generic" and ep.tokenize_path is None and ep.info.max_model_len is None

    async def go():
        async with canned_server(GENERIC) as url:
            return await asyncio.to_thread(CliRunner().invoke, app, ["bench", "--url", url, "--requests", "1"])

    res = asyncio.run(go())
    assert res.exit_code == 2 and "--tokenizer" in res.output and "Traceback" not in res.output


def test_unknown_model_lists_the_served_ones():
    with pytest.raises(ServelabError, match="Qwen/Qwen3-8B"):
        discover_with(VLLM, model="llama")


def test_api_key_refused():
    with pytest.raises(ServelabError, match="HTTP 401"):
        discover_with({("GET", "/v1/models"): (401, {"error": "bad key"})})


def test_api_key_is_sent_as_bearer():
    seen = {}

    async def models(request):
        from aiohttp import web

        seen["auth"] = request.headers.get("Authorization")
        return web.json_response(GENERIC[("GET", "/v1/models")])

    discover_with({("GET", "/v1/models"): models}, api_key="sk-abc")
    assert seen["auth"] == "Bearer sk-abc"


def test_not_an_openai_server():
    with pytest.raises(ServelabError, match="no model list"):
        discover_with({("GET", "/v1/models"): (404, {"detail": "Not Found"})})


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://x"])
def test_bad_url(url):
    with pytest.raises(ServelabError, match="not an http"):
        split_url(url)
