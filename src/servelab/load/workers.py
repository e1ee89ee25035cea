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
orjson object.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from servelab.endpoint import Endpoint
from servelab.errors import ServelabError
from servelab.load.client import StreamClient
from servelab.load.outcome import Texts, count_tokens, fail, mark_incomplete
from servelab.records import RequestRecord
from servelab.redaction import remember
from servelab.results import EndpointInfo
from servelab.tokenizer import Tokenizer

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
    e = settings["endpoint"]
    endpoint = Endpoint(root=e["root"], info=EndpointInfo.model_validate(e["info"]), api_key=e["api_key"], tokenize_path=e["tokenize_path"])
    remember(endpoint.api_key)  # so that error texts are scrubbed of it here too
    origin, connections, timeout_s = settings["origin"], settings["connections"], settings["timeout_s"]
    tasks: dict[int, asyncio.Task] = {}

    def reply(rid: int, record: RequestRecord, task: asyncio.Task) -> None:
        """Send the record back however the request ended (a request cancelled before it started
        comes back ``incomplete`` too)."""
        tasks.pop(rid, None)
        texts = None
        if task.cancelled():
            if record.status == "ok" and record.end is None:  # cancelled before it was sent
                mark_incomplete(record, time.perf_counter() - origin)
        elif (exc := task.exception()) is not None:
            fail(record, "client_error", f"{type(exc).__name__}: {exc}")
        else:
            texts = task.result()
        writer.write(_frame({"id": rid, "record": record.model_dump(mode="json"), "texts": texts._asdict() if texts else None}))

    async with StreamClient(endpoint, origin=origin, connections=connections, request_timeout_s=timeout_s) as client:
        writer.write(_frame({"ready": os.getpid()}))
        while (msg := await _read(reader)) is not None:
            if msg["op"] == "send":
                record = RequestRecord.model_validate(msg["record"])
                task = tasks[msg["id"]] = asyncio.create_task(client.stream(record, msg["body"].encode()))
                task.add_done_callback(functools.partial(reply, msg["id"], record))
            elif msg["op"] == "cancel" and (task := tasks.get(msg["id"])) is not None:
                task.cancel()
        for task in list(tasks.values()):  # the coordinator went away: nobody waits for these
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


@dataclass
class _Worker:
    number: int
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    pending: dict[int, tuple[RequestRecord, asyncio.Future]] = field(default_factory=dict)
    alive: bool = True
    receiver: asyncio.Task | None = None


class WorkerPool:
    """``procs`` client worker processes behind :class:`StreamClient`'s interface (module docstring).

    Args:
        endpoint: the discovered server (its API key goes to the workers through the process
            start pipe, never the command line or the environment).
        origin: ``time.perf_counter()`` value that is time 0 of the run.
        connections: connection-pool size of the whole pool (split over the workers).
        request_timeout_s: a request still streaming after this long fails with ``timeout``.
        tokenizer: counts output tokens when the server sends no ``usage``.
        procs: worker processes (≥ 2).
        on_note: told, in a sentence, when a worker dies.

    Raises:
        ClientWorkersGone: from :meth:`send`, once every worker has died.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        origin: float,
        connections: int,
        request_timeout_s: float,
        procs: int,
        tokenizer: Tokenizer | None = None,
        on_note: Callable[[str], None] = lambda note: None,
    ) -> None:
        self.endpoint = endpoint
        self.origin = origin
        self.tokenizer = tokenizer
        self.procs = procs
        self._per_worker = math.ceil(connections / procs)
        self._timeout_s = request_timeout_s
        self._on_note = on_note
        self._ids = itertools.count()
        self._closing = False
        self.workers: list[_Worker] = []

    async def __aenter__(self) -> WorkerPool:
        e = self.endpoint
        settings = {"endpoint": {"root": e.root, "info": e.info.model_dump(mode="json"), "api_key": e.api_key, "tokenize_path": e.tokenize_path},
                    "origin": self.origin, "connections": self._per_worker, "timeout_s": self._timeout_s}  # fmt: skip
        try:
            for n in range(self.procs):
                await self._start(n, settings)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _start(self, n: int, settings: dict) -> None:
        """Start worker ``n`` and wait until its connection pool is open.

        Raises:
            ServelabError: it did not report ready within ``READY_WAIT_S``.
        """
        mine, theirs = socket.socketpair()
        with theirs:
            process = await asyncio.create_subprocess_exec(sys.executable, "-m", __name__, str(theirs.fileno()), str(n), pass_fds=(theirs.fileno(),))
        reader, writer = await asyncio.open_connection(sock=mine)
        worker = _Worker(n, process, writer)
        self.workers.append(worker)
        writer.write(_frame(settings))
        try:
            ready = await asyncio.wait_for(_read(reader), READY_WAIT_S)
        except asyncio.TimeoutError:
            ready = None
        if ready is None:
            raise ServelabError(f"client worker process {n} did not start within {READY_WAIT_S:.0f} s (exit code {process.returncode}); run with --client-procs 1")
        worker.receiver = asyncio.create_task(self._receive(worker, reader))

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        for worker in self.workers:
            worker.writer.close()
        for worker in self.workers:
            try:
                await asyncio.wait_for(worker.process.wait(), STOP_WAIT_S)
            except asyncio.TimeoutError:
                worker.process.kill()
                await worker.process.wait()
            if worker.receiver is not None:
                worker.receiver.cancel()

    async def _receive(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        """Records coming back from ``worker``; when it dies, its requests in flight fail."""
        while (msg := await _read(reader)) is not None:
            record, done = worker.pending.pop(msg["id"])
            returned = RequestRecord.model_validate(msg["record"])
            for name in RequestRecord.model_fields:
                setattr(record, name, getattr(returned, name))
            if not done.done():
                done.set_result(Texts(**msg["texts"]) if msg["texts"] else None)
        worker.alive = False
        if self._closing:
            return
        try:
            code = await asyncio.wait_for(worker.process.wait(), STOP_WAIT_S)
        except asyncio.TimeoutError:
            code = None
        note = f"client worker process {worker.number} exited (code {code}) with {len(worker.pending)} request(s) in flight: counted as failed"
        self._on_note(note)
        now = time.perf_counter() - self.origin
        for record, done in worker.pending.values():
            fail(record, "client_worker", note)
            record.end = record.end if record.end is not None else now
            if not done.done():
                done.set_result(None)
        worker.pending.clear()

    async def send(self, record: RequestRecord, body: bytes) -> RequestRecord:
        """As :meth:`StreamClient.send`, on the live worker with the fewest requests in flight.

        Raises:
            ClientWorkersGone: no worker is left.
            asyncio.CancelledError: as ``StreamClient.send`` (the record comes back ``incomplete``).
        """
        live = [w for w in self.workers if w.alive]
        if not live:
            raise ClientWorkersGone(f"all {self.procs} client worker processes died (see the run's notes); run with fewer --client-procs or 1")
        worker = min(live, key=lambda w: len(w.pending))
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        worker.pending[rid] = (record, done)
        worker.writer.write(_frame({"op": "send", "id": rid, "record": record.model_dump(mode="json"), "body": body.decode()}))
        try:
            texts = await done
        except asyncio.CancelledError:
            await self._cancel(worker, rid, record)
            raise
        if texts is not None:
            await count_tokens(record, texts, self.tokenizer)
        return record

    async def _cancel(self, worker: _Worker, rid: int, record: RequestRecord) -> None:
        """Ask the worker to stop request ``rid`` and wait (at most ``CANCEL_WAIT_S``) for its record;
        without one, mark it ``incomplete`` here."""
        if rid in worker.pending and worker.alive:
            answer: asyncio.Future = asyncio.get_running_loop().create_future()
            worker.pending[rid] = (record, answer)
            worker.writer.write(_frame({"op": "cancel", "id": rid}))
            try:
                await asyncio.wait_for(answer, CANCEL_WAIT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                worker.pending.pop(rid, None)
        if record.status == "ok" and record.end is None:
            mark_incomplete(record, time.perf_counter() - self.origin)


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]))
