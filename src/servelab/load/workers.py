"""Client worker processes: one run's streams spread over several processes of this host
(``servelab bench --client-procs N``).

One Python event loop reads about 130–165k streamed chunks a second (benchmarks/client_overhead.py);
near that, chunk timestamps wait for the loop and the client's own load shows up as latency.
:class:`WorkerPool` keeps the scheduler, the prompts, the records file and the server's metrics
in this process (the coordinator) and moves what costs per chunk — the HTTP stream, its
timestamps and parsing — into N worker processes, each with its own event loop and connection
pool (a :class:`~servelab.load.client.StreamClient`). It stands in for ``StreamClient``
(``origin``, ``send``, ``async with``), so closed and open loops, partial runs, resume and Ctrl-C
work as with one process:

- the workers are started, and ready, before the first request (a process start is not a latency);
- a request goes to the live worker with the fewest requests in flight; its record comes back
  when it ends and the coordinator writes it as it always does;
- one clock: a worker times with ``time.perf_counter`` against the coordinator's origin. That clock
  is the system-wide monotonic clock (CLOCK_MONOTONIC on Linux, mach_absolute_time on macOS,
  QueryPerformanceCounter on Windows: the same in every process), so a record's times mean the
  same whichever process took them. ``queued`` is the coordinator's hand-over; the trip to the
  worker is client-side wait (``start − queued``), never server latency;
- output the server did not count is counted here, with the run's tokenizer;
- cancellation (the end of a duration, Ctrl-C) is passed on; the worker returns the record
  ``incomplete`` with the chunks it had (or, after ``CANCEL_WAIT_S``, the coordinator marks it so);
- a worker that dies fails its requests in flight with ``error_kind`` ``client_worker`` (counted,
  never dropped) and is noted in the run; the others carry on; with none left the run stops with
  :class:`ClientWorkersGone`.

A worker is ``python -m servelab.load.workers FD N`` (not multiprocessing's spawn, which would
re-run a user's script that imports servelab without a ``__main__`` guard), given one end of a
socket pair; its settings, the API key among them, come as the first message on that socket,
never on the command line or in the environment. Messages: a 4-byte big-endian length and an
orjson object. Where the workers run is the pool's :class:`Backend`: these processes
(:class:`ProcessBackend`, the default), or Ray actors on a cluster's nodes with ``--ray``
(``servelab.load.ray_workers.RayBackend``); both run a :class:`Streamer`, and the pool treats them alike.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from servelab.server.endpoint import Endpoint, EndpointInfo
from servelab.errors import ServelabError
from servelab.load.apis import ApiName
from servelab.load.client import StreamClient
from servelab.load.outcome import Texts, count_tokens, fail, mark_incomplete
from servelab.values.records import RequestRecord
from servelab.guards.redaction import remember
from servelab.server.tokenizer import Tokenizer

CANCEL_WAIT_S = 2.0  # how long a cancelled request waits for its worker's record
STREAMS_PER_PROC = 256  # automatic --client-procs: one process per this many streams (issue 18: one loop's TTFT error grows from 256)
STOP_WAIT_S = 10.0
READY_WAIT_S = 60.0  # a worker imports servelab and opens its connection pool before the run starts


class ClientWorkersGone(ServelabError):
    """Every client worker process died; the run cannot go on."""


def auto_procs(peak_streams: int, cpus: int | None = None) -> int:
    """Worker processes for a run whose busiest level keeps ``peak_streams`` requests in flight:
    one per ``STREAMS_PER_PROC`` streams, at most one per CPU but one (left to the coordinator),
    and 1 (no workers: the coordinator streams itself) below ``STREAMS_PER_PROC``."""
    cpus = cpus if cpus is not None else os.cpu_count() or 1
    return max(1, min(cpus - 1, math.ceil(peak_streams / STREAMS_PER_PROC)))


def _frame(obj: object) -> bytes:
    data = orjson.dumps(obj)
    return len(data).to_bytes(4, "big") + data


async def _read(reader: asyncio.StreamReader) -> dict | None:
    """The next message, or None when the other side closed."""
    try:
        head = await reader.readexactly(4)
        return orjson.loads(await reader.readexactly(int.from_bytes(head, "big")))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class Streamer:
    """The worker side, in a worker process or a Ray actor: a :class:`StreamClient` opened with the
    coordinator's settings (``settings``: endpoint, origin on this worker's clock, connections,
    timeout), and the requests it streams, by id."""

    def __init__(self, settings: dict) -> None:
        e = settings["endpoint"]
        self.endpoint = Endpoint(root=e["root"], info=EndpointInfo.model_validate(e["info"]), api_key=e["api_key"], tokenize_path=e["tokenize_path"])
        remember(self.endpoint.api_key)  # so that error texts are scrubbed of it here too
        self.origin = settings["origin"]
        self.client = StreamClient(self.endpoint, origin=self.origin, connections=settings["connections"], request_timeout_s=settings["timeout_s"],
                                   api=settings["api"])  # fmt: skip
        self.tasks: dict[int, asyncio.Task] = {}

    async def __aenter__(self) -> Streamer:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self.tasks.values()):  # the coordinator went away: nobody waits for these
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self.client.__aexit__(*exc)

    def begin(self, rid: int, record_json: dict, body: str, done: Callable[[dict], None]) -> None:
        """Stream request ``rid``; ``done`` gets its answer (:meth:`answer`) when it ends."""
        record = RequestRecord.model_validate(record_json)
        task = self.tasks[rid] = asyncio.create_task(self.client.stream(record, body.encode()))
        task.add_done_callback(lambda t: done(self.answer(rid, record, t)))

    def cancel(self, rid: int) -> None:
        """Cut request ``rid`` short (its answer then says ``incomplete``)."""
        if (task := self.tasks.get(rid)) is not None:
            task.cancel()

    def answer(self, rid: int, record: RequestRecord, task: asyncio.Task) -> dict:
        """The message for the coordinator however the request ended (one cancelled before it was
        sent comes back ``incomplete`` too)."""
        self.tasks.pop(rid, None)
        texts = None
        if task.cancelled():
            if record.status == "ok" and record.end is None:
                mark_incomplete(record, time.perf_counter() - self.origin)
        elif (exc := task.exception()) is not None:
            fail(record, "client_error", f"{type(exc).__name__}: {exc}")
        else:
            texts = task.result()
        return {"id": rid, "record": record.model_dump(mode="json"), "texts": texts._asdict() if texts else None}


def _worker_main(fd: int) -> None:
    """A worker process on socket ``fd``: stream what the coordinator sends until it closes the
    socket. Ctrl-C reaches the whole process group; only the coordinator acts on it (it cancels,
    then closes the socket)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_serve(socket.socket(fileno=fd)))


async def _serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    settings = await _read(reader)
    if settings is None:
        return
    async with Streamer(settings) as streamer:
        writer.write(_frame({"ready": os.getpid()}))
        while (msg := await _read(reader)) is not None:
            if msg["op"] == "send":
                streamer.begin(msg["id"], msg["record"], msg["body"], lambda answer: writer.write(_frame(answer)))
            elif msg["op"] == "cancel":
                streamer.cancel(msg["id"])


@dataclass
class Worker:
    """One client worker as the pool sees it: it takes requests and cancellations and hands its
    answers to :meth:`WorkerPool.answer`, and its end to :meth:`WorkerPool.lost`."""

    label: str
    pending: dict[int, tuple[RequestRecord, asyncio.Future]] = field(default_factory=dict)
    alive: bool = True

    def submit(self, rid: int, record: RequestRecord, body: bytes) -> None:
        raise NotImplementedError

    def cancel(self, rid: int) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError


@dataclass
class ProcessWorker(Worker):
    """A worker process of this host (``python -m servelab.load.workers``)."""

    process: Any = None  # asyncio.subprocess.Process
    writer: Any = None  # asyncio.StreamWriter
    receiver: asyncio.Task | None = None

    @classmethod
    async def start(cls, n: int, settings: dict, pool: WorkerPool) -> ProcessWorker:
        """Start worker ``n`` and wait until its connection pool is open.

        Raises:
            ServelabError: it did not report ready within ``READY_WAIT_S``.
        """
        mine, theirs = socket.socketpair()
        with theirs:
            process = await asyncio.create_subprocess_exec(sys.executable, "-m", __name__, str(theirs.fileno()), str(n), pass_fds=(theirs.fileno(),))
        reader, writer = await asyncio.open_connection(sock=mine)
        worker = cls(f"client worker process {n}", process=process, writer=writer)
        writer.write(_frame(settings))
        try:
            ready = await asyncio.wait_for(_read(reader), READY_WAIT_S)
        except asyncio.TimeoutError:
            ready = None
        if ready is None:
            await worker.stop()
            raise ServelabError(f"{worker.label} did not start within {READY_WAIT_S:.0f} s (exit code {process.returncode}); run with --client-procs 1")
        worker.receiver = asyncio.create_task(worker._receive(reader, pool))
        return worker

    async def _receive(self, reader: asyncio.StreamReader, pool: WorkerPool) -> None:
        while (msg := await _read(reader)) is not None:
            pool.answer(self, msg)
        try:
            code = await asyncio.wait_for(self.process.wait(), STOP_WAIT_S)
        except asyncio.TimeoutError:
            code = None
        pool.lost(self, f"exited (code {code})")

    def submit(self, rid: int, record: RequestRecord, body: bytes) -> None:
        self.writer.write(_frame({"op": "send", "id": rid, "record": record.model_dump(mode="json"), "body": body.decode()}))

    def cancel(self, rid: int) -> None:
        self.writer.write(_frame({"op": "cancel", "id": rid}))

    async def stop(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.process.wait(), STOP_WAIT_S)
        except asyncio.TimeoutError:
            self.process.kill()
            await self.process.wait()
        if self.receiver is not None:
            self.receiver.cancel()


class Backend:
    """Where a pool's client workers run. :meth:`start` adds each worker to ``pool.workers`` as it
    starts (so that a failed start stops those already up); :meth:`close` undoes what it set up."""

    async def start(self, pool: WorkerPool) -> None:
        """Start the pool's workers (``pool.procs`` of them; the backend may set that number).

        Raises:
            ServelabError: a worker that does not start, naming it and the fix.
        """
        raise NotImplementedError

    def close(self) -> None:
        """After the workers are stopped: leave what :meth:`start` joined (nothing by default)."""


class ProcessBackend(Backend):
    """Worker processes of this host (``python -m servelab.load.workers``)."""

    async def start(self, pool: WorkerPool) -> None:
        """Start ``pool.procs`` worker processes, one after the other, each ready before the next."""
        assert pool.procs is not None
        for n in range(pool.procs):
            pool.workers.append(await ProcessWorker.start(n, pool.settings(pool.origin, pool.procs), pool))


class WorkerPool:
    """Client workers behind :class:`StreamClient`'s interface (module docstring).

    Args:
        endpoint: the discovered server (its API key goes to the workers in their first message,
            never on a command line or in the environment).
        origin: ``time.perf_counter()`` value that is time 0 of the run.
        connections: connection-pool size of the whole pool (split over the workers).
        request_timeout_s: a request still streaming after this long fails with ``timeout``.
        procs: workers (processes, or Ray actors); None for Ray: one per node.
        tokenizer: counts output tokens when the server sends no ``usage``.
        on_note: told, in a sentence, where each Ray worker runs and when a worker dies.
        backend: where the workers run (default: processes of this host, :class:`ProcessBackend`).
        api: the API the request bodies are for (``StreamClient``'s ``api``).

    Raises:
        ClientWorkersGone: from :meth:`send`, once every worker has died.
        ServelabError: from ``async with``, a worker that does not start.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        origin: float,
        connections: int,
        request_timeout_s: float,
        procs: int | None,
        tokenizer: Tokenizer | None = None,
        on_note: Callable[[str], None] = lambda note: None,
        backend: Backend | None = None,
        api: ApiName = "chat",
    ) -> None:
        self.endpoint = endpoint
        self.api = api
        self.origin = origin
        self.tokenizer = tokenizer
        self.procs = procs
        self.connections = connections
        self.request_timeout_s = request_timeout_s
        self.on_note = on_note
        self.backend = backend or ProcessBackend()
        self._ids = itertools.count()
        self._closing = False
        self.workers: list[Worker] = []
        self._sticky: dict[object, Worker] = {}  # affinity key (a session) → the worker that streams it (a few per session: kept for the run)

    def settings(self, origin: float, workers: int) -> dict:
        """A worker's first message: the endpoint, the origin on its clock, its share of connections."""
        e = self.endpoint
        return {"endpoint": {"root": e.root, "info": e.info.model_dump(mode="json"), "api_key": e.api_key, "tokenize_path": e.tokenize_path},
                "origin": origin, "connections": math.ceil(self.connections / workers), "timeout_s": self.request_timeout_s, "api": self.api}  # fmt: skip

    async def __aenter__(self) -> WorkerPool:
        try:
            await self.backend.start(self)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        for worker in self.workers:
            await worker.stop()
        self.backend.close()

    def answer(self, worker: Worker, msg: dict) -> None:
        """A record coming back from ``worker``: copied into the coordinator's record, its sender woken."""
        record, done = worker.pending.pop(msg["id"])
        returned = RequestRecord.model_validate(msg["record"])
        for name in RequestRecord.model_fields:
            setattr(record, name, getattr(returned, name))
        if not done.done():
            done.set_result(Texts(**msg["texts"]) if msg["texts"] else None)

    def lost(self, worker: Worker, why: str) -> None:
        """``worker`` is gone (``why``: how): its requests in flight fail as ``client_worker``, noted."""
        if not worker.alive:
            return
        worker.alive = False
        if self._closing:
            return
        note = f"{worker.label} {why} with {len(worker.pending)} request(s) in flight: counted as failed"
        self.on_note(note)
        now = time.perf_counter() - self.origin
        for record, done in worker.pending.values():
            fail(record, "client_worker", note)
            record.end = record.end if record.end is not None else now
            if not done.done():
                done.set_result(None)
        worker.pending.clear()

    async def send(self, record: RequestRecord, body: bytes, affinity: object = None) -> Texts | None:
        """As :meth:`StreamClient.send`, on the live worker with the fewest requests in flight; every
        request with the same ``affinity`` key (a multi-turn session) goes to the worker that took the
        first, while it lives.

        Raises:
            ClientWorkersGone: no worker is left.
            asyncio.CancelledError: as ``StreamClient.send`` (the record comes back ``incomplete``).
        """
        live = [w for w in self.workers if w.alive]
        if not live:
            raise ClientWorkersGone(f"all {self.procs} client worker processes died (see the run's notes); run with fewer --client-procs or 1")
        worker = self._sticky.get(affinity) if affinity is not None else None
        if worker is None or not worker.alive:
            worker = min(live, key=lambda w: len(w.pending))
            if affinity is not None:
                self._sticky[affinity] = worker
        rid = next(self._ids)
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        worker.pending[rid] = (record, done)
        worker.submit(rid, record, body)
        try:
            texts = await done
        except asyncio.CancelledError:
            await self._cancel(worker, rid, record)
            raise
        if texts is not None:
            await count_tokens(record, texts, self.tokenizer)
        return texts

    async def _cancel(self, worker: Worker, rid: int, record: RequestRecord) -> None:
        """Ask the worker to stop request ``rid`` and wait (at most ``CANCEL_WAIT_S``) for its record;
        without one, mark it ``incomplete`` here."""
        if rid in worker.pending and worker.alive:
            answer: asyncio.Future = asyncio.get_running_loop().create_future()
            worker.pending[rid] = (record, answer)
            worker.cancel(rid)
            try:
                await asyncio.wait_for(answer, CANCEL_WAIT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                worker.pending.pop(rid, None)
        if record.status == "ok" and record.end is None:
            mark_incomplete(record, time.perf_counter() - self.origin)


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]))
