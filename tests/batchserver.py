"""A fake continuous-batching server with a known capacity (aiohttp, loopback).

One scheduler loop runs engine steps: a step takes ``a + b·n`` seconds for ``n`` requests in the
batch, and gives each of them one token. So a request's TPOT is the step time at the batch it ran
in, and for an SLO ``tpot_pPCT ≤ T`` a closed loop of ``c`` streams passes while ``a + b·c ≤ T``:
the true capacity is ``⌊(T − a) / b⌋`` streams. It serves what servelab bench needs
(``/v1/models`` as vLLM, ``/tokenize`` and ``/detokenize`` at one token per character, streamed
``/v1/chat/completions`` with usage). Run as a process (``python tests/batchserver.py --a 0.002
--b 0.001``): it prints ``port N`` once listening. With ``--log FILE --jit-request N`` it appends
vLLM's jit_monitor warning to FILE when its N-th request arrives, as vLLM does when a MoE kernel
compiles for a new batch shape while serving.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web


class BatchServer:
    """The engine: requests waiting for their next token, and the step loop that serves them."""

    def __init__(self, a: float, b: float, log: str | None = None, jit_request: int = 0) -> None:
        self.a, self.b, self.log, self.jit_request = a, b, log, jit_request
        self.batch: dict[int, asyncio.Queue] = {}
        self.wake = asyncio.Event()
        self.ids = 0

    async def steps(self) -> None:
        while True:
            if not self.batch:
                self.wake.clear()
                await self.wake.wait()
            await asyncio.sleep(self.a + self.b * len(self.batch))  # the step's compute, growing with the batch
            for q in list(self.batch.values()):
                q.put_nowait(1)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": "batch-model", "owned_by": "vllm", "max_model_len": 100000}]}))
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/chat/completions", self.chat)

        async def start(app: web.Application) -> None:
            app["steps"] = asyncio.create_task(self.steps())

        app.on_startup.append(start)
        return app

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") or "".join(m["content"] for m in body.get("messages", []))
        return web.json_response({"tokens": [ord(c) for c in text], "count": len(text)})

    async def detokenize(self, request: web.Request) -> web.Response:
        return web.json_response({"prompt": "".join(map(chr, (await request.json())["tokens"]))})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        max_tokens = int(body.get("max_tokens") or 16)
        prompt = sum(len(m["content"]) for m in body["messages"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.ids += 1
        if self.log and self.ids == self.jit_request:  # a kernel compiles while serving
            with open(self.log, "a", encoding="utf-8") as f:
                f.write("(EngineCore pid=1) WARNING 11-25 10:00:00 [jit_monitor.py:98] Triton kernel JIT compilation during inference: "
                        "fused_moe_kernel. This causes a latency spike\n")
        rid, q = self.ids, asyncio.Queue()
        self.batch[rid] = q
        self.wake.set()
        try:
            for _ in range(max_tokens):
                await q.get()
                await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}).encode() + b"\n\n")
        finally:
            self.batch.pop(rid, None)
        usage = {"prompt_tokens": prompt, "completion_tokens": max_tokens, "total_tokens": prompt + max_tokens}
        await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).encode() + b"\n\n")
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=float, default=0.002, help="step time with an empty batch, s")
    parser.add_argument("--b", type=float, default=0.001, help="step time added per request in the batch, s")
    parser.add_argument("--log", help="the server log it appends to")
    parser.add_argument("--jit-request", type=int, default=0, help="log a JIT compile when this request (1-based) arrives")
    args = parser.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(BatchServer(args.a, args.b, args.log, args.jit_request).app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"port {site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
