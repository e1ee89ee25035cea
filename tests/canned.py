"""A canned HTTP server (aiohttp.web on loopback) that replays what a given engine sends.

Used for pure protocol logic that the embedded llama.cpp cannot show: vLLM's role-only first
chunk and ``reasoning`` field, SGLang's cards, error events, broken streams. The byte sequences
follow ../shared/reference/server-facts.md §3–5.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

from aiohttp import web


def sse(*objs: object, done: bool = True) -> list[bytes]:
    """SSE events for JSON objects (``data: {...}\\n\\n``), then ``data: [DONE]``."""
    events = [b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs]
    return events + ([b"data: [DONE]\n\n"] if done else [])


def delta(content=None, *, reasoning=None, reasoning_field="reasoning", role=None, finish=None) -> dict:
    d = {}
    if role:
        d["role"] = role
    if content is not None:
        d["content"] = content
    if reasoning is not None:
        d[reasoning_field] = reasoning
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def usage(prompt: int, completion: int, reasoning: int | None = None, cached: int | None = None) -> dict:
    u = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"choices": [], "usage": u}


def streaming(parts: list[bytes], *, split: bool = False, abort: bool = False):
    """A chat-completions handler that writes ``parts`` (byte by byte with ``split``), then ends
    the body properly or, with ``abort``, drops the connection."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in parts:
            for piece in ([part[i : i + 1] for i in range(len(part))] if split else [part]):
                await resp.write(piece)
                await asyncio.sleep(0)
        if abort:
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    return handler


@asynccontextmanager
async def canned_server(routes: dict[tuple[str, str], object]):
    """Serve ``{(method, path): handler or JSON-able body}`` on 127.0.0.1; yields the root URL."""
    app = web.Application()
    for (method, path), answer in routes.items():
        if callable(answer):
            handler = answer
        else:

            async def handler(request: web.Request, answer=answer) -> web.Response:
                status, body = answer if isinstance(answer, tuple) else (200, answer)
                return web.json_response(body, status=status)

        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
