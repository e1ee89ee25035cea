"""Streaming OpenAI chat client: one request in, one :class:`RequestRecord` out.

Timing rules (docs/metrics.md):

- ``start`` is taken when aiohttp hands the request body to the connection (its
  ``on_request_chunk_sent`` trace), not when the request was queued, so client-side waiting for
  a connection or a busy event loop never counts as server latency.
- Every chunk is timestamped, and parsed, in the connection's ``data_received`` — the moment its
  bytes were read from the socket — not when the request's coroutine would next be scheduled
  (see :class:`TimedResponseHandler`). So hundreds of streams do not queue behind each other's
  coroutines, and a chunk costs no task switch. Chunks read together share a time.
- A chunk counts as a token chunk when its delta carries ``content`` or reasoning text
  (``reasoning_content`` — llama.cpp, SGLang, vLLM < 0.11.1 — or ``reasoning`` — vLLM ≥ 0.11.1);
  the role-only first chunk vLLM sends does not.

SSE framing: aiohttp has no Server-Sent-Events reader, so events are split here on blank lines
and only ``data:`` fields are read, which is all OpenAI-compatible servers send (WHATWG HTML
§9.2 "Server-sent events"). Each chunk is parsed and validated in one pass by pydantic
(the API's ``events`` adapter, ``servelab.load.apis``: typed dicts: as fast as orjson plus a dict walk, ~3 µs a chunk; per-chunk
cost is the client's bottleneck at high stream counts, see benchmarks/client_overhead.py). A chunk
of any other shape (``null``, a list, a choice that is not an object, non-string content,
non-integer or negative usage) fails that one request as ``bad_chunk``; the run goes on.
"""

from __future__ import annotations

import asyncio
import functools
import time
from types import SimpleNamespace

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from pydantic import ValidationError

from servelab import engines
from servelab.server.endpoint import Endpoint
from servelab.errors import first_problem
from servelab.load import apis
from servelab.load.apis.base import Api
from servelab.load.outcome import ERROR_TEXT_LIMIT, Texts, count_tokens, fail, mark_incomplete
from servelab.values.records import RequestRecord
from servelab.server.tokenizer import Tokenizer

ERROR_BODY_LIMIT = 65536  # at most this much of an error body is read (a huge one never whole)


async def _on_body_sent(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    """aiohttp trace hook: the request body reached the connection; that is the request's start."""
    holder = ctx.trace_request_ctx
    if holder is not None:
        holder.sent = time.perf_counter()


def _error_message(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body text, shortened."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message", err) if isinstance(err, dict) else err
        text = msg if isinstance(msg, str) else orjson.dumps(msg).decode()
    except (orjson.JSONDecodeError, AttributeError):
        text = body.decode("utf-8", "replace")
    return " ".join(text.split())[:ERROR_TEXT_LIMIT]


class StreamParser:
    """Parses an OpenAI chat-completion (or completion) SSE stream into a record, as its bytes arrive.

    ``feed(data, t)`` takes body bytes read at ``t`` (``perf_counter`` seconds); events may be
    split across calls. Fills ``record``'s token-chunk times (seconds since ``start``),
    ``first_token``, ``first_content``, ``finish_reason`` and server-reported usage; the text is
    kept for token counting when the server sends no usage. The first error event or unparsable
    chunk sets ``error`` (kind, message) and stops parsing.
    """

    def __init__(self, record: RequestRecord, start: float, origin: float, api: Api = apis.APIS["chat"]) -> None:
        self.record = record
        self.start = start
        self.origin = origin
        self.api = api
        self._events = api.events
        self.buf = b""
        self.parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_chunks = 0
        self.done = False
        self.error: tuple[str, str] | None = None

    def feed(self, data: bytes, t: float) -> None:
        """Consume body bytes that arrived at time ``t``: each ``data:`` event validated and read by
        the API (``servelab.load.apis``). Nothing after ``data: [DONE]`` is read (data there marks
        the record ``after_done``)."""
        if self.error is not None:
            return
        if self.done:
            self._after_done(data)
            return
        buf = self.buf + data
        while True:
            cut, sep = buf.find(b"\n\n"), 2
            if cut < 0 and b"\r" in buf:
                cut, sep = buf.find(b"\r\n\r\n"), 4
            if cut < 0:
                break
            event, buf = buf[:cut], buf[cut + sep :]
            lines = event.splitlines()
            for i, line in enumerate(lines):
                if not line.startswith(b"data:"):
                    continue  # comments (": ping"), event:, id:, retry:
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done, self.buf = True, b""
                    self._after_done(b"\n".join(lines[i + 1 :]) + b"\n" + buf)
                    return
                try:
                    obj = self._events.validate_json(payload)
                except ValidationError as exc:
                    self.error = ("bad_chunk", _chunk_problem(exc, payload))
                    return
                self.api.read(obj, self, t)
                if self.error is not None:
                    return
        self.buf = buf

    def token(self, t: float, content: str | None, reasoning: str | None) -> None:
        """A token chunk at ``t``: its time, the first token's and first content's, its text."""
        record = self.record
        record.chunk_times.append(t - self.start)
        if record.first_token is None:
            record.first_token = t - self.origin
        if content:
            self.parts.append(content)
            if record.first_content is None:
                record.first_content = t - self.origin
        if reasoning:
            self.reasoning_parts.append(reasoning)
            self.reasoning_chunks += 1

    def finish(self, reason: str) -> None:
        self.record.finish_reason = reason

    def usage(self, prompt: int | None, output: int | None, reasoning: int | None, cached: int | None) -> None:
        """Copy the server-reported counts."""
        record = self.record
        if prompt is not None:
            record.prompt_tokens, record.prompt_tokens_source = prompt, "usage"
        if output is not None:
            record.output_tokens, record.output_tokens_source = output, "usage"
        if reasoning is not None:
            record.reasoning_tokens, record.reasoning_tokens_source = reasoning, "usage"
        if cached is not None:
            record.cached_prompt_tokens = cached

    def failed(self, kind: str, detail: object) -> None:
        """The stream reported an error: ``detail`` an OpenAI-style error object, or text."""
        self.error = (kind, _error_message(orjson.dumps(detail)))

    def extra_choice(self) -> None:
        if "extra_choices" not in self.record.anomalies:
            self.record.anomalies.append("extra_choices")

    def _after_done(self, data: bytes) -> None:
        if b"data:" in data and "after_done" not in self.record.anomalies:
            self.record.anomalies.append("after_done")


def _chunk_problem(exc: ValidationError, payload: bytes) -> str:
    """One line saying what was wrong with a stream chunk, and the chunk's start."""
    json_invalid = exc.errors(include_url=False, include_input=False)[0]["type"] == "json_invalid"
    kind = "was not JSON" if json_invalid else first_problem(exc, "the chunk")
    return f"a stream chunk {kind} ({payload[:120].decode('utf-8', 'replace')!r})"


class TimedResponseHandler(ResponseHandler):
    """aiohttp's connection protocol that timestamps every socket read and feeds a :class:`StreamParser`.

    After aiohttp has parsed a read (HTTP framing, chunked encoding), the body bytes it produced
    are taken from the response's ``StreamReader`` (``read_nowait``, public API) and parsed at
    once with that read's time. ``response_t`` is when the response headers were read,
    ``last_t`` the latest read. (aiohttp has no public hook for the protocol; it is installed by
    :class:`TimedConnector`, and tests/test_client.py fails if aiohttp stops honouring it.)
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.parser: StreamParser | None = None
        self.parsed_payload: object = None
        self.seen_payload: object = None
        self.response_t = 0.0
        self.last_t = 0.0

    def data_received(self, data: bytes) -> None:
        if not data:  # aiohttp calls this with b"" to resume parsing after each read; not a read
            super().data_received(data)
            return
        t = self.last_t = time.perf_counter()
        super().data_received(data)
        payload = self._payload
        if payload is not self.seen_payload:  # a new response (connections may be kept alive)
            self.seen_payload, self.response_t = payload, t
        if self.parser is not None:  # (the response may have ended and been released in this read)
            body = self.parsed_payload.read_nowait(-1)
            if body:
                self.parser.feed(body, t)

    def resume_reading(self, resume_parser: bool = True) -> None:
        """Skip aiohttp's resume work when nothing was paused (it runs after every read otherwise:
        a second parser pass over b"" and a transport call, a quarter of the per-chunk cost)."""
        if self._reading_paused or getattr(self, "_buffer_paused", False):
            super().resume_reading(resume_parser)

    def attach(self, parser: StreamParser, payload: aiohttp.StreamReader) -> None:
        """Parse ``payload`` with ``parser`` from now on; body bytes already buffered are parsed now."""
        self.parser, self.parsed_payload = parser, payload
        body = payload.read_nowait(-1)
        if body:
            parser.feed(body, self.last_t)

    def detach(self) -> None:
        """Stop parsing (the response ended or the request was abandoned)."""
        self.parser = self.parsed_payload = None


class TimedConnector(aiohttp.TCPConnector):
    """A TCP connector whose connections are :class:`TimedResponseHandler` protocols."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(TimedResponseHandler, loop=self._loop)


class StreamClient:
    """Sends chat (or completion) requests with ``stream: true`` and records what came back.

    Args:
        endpoint: the discovered server.
        origin: ``time.perf_counter()`` value that is time 0 of the run.
        connections: connection-pool size; at least the highest concurrency.
        request_timeout_s: a request still streaming after this long fails with ``timeout``.
        tokenizer: counts output tokens when the server sends no ``usage``.
        api: the API (``--endpoint``, ``servelab.load.apis``) the bodies of :func:`request_body`
            were made for: its path and how its stream is read.

    Use as ``async with StreamClient(...) as client``.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        origin: float,
        connections: int,
        request_timeout_s: float,
        tokenizer: Tokenizer | None = None,
        api: apis.ApiName = "chat",
    ) -> None:
        self.endpoint = endpoint
        self.origin = origin
        self.format = apis.get(api)
        self.url = endpoint.api_base + self.format.path
        self.tokenizer = tokenizer
        self._connections = connections
        self._timeout_s = request_timeout_s
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, connect=min(10.0, request_timeout_s))
        self._headers = {"Content-Type": "application/json", **endpoint.headers()}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamClient:
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_on_body_sent)
        connector = TimedConnector(limit=self._connections + 4, **engines.get(self.endpoint.info.engine).connector_options())
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trace_configs=[trace])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(self, record: RequestRecord, body: bytes, affinity: object = None) -> Texts | None:
        """Send one request and fill ``record`` in place with its timings, counts and status; return
        what the server answered (None when the request failed). ``affinity`` is unused here (one
        process; :class:`servelab.load.workers.WorkerPool` keeps a session on one worker with it).

        Never raises for server or network errors: they become ``status="failed"`` with an
        ``error_kind`` (``http_<status>``, ``connect``, ``disconnected``, ``timeout``,
        ``stream_error``, ``truncated``, ``bad_chunk``, ``client_error``). Cancellation marks the
        record ``incomplete`` and is re-raised.
        """
        texts = await self.stream(record, body)
        if texts is not None:
            await count_tokens(record, texts, self.tokenizer)
        return texts

    async def stream(self, record: RequestRecord, body: bytes) -> Texts | None:
        """:meth:`send`'s network part: fill ``record``'s timings, status and the counts the server
        sent; return the streamed text for :meth:`count_tokens` when the request succeeded (None
        when it failed). Errors and cancellation as :meth:`send`."""
        assert self._session is not None, "use StreamClient as an async context manager"
        origin = self.origin
        clock = time.perf_counter
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        sent = SimpleNamespace(sent=None)
        parser: StreamParser | None = None
        proto = None
        try:
            async with self._session.post(self.url, data=body, headers=self._headers, trace_request_ctx=sent) as resp:
                now = clock()
                proto = resp.connection.protocol if resp.connection is not None else None
                timed = isinstance(proto, TimedResponseHandler)
                start = sent.sent if sent.sent is not None else now
                record.start = start - origin
                record.first_byte = (proto.response_t if timed else now) - origin
                record.http_status = resp.status
                if resp.status != 200:
                    record.end = clock() - origin
                    return fail(record, f"http_{resp.status}", _error_message(await resp.content.read(ERROR_BODY_LIMIT)))
                parser = StreamParser(record, start, origin, self.format)
                if timed:
                    proto.attach(parser, resp.content)
                    async with asyncio.timeout_at(deadline):
                        await resp.content.wait_eof()
                    record.end = proto.last_t - origin
                else:  # a connector without timed protocols: parse as the coroutine reads
                    while data := await resp.content.readany():
                        parser.feed(data, clock())
                    record.end = clock() - origin
        except asyncio.CancelledError:
            mark_incomplete(record, clock() - origin)
            raise
        except asyncio.TimeoutError:
            record.end = clock() - origin
            return fail(record, "timeout", "no complete response within the request timeout")
        except aiohttp.ClientConnectorError as exc:
            record.end = clock() - origin
            return fail(record, "connect", str(exc))
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
            record.end = clock() - origin
            return fail(record, "disconnected", str(exc) or type(exc).__name__)
        except aiohttp.ClientError as exc:
            record.end = clock() - origin
            return fail(record, "client_error", f"{type(exc).__name__}: {exc}")
        finally:
            if isinstance(proto, TimedResponseHandler):
                proto.detach()
        if parser.error is not None:
            return fail(record, *parser.error)
        if not parser.done and record.finish_reason is None:
            return fail(record, "truncated", "the stream ended without finish_reason or [DONE]" if parser.api.ends_with_done else "the stream ended before its response.completed event")
        return Texts(content="".join(parser.parts), reasoning="".join(parser.reasoning_parts), reasoning_chunks=parser.reasoning_chunks)
