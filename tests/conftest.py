"""Shared fixtures: the embedded llama.cpp server (real model, loopback) and a canned-SSE server."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servelab.server.local import LocalServer


def pytest_configure(config) -> None:
    """Every servelab command the tests run stores its runs in a throwaway database, never the user's."""
    import os
    import tempfile

    os.environ["SERVELAB_DB"] = str(Path(tempfile.mkdtemp(prefix="servelab-test-db-")) / "runs.db")


@pytest.fixture(autouse=True, scope="session")
def _no_stray_run_directory():
    """No test (and no failing command) leaves a default run directory in the working directory."""
    stray = Path("servelab-runs")
    before = stray.exists()
    yield
    assert before or not stray.exists(), f"a test left {stray.resolve()} behind: give it --output"


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


def scrape_idle(url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """``scrape(url)`` once no request is in flight on the server: an earlier test's cancelled
    requests may still be generating (and counting tokens) after their client gave up.

    Raises:
        TimeoutError: still busy after ``timeout_s``.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(url)
        if samples["llamacpp:requests_processing"] == 0 and samples["llamacpp:requests_deferred"] == 0:
            return samples
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} still busy after {timeout_s} s: {samples}")
        time.sleep(0.05)  # polling a condition, not waiting for one to happen by itself


def run(coro):
    """Run a coroutine on a fresh event loop (tests stay synchronous)."""
    return asyncio.run(coro)


def wait_for_records(proc: subprocess.Popen, records: Path, count: int, timeout_s: float) -> None:
    """Wait until ``records`` (a run's records.jsonl) holds ``count`` lines, failing if ``proc`` exits first or
    ``timeout_s`` passes: the condition a Ctrl-C test interrupts on (a condition, not a sleep)."""
    deadline = time.monotonic() + timeout_s
    while not (records.exists() and len(records.read_text().splitlines()) >= count):  # wait for a condition
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "timeout"
        time.sleep(0.05)


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
