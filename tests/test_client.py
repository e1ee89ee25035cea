"""The streaming client against each engine's stream shapes (canned servers) — pure protocol logic."""

from __future__ import annotations

import asyncio
import time

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from canned import canned_server, delta, sse, streaming, usage
from servelab.server.endpoint import Endpoint
from servelab.load.body import request_body
from servelab.values.prompt import Prompt
from servelab.load.client import StreamClient, TimedResponseHandler
from servelab.values.records import RequestRecord
from servelab.store.results import EndpointInfo
from servelab.server.tokenizer import LocalTokenizer


def endpoint(url: str, engine: str = "vllm") -> Endpoint:
    return Endpoint(root=url, info=EndpointInfo(url=url, engine=engine, model="m"))


async def send_one(handler, *, engine="vllm", tokenizer=None) -> tuple[RequestRecord, StreamClient]:
    async with canned_server({("POST", "/v1/chat/completions"): handler}) as url:
        ep = endpoint(url, engine)
        async with StreamClient(ep, origin=time.perf_counter(), connections=1, request_timeout_s=5, tokenizer=tokenizer) as client:
            rec = RequestRecord(index=0, concurrency=1, phase="measured", max_tokens=8, queued=0.0, expected_prompt_tokens=7)
            await client.send(rec, request_body(ep, Prompt("hi", 1), max_tokens=8, ignore_eos=True, cold=True))
            protocols = [p for conns in client._session.connector._conns.values() for p, _ in conns]
            return rec, protocols


def test_vllm_role_chunk_is_not_a_token_and_reasoning_is():
    parts = sse(
        delta("", role="assistant"),  # vLLM's first chunk: role only, empty content
        delta(reasoning="think"),  # vLLM >= 0.11.1 puts reasoning in `reasoning`
        delta(reasoning=" more"),
        delta("Hello"),
        delta(" world", finish="stop"),
        usage(12, 6, reasoning=2, cached=0),
    )
    rec, protocols = asyncio.run(send_one(streaming(parts)))
    assert rec.status == "ok" and rec.finish_reason == "stop"
    assert len(rec.chunk_times) == 4  # two reasoning + two content chunks; the role chunk is not one
    assert rec.first_token < rec.first_content  # TTFT counts reasoning, TTFC does not
    assert (rec.output_tokens, rec.output_tokens_source) == (6, "usage")
    assert (rec.prompt_tokens, rec.prompt_tokens_source) == (12, "usage")
    assert (rec.reasoning_tokens, rec.reasoning_tokens_source) == (2, "usage")
    assert rec.cached_prompt_tokens == 0
    assert 0 < rec.start <= rec.first_byte <= rec.first_token <= rec.end
    # The timed protocol really is the one aiohttp used (kept alive in the pool afterwards).
    assert protocols and all(isinstance(p, TimedResponseHandler) for p in protocols)


def test_reasoning_content_field_sglang_llamacpp_and_old_vllm():
    parts = sse(delta(reasoning="a", reasoning_field="reasoning_content"), delta("b", finish="length"), usage(3, 2))
    rec, _ = asyncio.run(send_one(streaming(parts), engine="sglang"))
    assert rec.status == "ok" and len(rec.chunk_times) == 2 and rec.reasoning_tokens_source == "chunks"
    assert rec.first_token <= rec.first_content


def test_events_split_byte_by_byte_and_crlf_framing():
    parts = [p.replace(b"\n\n", b"\r\n\r\n") for p in sse(delta("a"), delta("b"), delta("c", finish="length"), usage(3, 3))]
    rec, _ = asyncio.run(send_one(streaming(parts, split=True)))
    assert rec.status == "ok" and len(rec.chunk_times) == 3 and rec.output_tokens == 3


def test_several_tokens_per_chunk_counted_from_usage():
    parts = sse(delta("ab"), delta("cd", finish="length"), usage(3, 5))
    rec, _ = asyncio.run(send_one(streaming(parts)))
    assert len(rec.chunk_times) == 2 and rec.output_tokens == 5 and rec.output_tokens_source == "usage"


def test_no_usage_falls_back_to_tokenizer_then_chunks(tmp_path):
    vocab = {"[UNK]": 0, "one": 1, "two": 2, "three": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    parts = sse(delta("one two"), delta(" three", finish="length"))
    rec, _ = asyncio.run(send_one(streaming(parts), tokenizer=LocalTokenizer(tmp_path)))
    assert (rec.output_tokens, rec.output_tokens_source) == (3, "tokenizer")
    assert (rec.prompt_tokens, rec.prompt_tokens_source) == (7, "tokenizer")  # what servelab built
    rec, _ = asyncio.run(send_one(streaming(parts)))
    assert (rec.output_tokens, rec.output_tokens_source) == (2, "chunks")


def test_http_400_is_a_failure_with_the_servers_message():
    body = {"error": {"message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError", "code": 400}}
    async def handler(request):
        return await _json(request, body, 400)

    rec, _ = asyncio.run(send_one(handler))
    assert rec.status == "failed" and rec.error_kind == "http_400" and rec.http_status == 400
    assert "maximum context length is 4096" in rec.error


async def _json(request, body, status):
    from aiohttp import web

    await request.read()
    return web.json_response(body, status=status)


def test_error_event_in_stream_fails():
    parts = sse(delta("a"), {"error": {"message": "engine died", "code": 500}})
    rec, _ = asyncio.run(send_one(streaming(parts)))
    assert rec.status == "failed" and rec.error_kind == "stream_error" and "engine died" in rec.error


def test_stream_cut_without_finish_is_truncated_or_disconnected():
    rec, _ = asyncio.run(send_one(streaming(sse(delta("a"), done=False))))
    assert rec.status == "failed" and rec.error_kind == "truncated"
    rec, _ = asyncio.run(send_one(streaming([b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], abort=True)))
    assert rec.status == "failed" and rec.error_kind in ("disconnected", "truncated")


def test_garbage_chunk_is_bad_chunk():
    rec, _ = asyncio.run(send_one(streaming([b"data: {not json\n\n", b"data: [DONE]\n\n"])))
    assert rec.status == "failed" and rec.error_kind == "bad_chunk"


def test_request_timeout():
    async def slow(request):
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(delta("a"), done=False)[0])
        await asyncio.sleep(30)
        return resp

    async def go():
        async with canned_server({("POST", "/v1/chat/completions"): slow}) as url:
            ep = endpoint(url)
            async with StreamClient(ep, origin=time.perf_counter(), connections=1, request_timeout_s=1) as client:
                rec = RequestRecord(index=0, concurrency=1, phase="measured", max_tokens=8, queued=0.0)
                t0 = time.monotonic()
                await client.send(rec, request_body(ep, Prompt("hi", 1), max_tokens=8, ignore_eos=False, cold=True))
                return rec, time.monotonic() - t0

    rec, took = asyncio.run(go())
    assert rec.status == "failed" and rec.error_kind == "timeout" and took < 3
    assert len(rec.chunk_times) == 1


@pytest.mark.parametrize(
    ("engine", "present", "absent"),
    [
        ("vllm", {"ignore_eos": True, "min_tokens": 8}, ["cache_prompt"]),
        ("sglang", {"ignore_eos": True, "min_tokens": 8}, ["cache_prompt"]),
        ("llama.cpp", {"ignore_eos": True, "cache_prompt": False}, ["min_tokens"]),
        ("generic", {}, ["ignore_eos", "min_tokens", "cache_prompt"]),
    ],
)
def test_request_body_per_engine(engine, present, absent):
    import orjson

    ep = endpoint("http://x", engine)
    body = orjson.loads(
        request_body(ep, Prompt("hi", 1), max_tokens=8, ignore_eos=engine != "generic", cold=True, chat_template_kwargs={"enable_thinking": False})
    )
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and body["temperature"] == 0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    for key, value in present.items():
        assert body[key] == value
    for key in absent:
        assert key not in body
