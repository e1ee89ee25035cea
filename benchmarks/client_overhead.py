"""Client overhead and timestamp honesty of servelab's streaming client.

Runs a local SSE emitter (an aiohttp server in its own process, pinned to CPU 1) that streams
``--tokens`` one-token chunks per request on a known schedule and logs, per request, when the
request arrived and when it actually handed its first and last chunk to the socket (monotonic
clock, shared by both processes). servelab's own client and closed-loop scheduler (pinned to
CPU 0) drive it at 1, 64 and 256 concurrent streams, twice:

- **throughput**: TTFT 0, ITL 0 (the emitter streams as fast as it can). Reports the chunks/s
  that flowed and the client's CPU time per chunk; ``1 / (CPU per chunk)`` is what one client core
  could sustain (the emitter, not the client, may be the limit of what flowed).
- **accuracy**: TTFT 50 ms, ITL 10 ms. Reports client − emitter errors: TTFT error =
  (first_token − start) − (first_sent − arrival); ITL error = per-request
  (t_last − t_first)/(n − 1) on the client minus the same on the emitter.

Usage: ``python benchmarks/client_overhead.py [--seconds 6] [--tokens 256]``; prints a table.
Targets (issue 2): ≥ 100,000 chunks/s on one core; at 256 streams TTFT error p99 ≤ 1 ms and ITL
error p99 ≤ 0.1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
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

from servelab.endpoint import Endpoint
from servelab.load.client import StreamClient, chat_body
from servelab.load.scheduler import closed_loop
from servelab.metrics.summary import percentile
from servelab.records import RequestRecord
from servelab.results import EndpointInfo


# ----------------------------------------------------------------------------- emitter (CPU 1)
def emitter_main(port: int, ttft_ms: float, itl_ms: float) -> None:
    """The SSE emitter process: a raw asyncio protocol (uvloop + httptools), so that it is never the
    bottleneck and its timestamps are taken as early as user space can: ``arrival`` when the first
    bytes of a request are read, ``first``/``last`` just before a chunk is handed to the socket.

    POST /v1/chat/completions streams ``max_tokens`` one-token chunks (chunked transfer encoding,
    as vLLM and llama.cpp do), then a usage chunk and ``[DONE]``; GET /log returns and clears the
    per-request truth; GET /v1/models lists one model.
    """
    import httptools
    import uvloop

    clock = time.perf_counter
    log: list[dict] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"

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
            if self.arrival is None:
                self.arrival = clock()
            self.parser.feed_data(data)

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
                asyncio.ensure_future(self.stream(json.loads(self.body)))

        def connection_lost(self, exc: Exception | None) -> None:
            self.transport = None

        async def stream(self, req: dict) -> None:
            n, key, t = int(req["max_tokens"]), req["messages"][0]["content"], self.transport
            t.write(head)
            first = last = None
            if itl_ms or ttft_ms:
                sent = await paced(t, self.arrival + ttft_ms / 1e3, n)
                if sent is None:
                    return
                first, last = sent
            else:
                for i in range(n):
                    if i % 8 == 0:
                        await asyncio.sleep(0)  # as fast as possible, but streams interleave
                    if self.transport is None:
                        return  # the client went away (end of a duration-bounded phase)
                    last = clock()
                    first = first or last
                    t.write(final if i == n - 1 else token)
            usage = {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": n + 8}}
            t.write(frame(b"data: " + json.dumps(usage).encode() + b"\n\n") + frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            t.close()
            log.append({"key": key, "arrival": self.arrival, "first": first, "last": last, "n": n})

    # Paced streams share one ticker, so a chunk costs one transport.write, not a timer and a
    # coroutine switch each: the emitter stays idle enough to read new requests at once.
    pending: list[list] = []  # [due time, index, n, transport, first, future]
    tick_s = 0.0002

    async def paced(t: asyncio.Transport, first_due: float, n: int) -> tuple[float, float] | None:
        fut = asyncio.get_running_loop().create_future()
        pending.append([first_due, 0, n, t, None, fut])
        return await fut

    async def ticker() -> None:
        while True:
            await asyncio.sleep(tick_s)
            now = clock()
            keep = []
            for item in pending:
                due, i, n, t, first, fut = item
                if t.is_closing():
                    fut.set_result(None)
                    continue
                while due <= now and i < n:
                    sent = clock()
                    first = first or sent
                    t.write(final if i == n - 1 else token)
                    i += 1
                    due = item[0] = due + itl_ms / 1e3
                item[1], item[4] = i, first
                if i == n:
                    fut.set_result((first, sent))
                else:
                    keep.append(item)
            pending[:] = keep

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Emitter, "127.0.0.1", port, backlog=4096)
        asyncio.ensure_future(ticker())
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


def start_emitter(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--emitter", str(port), str(ttft_ms), str(itl_ms)]
    proc = subprocess.Popen(cmd, preexec_fn=lambda: os.sched_setaffinity(0, {1}))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1).read()
            return proc, url
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # waiting for the emitter to listen


# ----------------------------------------------------------------------------- client (CPU 0)
async def drive(url: str, concurrency: int, tokens: int, seconds: float) -> tuple[list[RequestRecord], float, float, float]:
    """Closed loop against the emitter: one warm-up round, then ``seconds`` measured. Returns records, wall s, CPU s."""
    endpoint = Endpoint(root=url, info=EndpointInfo(url=url, engine="generic", model="emitter"))
    origin = time.perf_counter()
    counter = iter(range(10**9))

    def make(_: int) -> tuple[RequestRecord, bytes]:
        i = next(counter)
        rec = RequestRecord(index=i, concurrency=concurrency, phase="measured", max_tokens=tokens, queued=time.perf_counter() - origin)
        return rec, chat_body(endpoint, f"req-{i}", max_tokens=tokens, ignore_eos=False, cold=True)

    async with StreamClient(endpoint, origin=origin, connections=concurrency, request_timeout_s=120) as client:

        async def alive() -> bool:
            return True

        await closed_loop(client, make, concurrency=concurrency, count=concurrency, on_record=lambda r: None, alive=alive)
        cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        phase = await closed_loop(client, make, concurrency=concurrency, duration_s=seconds, on_record=lambda r: None, alive=alive)
        cpu1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return phase.records, wall1 - wall0, cpu, origin


def measure(mode: str, ttft_ms: float, itl_ms: float, concurrency: int, tokens: int, seconds: float) -> dict:
    import uvloop

    proc, url = start_emitter(ttft_ms, itl_ms)
    try:
        urllib.request.urlopen(url + "/log").read()  # nothing yet; also a liveness check
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            records, wall, cpu, origin = runner.run(drive(url, concurrency, tokens, seconds))
        truth = {e["key"]: e for e in json.loads(urllib.request.urlopen(url + "/log").read())}
    finally:
        proc.terminate()
        proc.wait()
    chunks = sum(len(r.chunk_times) for r in records)
    ok = [r for r in records if r.status == "ok"]
    ttft_err, itl_err, send_lag, recv_lag, last_lag = [], [], [], [], []
    for r in ok:
        t = truth.get(f"req-{r.index}")
        if t is None or len(r.chunk_times) < 2:
            continue
        ttft_err.append(((r.first_token - r.start) - (t["first"] - t["arrival"])) * 1e3)
        send_lag.append((t["arrival"] - (origin + r.start)) * 1e3)
        recv_lag.append(((origin + r.first_token) - t["first"]) * 1e3)
        last_lag.append(((origin + r.start + r.chunk_times[-1]) - t["last"]) * 1e3)
        n = len(r.chunk_times)
        itl_err.append(((r.chunk_times[-1] - r.chunk_times[0]) / (n - 1) - (t["last"] - t["first"]) / (t["n"] - 1)) * 1e3)
    last_lag.sort()
    send_lag.sort()
    recv_lag.sort()
    ttft_err.sort()
    itl_err.sort()
    abs_ttft = sorted(abs(e) for e in ttft_err)
    abs_itl = sorted(abs(e) for e in itl_err)
    return {
        "mode": mode,
        "c": concurrency,
        "ok": len(ok),
        "failed": sum(r.status == "failed" for r in records),
        "chunks": chunks,
        "chunks_s": chunks / wall,
        "cpu_us_chunk": cpu / chunks * 1e6 if chunks else float("nan"),
        "ttft_p50": percentile(ttft_err, 50) if ttft_err else None,
        "ttft_p99": percentile(abs_ttft, 99) if abs_ttft else None,
        "itl_p50": percentile(itl_err, 50) if itl_err else None,
        "itl_p99": percentile(abs_itl, 99) if abs_itl else None,
        "send_lag_p50": percentile(send_lag, 50) if send_lag else None,
        "send_lag_p99": percentile(send_lag, 99) if send_lag else None,
        "recv_lag_p50": percentile(recv_lag, 50) if recv_lag else None,
        "recv_lag_p99": percentile(recv_lag, 99) if recv_lag else None,
        "last_lag_p50": percentile(last_lag, 50) if last_lag else None,
        "last_lag_p99": percentile(last_lag, 99) if last_lag else None,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--emitter":
        emitter_main(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds per cell (after one warm-up round)")
    ap.add_argument("--tokens", type=int, default=256, help="chunks (one token each) per request")
    ap.add_argument("--concurrency", default="1,64,256")
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for mode, ttft, itl in (("throughput", 0.0, 0.0), ("accuracy", 50.0, 10.0)):
        for c in levels:
            rows.append(measure(mode, ttft, itl, c, args.tokens, args.seconds))
            print(json.dumps(rows[-1]), file=sys.stderr)

    def f(v, d=2):
        return "–" if v is None else f"{v:,.{d}f}"

    table = Table(title=f"servelab client overhead ({args.tokens} one-token chunks per request; client on CPU 0, emitter on CPU 1)")
    for col in ("mode", "streams", "ok / failed", "chunks", "chunks/s flowed", "client CPU µs/chunk",
                "client capacity chunks/s/core", "TTFT err p50 ms", "|TTFT err| p99 ms", "ITL err p50 ms", "|ITL err| p99 ms"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["mode"], str(r["c"]), f"{r['ok']} / {r['failed']}", f"{r['chunks']:,}", f(r["chunks_s"], 0), f(r["cpu_us_chunk"]),
            f(1e6 / r["cpu_us_chunk"], 0), f(r["ttft_p50"], 3), f(r["ttft_p99"], 3), f(r["itl_p50"], 4), f(r["itl_p99"], 4),
        )  # fmt: skip
    Console(width=220).print(table)


if __name__ == "__main__":
    main()
