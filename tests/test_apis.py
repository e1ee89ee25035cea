"""The APIs a load is sent through (``--endpoint``, ``servelab.load.apis``): the Responses API and
token-id prompts for completions against the embedded llama.cpp server (real Gemma 3 270M,
loopback), token-exact against the server's usage; their stream events read one by one; and a
parser that never raises on any event of any API."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import read_jsonl, run
from servelab.errors import ServelabError
from servelab.load import apis
from servelab.load.client import StreamParser
from servelab.run.bench import BenchOptions
from servelab.values.records import RequestRecord
from test_bench_local import Hooks, _bench

RESPONSES = apis.get("responses")


def _exact(result) -> None:
    check = result.prompt_check
    assert check.checked_requests > 0 and check.mismatched_requests == 0 and check.max_abs_deviation_tokens == 0, check


def _measured(path) -> list[dict]:
    return [r for r in read_jsonl(path / "records.jsonl") if r["phase"] == "measured"]


def test_the_api_names_are_the_registry():
    assert get_args(apis.ApiName) == tuple(apis.APIS)


@pytest.mark.server
def test_responses_api_is_token_exact_with_the_chat_template(llama, tmp_path):
    """/v1/responses applies the chat template (9 tokens on Gemma 3, as chat): every prompt matches
    the server's usage.input_tokens, and every output its max_output_tokens."""
    opts = BenchOptions(concurrency=[2], requests=4, warmup=1, input_tokens=96, output_tokens=8, api="responses")
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    _exact(result)
    assert result.load.endpoint == "responses" and result.prompt_check.template_overhead_tokens == 9
    measured = _measured(tmp_path / "run")
    assert len(measured) == 4 and all(r["status"] == "ok" and r["output_tokens"] == 8 == len(r["chunk_times"]) for r in measured)
    assert all(r["prompt_tokens_source"] == "usage" and r["finish_reason"] for r in measured)


@pytest.mark.server
def test_responses_api_carries_a_session_conversation(llama, tmp_path):
    """Sessions resend their conversation as typed message items; each turn is the server's own count."""
    opts = BenchOptions(concurrency=[2], requests=2, warmup=0, sessions=True, turns=3, input_tokens=48, turn_input_tokens=32, output_tokens=8, api="responses")
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    _exact(result)
    assert result.levels[0].sessions.ended == {"completed": 2}
    assert result.load.traffic == "responses sessions"


@pytest.mark.server
def test_token_id_prompts_are_exact_by_construction(llama, tmp_path):
    """/v1/completions with the prompt as token ids: the server adds no special token (overhead 0),
    so the ids servelab counted are the prompt it sees."""
    opts = BenchOptions(concurrency=[2], requests=4, warmup=1, input_tokens=96, output_tokens=8, api="completions-ids")
    result = run(_bench(llama.url, opts, tmp_path / "run", Hooks()))
    _exact(result)
    assert result.prompt_check.template_overhead_tokens == 0 and "completions-ids" in result.prompt_check.overhead_source
    measured = _measured(tmp_path / "run")
    assert len(measured) == 4 and all(r["status"] == "ok" and r["prompt_tokens"] == 96 and r["output_tokens"] == 8 for r in measured)


def test_a_conversation_on_a_one_prompt_api_is_refused():
    with pytest.raises(ServelabError, match="--endpoint chat or responses"):
        BenchOptions(concurrency=[1], sessions=True, turns=2, api="completions-ids")


def _events(*events: dict) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)


def _parse(body: bytes) -> StreamParser:
    parser = StreamParser(RequestRecord(index=0, concurrency=1, phase="measured", max_tokens=8, queued=0.0), 0.0, 0.0, RESPONSES)
    parser.feed(body, 1.0)
    return parser


def test_responses_events_are_read_as_tokens_reasoning_usage_and_finish():
    body = _events(
        {"type": "response.created", "response": {"status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "delta": "think"},
        {"type": "response.output_text.delta", "delta": "Hel"},
        {"type": "response.output_text.delta", "delta": "lo"},
        {"type": "response.output_text.done", "text": "Hello"},
        {"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                                                      "usage": {"input_tokens": 11, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 4},
                                                                "output_tokens_details": {"reasoning_tokens": 1}}}},
    )  # fmt: skip
    parser = _parse(body)
    rec = parser.record
    assert parser.error is None and parser.parts == ["Hel", "lo"] and parser.reasoning_parts == ["think"]
    assert len(rec.chunk_times) == 3 and rec.finish_reason == "length"
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_prompt_tokens, rec.reasoning_tokens) == (11, 3, 4, 1)


@pytest.mark.parametrize(
    ("event", "needle"),
    [
        ({"type": "error", "code": "server_error", "message": "the engine died"}, "the engine died"),
        ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "x", "message": "out of memory"}}}, "out of memory"),
    ],
)
def test_responses_error_events_fail_the_request(event, needle):
    parser = _parse(_events({"type": "response.output_text.delta", "delta": "a"}, event))
    assert parser.error is not None and parser.error[0] == "stream_error" and needle in parser.error[1]


def test_a_responses_stream_without_its_end_event_is_not_finished():
    parser = _parse(_events({"type": "response.output_text.delta", "delta": "a"}))
    assert not parser.done and parser.record.finish_reason is None  # the client fails it as truncated


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "delta", "response", "usage", "input_tokens", "output_tokens", "status", "incomplete_details", "reason", "error", "message",
         "response.output_text.delta", "response.completed", "response.failed", "error"]) | st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_values, min_size=1, max_size=4), kind=st.sampled_from(["response.output_text.delta", "response.completed", "error", "x"]))
def test_the_responses_parser_never_raises(values, kind):
    body = b"".join(b"data: " + json.dumps({"type": kind, **v} if isinstance(v, dict) else v).encode() + b"\n\n" for v in values)
    parser = _parse(body)
    assert parser.error is None or parser.error[0] in ("bad_chunk", "stream_error")
    for n in (parser.record.prompt_tokens, parser.record.output_tokens):
        assert n is None or (isinstance(n, int) and n >= 0)
