"""Client overhead and timestamp honesty of servelab's streaming client.

Runs a local SSE emitter (a raw asyncio protocol on uvloop + httptools, in its own process pinned
to CPU 1, so that it is never the bottleneck) that streams ``max_tokens`` one-token chunks per
request on a known schedule, keeps connections alive, and logs per request when the request's
first bytes were read (``arrival``) and when it handed its first and last chunk to the socket
(``first``, ``last``), on the monotonic clock both processes share. servelab's own client and
closed-loop scheduler (pinned to CPU 0; with ``--procs N`` its N client worker processes,
servelab.load.workers, pinned to CPUs 2, 3, …) drive it at 1, 64 and 256 concurrent streams, twice:

- **throughput**: TTFT 0, ITL 0, the emitter streams as fast as it can; ``--seconds`` of closed
  loop after a warm-up round. Reports the chunks/s that flowed and the client's CPU time per
  chunk (user + sys, ``getrusage``); ``1 / (CPU per chunk)`` is what one client core sustains.
- **accuracy**: TTFT 50 ms, ITL 10 ms (100 chunks/s per stream, 25,600/s at 256 streams);
  ``--rounds`` requests per stream after a warm-up round, the streams started evenly over one
  request's duration, as a server at steady state sees them. (Started all at once, the emitter
  must accept hundreds of requests in the same millisecond and its own read delay would be
  measured instead of the client.) Errors, client − emitter:
  TTFT error = (first_token − start) − (first − arrival);
  ITL error = per-request (t_last − t_first)/(n − 1) on the client minus the same on the emitter;
  first-token receive lag = client first_token − emitter first (the client's own delay).

Usage (``pip install -e '.[benchmarks]'`` for the emitter's httptools): ``python
benchmarks/client_overhead.py [--seconds 6] [--rounds 2] [--tokens 256] [--concurrency 1,64,256]
[--procs 1,2,4,8] [--emitters 4]``; prints a table, with each row's chunks/s as a multiple of one process's at the
same streams (scaling). Client CPU is the coordinator's plus its workers' (``/proc``). Targets
(issue 2): ≥ 100,000 chunks/s on one core; at 256 streams TTFT error p99 ≤ 1 ms and ITL error p99
≤ 0.1 ms; (issue 18) 4 processes ≥ 3.2 × one, TTFT error p99 ≤ 1 ms at 1,024 streams. ``--emitters E``
runs E emitter processes on one port (pinned to CPUs 1 … E, the workers after them): one emitter
saturates before 4 clients do, and then the scaling measured would be the emitter's.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

from rich.console import Console
from rich.table import Table

from servelab.server.endpoint import Endpoint
from servelab.load.body import request_body
from servelab.values.prompt import Prompt
from servelab.load.client import StreamClient
from servelab.load.scheduler import closed_loop
from servelab.load.workers import WorkerPool
from servelab.metrics.request import percentile
from servelab.values.records import RequestRecord
from servelab.store.results import EndpointInfo


# ----------------------------------------------------------------------------- emitter (CPU 1)
def emitter_main(port: int, log_port: int, ttft_ms: float, itl_ms: float) -> None:
    """The SSE emitter process: a raw asyncio protocol (uvloop + httptools), so that it is never the
    bottleneck and its timestamps are taken as early as user space can: ``arrival`` when the first
    bytes of a request are read, ``first``/``last`` just before a chunk is handed to the socket.

    POST /v1/chat/completions streams ``max_tokens`` one-token chunks (chunked transfer encoding,
    as vLLM and llama.cpp do), then a usage chunk and ``[DONE]``; GET /log returns and clears the
    per-request truth; GET /v1/models lists one model. Several emitter processes share ``port``
    (SO_REUSEPORT: the kernel spreads the connections); each also listens alone on ``log_port``,
    where GET /log gives that process's truth.
    """
    import httptools
    import uvloop

    clock = time.perf_counter
    log: list[dict] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def frame(payload: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    token = frame(b'data: {"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}\n\n')
    final = frame(b'data: {"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":"length"}]}\n\n')

    def reply_json(obj: object) -> bytes:
        body = json.dumps(obj).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)

    class Emitter(asyncio.Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:
            # No Nagle: a 90-byte chunk must leave now, not wait for the previous one's ACK.
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)
            self.arrival: float | None = None
            self.body = b""
            self.url = b""

        def data_received(self, data: bytes) -> None:
            if self.arrival is None:  # first bytes of a request (connections are kept alive)
                self.arrival = clock()
            self.parser.feed_data(data)

        def on_message_begin(self) -> None:
            self.url, self.body = b"", b""

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            if self.url == b"/log":
                self.transport.write(reply_json(log))
                log.clear()
                self.transport.close()
            elif self.url == b"/v1/models":
                self.transport.write(reply_json({"data": [{"id": "emitter", "owned_by": "emitter"}]}))
                self.transport.close()
            else:
                arrival, self.arrival = self.arrival, None
                asyncio.ensure_future(self.stream(json.loads(self.body), arrival))

        def connection_lost(self, exc: Exception | None) -> None:
            self.transport = None

        async def stream(self, req: dict, arrival: float) -> None:
            n, key, t = int(req["max_tokens"]), req["messages"][0]["content"], self.transport
            t.write(head)
            if itl_ms or ttft_ms:
                due = arrival + ttft_ms / 1e3
                heapq.heappush(heap, (due, next(sequence), [0, n, t, None, key, arrival]))
                wake.set()
                return
            first = last = None
            for i in range(n):
                if i % 8 == 0:
                    await asyncio.sleep(0)  # as fast as possible, but streams interleave
                if self.transport is None:
                    return  # the client went away (end of a duration-bounded phase)
                last = clock()
                first = first or last
                t.write(token)
            finish(t, key, arrival, first, last, n)

    def finish(t: asyncio.Transport, key: str, arrival: float, first: float, last: float, n: int) -> None:
        """Final chunk, usage chunk, [DONE], end of body (the connection stays open); log the truth."""
        usage = b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (n, n + 8)
        t.write(final + frame(usage) + frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        log.append({"key": key, "arrival": arrival, "first": first, "last": last, "n": n})

    # Paced streams share one timer heap, so a chunk costs one transport.write and a heap
    # operation, not a timer and a coroutine switch each, and a stream ends without waking a
    # coroutine: the emitter stays idle enough to read new requests at once.
    heap: list[tuple[float, int, list]] = []  # (due, sequence, [index, n, transport, first, key, arrival])
    sequence = itertools.count()
    wake = asyncio.Event()

    async def ticker() -> None:
        while True:
            if not heap:
                wake.clear()
                await wake.wait()
            delay = heap[0][0] - clock()
            if delay > 0:
                await asyncio.sleep(min(delay, 0.001))
                continue
            now = clock()
            while heap and heap[0][0] <= now:
                due, _, item = heapq.heappop(heap)
                i, n, t, first, key, arrival = item
                if t.is_closing():
                    continue
                sent = clock()
                first = item[3] = first or sent
                if i == n - 1:
                    finish(t, key, arrival, first, sent, n)
                else:
                    t.write(token)
                    item[0] = i + 1
                    heapq.heappush(heap, (due + itl_ms / 1e3, next(sequence), item))

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Emitter, "127.0.0.1", port, backlog=4096, reuse_port=True)
        own = await loop.create_server(Emitter, "127.0.0.1", log_port)
        asyncio.ensure_future(ticker())
        async with server, own:
            await server.serve_forever()

    uvloop.run(serve())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_emitters(ttft_ms: float, itl_ms: float, count: int) -> tuple[list[subprocess.Popen], str, list[str]]:
    """``count`` emitter processes on one port, pinned to CPUs 1 … count: (processes, URL, their /log URLs)."""
    port = free_port()
    procs, logs = [], []
    for k in range(count):
        log_port = free_port()
        cmd = [sys.executable, __file__, "--emitter", str(port), str(log_port), str(ttft_ms), str(itl_ms)]
        procs.append(subprocess.Popen(cmd, preexec_fn=lambda cpu=1 + k: os.sched_setaffinity(0, {cpu % (os.cpu_count() or 1)})))
        logs.append(f"http://127.0.0.1:{log_port}/log")
    deadline = time.monotonic() + 20
    for log in logs:
        while True:
            try:
                urllib.request.urlopen(log.replace("/log", "/v1/models"), timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # waiting for the emitter to listen
    return procs, f"http://127.0.0.1:{port}", logs


# ----------------------------------------------------------------------------- client (CPU 0)
def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of this process and of ``pids`` (Linux ``/proc/PID/stat``)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return own.ru_utime + own.ru_stime + ticks / os.sysconf("SC_CLK_TCK")


async def drive(url: str, concurrency: int, tokens: int, count: int | None, seconds: float | None, ramp_s: float, procs: int, first_cpu: int):
    """Closed loop against the emitter: a warm-up round, or (accuracy) streams started evenly over
    ``ramp_s`` whose ramp is the warm-up, then ``count`` requests or ``seconds`` measured, with
    ``procs`` client processes. Returns records, wall s, client CPU s, clock origin."""
    endpoint = Endpoint(root=url, info=EndpointInfo(url=url, engine="generic", model="emitter"))
    origin = time.perf_counter()
    counter = iter(range(10**9))

    def make(_: int) -> tuple[RequestRecord, bytes]:
        i = next(counter)
        rec = RequestRecord(index=i, concurrency=concurrency, phase="measured", max_tokens=tokens, queued=time.perf_counter() - origin)
        return rec, request_body(endpoint, Prompt(f"req-{i}", 1), max_tokens=tokens, ignore_eos=False, cold=True)

    async def alive() -> bool:
        return True

    if procs == 1:
        client = StreamClient(endpoint, origin=origin, connections=concurrency, request_timeout_s=120)
    else:
        client = WorkerPool(endpoint, origin=origin, connections=concurrency, request_timeout_s=120, procs=procs)
    async with client:
        pids = [w.process.pid for w in client.workers] if procs > 1 else []
        spare = list(range(first_cpu, os.cpu_count() or 1)) or [0]
        for k, pid in enumerate(pids):  # CPU 0: the coordinator, CPUs 1 …: the emitters, then the workers
            os.sched_setaffinity(pid, {spare[k % len(spare)]})
        if count is None:  # throughput: a warm-up round, then a duration
            await closed_loop(client, make, concurrency=concurrency, count=concurrency, on_record=lambda r: None, alive=alive)
            cpu0, wall0 = cpu_s(pids), time.perf_counter()
            phase = await closed_loop(client, make, concurrency=concurrency, duration_s=seconds, on_record=lambda r: None, alive=alive)
        else:  # accuracy: one continuous loop whose ramp (one request's duration) is the warm-up
            cpu0, wall0 = cpu_s(pids), time.perf_counter()
            phase = await closed_loop(client, make, concurrency=concurrency, count=count, stagger_s=ramp_s, on_record=lambda r: None, alive=alive)
        cpu1, wall1 = cpu_s(pids), time.perf_counter()
    return phase.records, wall1 - wall0, cpu1 - cpu0, origin


def measure(mode: str, ttft_ms: float, itl_ms: float, concurrency: int, tokens: int, seconds: float, rounds: int, procs: int, emitters: int) -> dict:
    """One table row. Throughput: ``seconds`` of closed loop. Accuracy: ``rounds`` × concurrency
    requests, the streams spread evenly over one request's duration (as a server at steady state
    sees them), so that what is measured is the client, not the emitter's handling of a burst of
    hundreds of simultaneous new requests."""
    import uvloop

    emitter_procs, url, logs = start_emitters(ttft_ms, itl_ms, emitters)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            if mode == "throughput":
                run = drive(url, concurrency, tokens, None, seconds, 0.0, procs, 1 + emitters)
            else:
                run = drive(url, concurrency, tokens, rounds * concurrency, None, (ttft_ms + tokens * itl_ms) / 1e3, procs, 1 + emitters)
            records, wall, cpu, origin = runner.run(run)
        truth = {e["key"]: e for log in logs for e in json.loads(urllib.request.urlopen(log).read())}
    finally:
        for proc in emitter_procs:
            proc.terminate()
            proc.wait()
    chunks = sum(len(r.chunk_times) for r in records)  # all that the measured CPU time handled
    if mode == "accuracy":
        records = [r for r in records if r.phase == "measured"]  # the ramp was the warm-up
    ok = [r for r in records if r.status == "ok"]
    ttft_err, itl_err, recv_lag = [], [], []
    for r in ok:
        t = truth.get(f"req-{r.index}")
        if t is None or len(r.chunk_times) < 2:
            continue
        ttft_err.append(((r.first_token - r.start) - (t["first"] - t["arrival"])) * 1e3)
        recv_lag.append(((origin + r.first_token) - t["first"]) * 1e3)
        n = len(r.chunk_times)
        itl_err.append(((r.chunk_times[-1] - r.chunk_times[0]) / (n - 1) - (t["last"] - t["first"]) / (t["n"] - 1)) * 1e3)
    recv_lag.sort()
    ttft_err.sort()
    itl_err.sort()
    abs_ttft = sorted(abs(e) for e in ttft_err)
    abs_itl = sorted(abs(e) for e in itl_err)
    return {
        "mode": mode,
        "c": concurrency,
        "procs": procs,
        "ok": len(ok),
        "failed": sum(r.status == "failed" for r in records),
        "chunks": chunks,
        "chunks_s": chunks / wall,
        "cpu_us_chunk": cpu / chunks * 1e6 if chunks else float("nan"),
        "ttft_p50": percentile(ttft_err, 50) if ttft_err else None,
        "ttft_p99": percentile(abs_ttft, 99) if abs_ttft else None,
        "itl_p50": percentile(itl_err, 50) if itl_err else None,
        "itl_p99": percentile(abs_itl, 99) if abs_itl else None,
        "recv_lag_p99": percentile(recv_lag, 99) if recv_lag else None,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--emitter":
        emitter_main(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="throughput: measured seconds per cell (after one warm-up round)")
    ap.add_argument("--rounds", type=int, default=2, help="accuracy: measured requests per stream (after one warm-up round)")
    ap.add_argument("--tokens", type=int, default=256, help="chunks (one token each) per request")
    ap.add_argument("--concurrency", default="1,64,256")
    ap.add_argument("--procs", default="1", help="client processes to compare, e.g. 1,2,4,8")
    ap.add_argument("--emitters", type=int, default=1, help="emitter processes (one port, SO_REUSEPORT), so that the emitter outruns N clients")
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for mode, ttft, itl in (("throughput", 0.0, 0.0), ("accuracy", 50.0, 10.0)):
        for c in levels:
            for procs in (int(p) for p in args.procs.split(",")):
                rows.append(measure(mode, ttft, itl, c, args.tokens, args.seconds, args.rounds, procs, args.emitters))
                print(json.dumps(rows[-1]), file=sys.stderr)
    one = {(r["mode"], r["c"]): r["chunks_s"] for r in rows if r["procs"] == 1}

    def f(v, d=2):
        return "–" if v is None else f"{v:,.{d}f}"

    table = Table(title=f"servelab client overhead ({args.tokens} one-token chunks per request; client on CPU 0, {args.emitters} emitter(s) on CPUs 1…, workers after them)")
    for col in ("mode", "streams", "client procs", "scaling ×", "ok / failed", "chunks", "chunks/s flowed", "client CPU µs/chunk",
                "client capacity chunks/s/core", "TTFT err p50 ms", "|TTFT err| p99 ms", "ITL err p50 ms", "|ITL err| p99 ms",
                "first-token receive lag p99 ms"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["mode"], str(r["c"]), str(r["procs"]), f(r["chunks_s"] / one[(r["mode"], r["c"])]) if (r["mode"], r["c"]) in one else "–",
            f"{r['ok']} / {r['failed']}", f"{r['chunks']:,}", f(r["chunks_s"], 0), f(r["cpu_us_chunk"]),
            f(1e6 / r["cpu_us_chunk"], 0), f(r["ttft_p50"], 3), f(r["ttft_p99"], 3), f(r["itl_p50"], 4), f(r["itl_p99"], 4),
            f(r["recv_lag_p99"], 3),
        )  # fmt: skip
    Console(width=220).print(table)


if __name__ == "__main__":
    main()
