"""Send lag of a trace replay: does servelab keep a trace's schedule? (issue 31's target: 1,000
requests over 60 s at time scale 1, send lag p99 ≤ 5 ms on a 2-core machine).

Replays a synthetic Mooncake-style trace (``--requests`` arrivals spread over ``--seconds``,
Poisson gaps, seeded) through servelab's own open loop (``servelab.load.scheduler.open_loop`` with
the trace's arrival times: the path ``servelab bench --trace`` takes once its prompts are built)
against the SSE emitter of ``benchmarks/client_overhead.py`` (its own process, pinned to CPU 1;
this client on CPU 0), each request streaming ``--tokens`` chunks 10 ms apart after a 50 ms TTFT.
Send lag = ``start − queued`` (docs/metrics.md "Trace replay"): when the request body reached
the connection minus when the trace scheduled it.

Usage (``pip install -e '.[benchmarks]'``): ``python benchmarks/trace_replay.py [--requests 1000]
[--seconds 60] [--tokens 64] [--time-scale 1]``; prints one table row per time scale.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import start_emitters  # noqa: E402

from servelab.server.endpoint import Endpoint  # noqa: E402
from servelab.load.body import request_body
from servelab.values.prompt import Prompt  # noqa: E402
from servelab.load.client import StreamClient  # noqa: E402
from servelab.load.scheduler import open_loop  # noqa: E402
from servelab.metrics.request import percentile  # noqa: E402
from servelab.values.records import RequestRecord  # noqa: E402
from servelab.store.results import EndpointInfo  # noqa: E402
from servelab.workloads.traces import TraceRequest  # noqa: E402


def synthetic_trace(requests: int, seconds: float, tokens: int, seed: int = 0) -> list[TraceRequest]:
    """``requests`` arrivals with exponential gaps, scaled to end at ``seconds``."""
    rng = random.Random(seed)
    times, t = [], 0.0
    for _ in range(requests):
        times.append(t)
        t += rng.expovariate(1.0)
    scale = seconds / times[-1]
    return [TraceRequest(at_s=x * scale, input_tokens=512, output_tokens=tokens) for x in times]


async def replay(url: str, trace: list[TraceRequest], time_scale: float) -> list[RequestRecord]:
    """The trace through servelab's open loop; its records."""
    endpoint = Endpoint(root=url, info=EndpointInfo(url=url, engine="generic", model="emitter"))
    bodies = [request_body(endpoint, Prompt(f"req-{i}", 1), max_tokens=r.output_tokens, ignore_eos=False, cold=True) for i, r in enumerate(trace)]

    def make(i: int) -> tuple[RequestRecord, bytes]:
        return RequestRecord(index=i, concurrency=0, phase="measured", max_tokens=trace[i].output_tokens, queued=0.0), bodies[i]

    async def alive() -> bool:
        return True

    async with StreamClient(endpoint, origin=time.perf_counter(), connections=256, request_timeout_s=120) as client:
        phase = await open_loop(client, make, rate=1.0, count=len(trace), arrivals=(r.at_s / time_scale for r in trace),
                                on_record=lambda r: None, alive=alive)  # fmt: skip
    return phase.records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--time-scale", default="1", help="comma-separated, e.g. 1,4")
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    procs, url, _ = start_emitters(50.0, 10.0, 1)
    table = Table(title=f"trace replay send lag: {args.requests} requests over {args.seconds:g} s (÷ time scale), {args.tokens} chunks each, {os.cpu_count()} CPUs")
    for name in ("time scale", "req/s", "sent", "ok", "send lag p50 ms", "p99 ms", "max ms", "target p99 ≤ 5 ms"):
        table.add_column(name, justify="right")
    try:
        for scale in (float(s) for s in args.time_scale.split(",")):
            records = asyncio.run(replay(url, synthetic_trace(args.requests, args.seconds, args.tokens), scale))
            lags = sorted((r.start - r.queued) * 1e3 for r in records if r.start is not None)
            ok = sum(r.status == "ok" for r in records)
            p99 = percentile(lags, 99)
            table.add_row(f"{scale:g}", f"{args.requests * scale / args.seconds:.1f}", str(len(lags)), str(ok), f"{percentile(lags, 50):.2f}",
                          f"{p99:.2f}", f"{lags[-1]:.2f}", "met" if p99 <= 5 else "missed")  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
    Console().print(table)


if __name__ == "__main__":
    main()
