"""A fast, fault-injecting OpenAI-compatible server (aiohttp) for the fault suite.

It serves what ``servelab bench`` needs (``/v1/models`` as vLLM, ``/tokenize`` and ``/detokenize``
at one token per character, streamed ``/v1/chat/completions`` with usage, ``/health``) as fast as
it can, and injects faults into chat requests by number: request n (1 = the first, servelab's
calibration) gets fault F when ``n % every == offset`` for F's ``--F every[:offset]``.

Faults: ``malformed`` (one chunk of the shape ``--chunk`` picks), ``error`` (HTTP ``--status``
with an error body), ``drop`` (the connection closed mid-stream), ``stall`` (headers, one chunk,
then nothing), ``slow`` (headers after ``--slow-s``), ``echo`` (HTTP 400 whose body echoes the
request's Authorization header), ``huge`` (HTTP 500 with a 16 MiB body), ``binary`` (a chunk of
non-UTF-8 bytes), ``zero`` (a stream of no tokens, usage 0), ``exit`` (the whole server process
exits mid-stream: a crashed server). Lies: ``dup`` (every token chunk sent twice), ``choices`` (an
extra choice of index 1 beside each), ``after-done`` (token chunks after ``[DONE]``), ``inflate`` /
``deflate`` (usage.completion_tokens 10× / half of what was sent), ``cached`` (usage says the whole
prompt came from the prefix cache). Framing: ``crlf`` (events ended by CRLF CRLF), ``comments``
(an SSE comment before each event), ``split`` (each event written in two pieces, cut inside a
multi-byte UTF-8 character). ``--models`` makes ``/v1/models`` lie
(``no-ids``, ``no-list``, ``bad-len``, ``html``); ``--slow-probe S`` answers ``/health`` and every
``/v1/models`` but the first S seconds late (a server busy under load, for the liveness probe);
``--model-id TEXT`` serves that model id (hostile text for the sinks' tests).

Run as a process (``python tests/faultserver.py --drop 50``): it prints ``port N`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys

from aiohttp import web

CHUNKS = {  # malformed chunk shapes (tests/test_faults.py MALFORMED has them all)
    "null": b"null",
    "list": b"[1,2]",
    "choice-str": b'{"choices": ["abc"]}',
    "content-int": b'{"choices": [{"delta": {"content": 5}}]}',
    "usage-int": b'{"usage": 7}',
    "usage-str": b'{"usage": {"prompt_tokens": "lots"}}',
    "usage-negative": b'{"usage": {"prompt_tokens": -3, "completion_tokens": 2}}',
}
MODELS = {
    "no-ids": {"data": [{"object": "model"}]},
    "no-list": {"data": "gpt"},
    "bad-len": {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": "lots"}]},
}
FAULTS = ("malformed", "error", "drop", "stall", "slow", "echo", "huge", "binary", "zero", "exit",
          "dup", "choices", "after-done", "inflate", "deflate", "cached", "crlf", "comments", "split")


def _delta(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


class FaultServer:
    """The handlers, with the fault schedule ``{fault: (every, offset)}`` and the options above."""

    def __init__(self, schedule: dict[str, tuple[int, int]], *, chunk: str = "null", status: int = 500, slow_s: float = 0.2,
                 models: str | None = None, slow_probe_s: float = 0.0, model_id: str = "fault-model") -> None:  # fmt: skip
        self.schedule, self.chunk, self.status, self.slow_s, self.models = schedule, CHUNKS[chunk], status, slow_s, models
        self.slow_probe_s, self.model_lists, self.model_id = slow_probe_s, 0, model_id
        self.counter = itertools.count(1)
        self.faulted: dict[str, int] = dict.fromkeys(FAULTS, 0)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def health(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.slow_probe_s)  # the fault itself: a busy server answers late
        return web.Response(text="ok")

    async def list_models(self, request: web.Request) -> web.Response:
        self.model_lists += 1
        if self.model_lists > 1:
            await asyncio.sleep(self.slow_probe_s)
        if self.models == "html":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        return web.json_response(MODELS.get(self.models) or {"data": [{"id": self.model_id, "owned_by": "vllm", "max_model_len": 4096}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") or "".join(m["content"] for m in body.get("messages", []))
        tokens = [ord(c) for c in text]
        return web.json_response({"tokens": tokens, "count": len(tokens)})

    async def detokenize(self, request: web.Request) -> web.Response:
        return web.json_response({"prompt": "".join(map(chr, (await request.json())["tokens"]))})

    def _fault(self, n: int) -> str | None:
        return next((f for f, (every, offset) in self.schedule.items() if n % every == offset), None)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = next(self.counter)
        fault = self._fault(n)
        if fault:
            self.faulted[fault] += 1
        prompt = sum(len(m["content"]) for m in body["messages"])
        max_tokens = int(body.get("max_tokens") or 16)
        if fault == "error":
            return web.json_response({"error": {"message": "injected failure", "code": self.status}}, status=self.status)
        if fault == "echo":
            return web.json_response({"error": {"message": f"bad header {request.headers.get('Authorization')}"}}, status=400)
        if fault == "huge":
            return web.Response(body=b"x" * (16 << 20), status=500)
        if fault == "slow":
            await asyncio.sleep(self.slow_s)  # the fault itself: headers late
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: object) -> None:
            event = b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"
            if fault == "crlf":
                event = event.replace(b"\n", b"\r\n")
            if fault == "comments":
                event = b": keep-alive\n\n" + event
            if fault == "split":
                cut = event.find("é".encode()) + 1  # inside the two-byte character
                await resp.write(event[:cut])
                event = event[cut:]
            await resp.write(event)

        tokens = 0 if fault == "zero" else max_tokens
        text = "é" if fault == "split" else "a"
        for i in range(tokens):
            chunk = _delta(text)
            if fault == "choices":
                chunk["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
            await send(chunk)
            if fault == "dup":
                await send(chunk)
            if i == tokens // 2:
                if fault == "malformed":
                    await resp.write(b"data: " + self.chunk + b"\n\n")
                elif fault == "binary":
                    await resp.write(b"data: \xff\xfe\x00\x81\n\n")
                elif fault == "exit":
                    os._exit(1)
                elif fault == "drop":
                    request.transport.close()
                    return resp
                elif fault == "stall":
                    await asyncio.Event().wait()  # the fault itself: never another byte (the client's timeout ends it)
        await send(_delta("", "length"))
        told = {"inflate": tokens * 10, "deflate": tokens // 2}.get(fault, tokens)
        usage = {"prompt_tokens": prompt, "completion_tokens": told, "total_tokens": prompt + told}
        if fault == "cached":
            usage["prompt_tokens_details"] = {"cached_tokens": prompt}
        await send({"choices": [], "usage": usage})
        await resp.write(b"data: [DONE]\n\n")
        if fault == "after-done":
            for _ in range(5):
                await send(_delta("a"))
        await resp.write_eof()
        return resp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    for fault in FAULTS:
        parser.add_argument(f"--{fault}", dest=fault.replace("-", "_"), metavar="EVERY[:OFFSET]", help=f"fault '{fault}' on every EVERY-th chat request")
    parser.add_argument("--chunk", choices=sorted(CHUNKS), default="null")
    parser.add_argument("--status", type=int, default=500)
    parser.add_argument("--slow-s", type=float, default=0.2)
    parser.add_argument("--models", choices=[*MODELS, "html"])
    parser.add_argument("--slow-probe", type=float, default=0.0)
    parser.add_argument("--model-id", default="fault-model")
    args = parser.parse_args()
    schedule = {}
    for fault in FAULTS:
        if (value := getattr(args, fault.replace("-", "_"))) is not None:
            every, _, offset = value.partition(":")
            schedule[fault] = (int(every), int(offset or 0))
    server = FaultServer(schedule, chunk=args.chunk, status=args.status, slow_s=args.slow_s, models=args.models, slow_probe_s=args.slow_probe, model_id=args.model_id)

    async def serve() -> None:
        runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
        await site.start()
        print(f"port {site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(serve())
    except ImportError:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
