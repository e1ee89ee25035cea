"""Shared fixtures: the embedded llama.cpp server (real model, loopback) and a canned-SSE server."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servelab.local import LocalServer


@pytest.fixture(scope="session")
def llama(tmp_path_factory) -> LocalServer:
    """One embedded llama-server (Gemma 3 270M, 4 slots × 4096 tokens) for the whole session."""
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LocalServer(log) as server:
        yield server


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples of ``url``/metrics as {name: value} (unlabelled samples only)."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples if not s.labels}


def run(coro):
    """Run a coroutine on a fresh event loop (tests stay synchronous)."""
    return asyncio.run(coro)


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
