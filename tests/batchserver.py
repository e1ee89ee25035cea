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

It also stands in for ``vllm serve`` in a recipe (``servelab tune``'s tests put a ``vllm`` script
running it on PATH): ``serve MODEL --port P`` listens there and answers ``/health``;
``--max-num-seqs S`` runs at most S requests in a step, the others waiting in order (so a closed
loop above S queues, as vLLM's scheduler does); ``--prefill P`` adds P seconds per prompt token
to the step that admits a request (its first token comes at the end of it);
``--max-cudagraph-capture-size G`` makes a step of more than G tokens (decode and prompt) ``--eager``
seconds longer (no CUDA graph). Other vLLM flags are ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web


class BatchServer:
    """The engine: requests waiting for their next token, and the step loop that serves them."""

    def __init__(self, a: float, b: float, log: str | None = None, jit_request: int = 0, slots: int = 1 << 30, graphs: int = 1 << 30,
                 eager: float = 0.0, prefill: float = 0.0) -> None:  # fmt: skip
        self.a, self.b, self.log, self.jit_request = a, b, log, jit_request
        self.slots, self.graphs, self.eager, self.prefill = slots, graphs, eager, prefill
        self.batch: dict[int, asyncio.Queue] = {}
        self.waiting: dict[int, tuple[asyncio.Queue, int]] = {}  # in arrival order, with their prompt tokens
        self.wake = asyncio.Event()
        self.ids = 0

    async def steps(self) -> None:
        while True:
            prompts = 0
            while self.waiting and len(self.batch) < self.slots:  # admitted in order while a slot is free
                rid = next(iter(self.waiting))
                self.batch[rid], tokens = self.waiting.pop(rid)
                prompts += tokens
            if not self.batch:
                self.wake.clear()
                await self.wake.wait()
                continue
            n = len(self.batch)
            eager = self.eager if n + prompts > self.graphs else 0.0
            await asyncio.sleep(self.a + self.b * n + self.prefill * prompts + eager)  # the step's compute, growing with the batch and its prompts
            for q in list(self.batch.values()):
                q.put_nowait(1)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", lambda r: web.Response(text="ok"))
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
        self.waiting[rid] = (q, prompt)
        self.wake.set()
        try:
            for _ in range(max_tokens):
                await q.get()
                await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}).encode() + b"\n\n")
        finally:
            self.batch.pop(rid, None)
            self.waiting.pop(rid, None)
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
    parser.add_argument("--port", type=int, default=0, help="the port (default a free one, printed)")
    parser.add_argument("--max-num-seqs", type=int, default=1 << 30, help="requests in a step at most; the others wait")
    parser.add_argument("--max-cudagraph-capture-size", type=int, default=1 << 30, help="a larger step takes --eager s more")
    parser.add_argument("--eager", type=float, default=0.0, help="what a step above the capture size adds, s")
    parser.add_argument("--prefill", type=float, default=0.0, help="what each prompt token adds to the step that admits it, s")
    args, _ = parser.parse_known_args()  # `serve MODEL` and vLLM's other flags: ignored

    async def serve() -> None:
        server = BatchServer(args.a, args.b, args.log, args.jit_request, args.max_num_seqs, args.max_cudagraph_capture_size, args.eager, args.prefill)
        runner = web.AppRunner(server.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        print(f"port {site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
