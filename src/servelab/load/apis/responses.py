"""``--endpoint responses``: ``POST /v1/responses`` (the OpenAI Responses API; vLLM 0.25,
llama.cpp's server) with ``input`` one user message's text or a session's whole conversation; the
server applies the model's chat template. A conversation's items are typed messages
(``{"type": "message", "role", "content"}``: llama.cpp's server refuses an assistant item without its type).

Its stream is typed events (OpenAI API reference, "Streaming events"): text in
``response.output_text.delta``, reasoning in ``response.reasoning_text.delta`` (vLLM) or
``response.reasoning_summary_text.delta``, and at the end ``response.completed`` (or
``response.incomplete``) whose ``response.usage`` holds ``input_tokens``, ``output_tokens`` and their
details. No ``data: [DONE]`` follows. An ``error`` or ``response.failed`` event fails the request.
``store: false``: the server keeps no copy of the response (a load must not grow its memory).
"""

from __future__ import annotations

from pydantic import NonNegativeInt, TypeAdapter
from typing_extensions import TypedDict

from servelab.load.apis.base import Api, Sink
from servelab.values.prompt import Prompt

TEXT = "response.output_text.delta"
REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
ENDED = ("response.completed", "response.incomplete")


class _InputDetails(TypedDict, total=False):
    cached_tokens: NonNegativeInt | None


class _OutputDetails(TypedDict, total=False):
    reasoning_tokens: NonNegativeInt | None


class _Usage(TypedDict, total=False):
    input_tokens: NonNegativeInt | None
    output_tokens: NonNegativeInt | None
    input_tokens_details: _InputDetails | None
    output_tokens_details: _OutputDetails | None


class _Incomplete(TypedDict, total=False):
    reason: str | None


class _Response(TypedDict, total=False):
    status: str | None
    usage: _Usage | None
    incomplete_details: _Incomplete | None
    error: object


class _Event(TypedDict, total=False):
    """One event as servelab reads it; other fields are ignored."""

    type: str
    delta: str | None
    response: _Response | None
    message: str | None  # an ``error`` event's
    error: object


class Responses(Api):
    """The Responses API (module docstring)."""

    name = "responses"
    path = "/responses"
    templated = True
    conversations = True
    events = TypeAdapter(_Event)
    ends_with_done = False

    def fields(self, model: str, prompt: Prompt | list[dict], max_tokens: int, chat_template_kwargs: dict | None) -> dict:
        given = prompt.text if isinstance(prompt, Prompt) else [{"type": "message", **message} for message in prompt]
        body = {"model": model, "input": given, "max_output_tokens": max_tokens, "stream": True, "store": False}
        return body | ({"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {})

    def read(self, event: dict, sink: Sink, t: float) -> None:
        kind = event.get("type")
        if kind == TEXT or kind in REASONING:
            delta = event.get("delta")
            if delta:
                sink.token(t, delta if kind == TEXT else None, delta if kind != TEXT else None)
        elif kind in ENDED:
            response = event.get("response") or {}
            usage = response.get("usage") or {}
            sink.usage(usage.get("input_tokens"), usage.get("output_tokens"), (usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
                       (usage.get("input_tokens_details") or {}).get("cached_tokens"))  # fmt: skip
            reason = (response.get("incomplete_details") or {}).get("reason")
            sink.finish("length" if reason == "max_output_tokens" else reason or "stop")
        elif kind in ("error", "response.failed") or "error" in event:
            sink.failed("stream_error", event.get("response") or event if kind == "response.failed" else event)


API = Responses()
