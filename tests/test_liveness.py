"""The liveness probe: cheap (one shared probe), tolerant (slow ≠ gone), decisive (refused twice = gone)."""

from __future__ import annotations

import asyncio
import socket

from canned import canned_server
from conftest import run
from servelab.server.liveness import Liveness
from servelab.store.results import levels_to_run
from servelab.metrics.summary import LevelSummary


def test_any_answer_is_up_and_callers_share_one_probe():
    async def main():
        async with canned_server({("GET", "/health"): (503, {"error": "loading"})}) as url:
            alive = Liveness(url, "/health")
            answers = await asyncio.gather(*(alive() for _ in range(200)))  # 200 dropped streams at once
            again = await alive()  # within hold_s: no new probe
            return answers, again, alive.probes

    answers, again, probes = run(main())
    assert all(answers) and again and probes == 1


def test_closed_port_is_gone_after_a_second_look(free_port):
    alive = Liveness(f"http://127.0.0.1:{free_port}", "/health", retry_s=0.01)
    assert run(alive()) is False and alive.probes == 2


def test_silent_server_stays_up_within_the_grace_then_is_gone():
    now = [0.0]
    with socket.socket() as listener:  # accepts connections (kernel backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        alive = Liveness(f"http://127.0.0.1:{listener.getsockname()[1]}", "/health", probe_timeout_s=0.1, grace_s=30, clock=lambda: now[0])
        assert run(alive()) is True  # slow under load is not gone
        now[0] = 31.0
        assert run(alive()) is False


def test_a_slow_answer_resets_the_grace():
    now = [0.0]

    async def main():
        async with canned_server({("GET", "/v1/models"): {"data": []}}) as url:
            alive = Liveness(url, "/v1/models", hold_s=0, clock=lambda: now[0])
            alive._failing_since = -100.0  # failing long before, but it answers now
            return await alive()

    assert run(main()) is True


def test_levels_to_run_counts_repeats():
    done = [LevelSummary(concurrency=c, ok=1, failed_requests=0, incomplete=0) for c in (2, 1)]
    asked = [(None, 1), (None, 1), (None, 1), (None, 2), (None, 4)]
    assert levels_to_run(asked, done) == [1, 2, 4]
    assert levels_to_run(asked, []) == [0, 1, 2, 3, 4]
    assert levels_to_run([(0.5, 0), (1.0, 0)], [LevelSummary(concurrency=0, rate_rps=1.0, ok=1, failed_requests=0, incomplete=0)]) == [0]
