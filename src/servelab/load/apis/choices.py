"""Streams of ``choices`` (OpenAI API reference, "The chat completion chunk object", "The completion
object"): each ``data:`` event a chunk whose first choice carries a ``delta`` (chat) or ``text``
(completions), a ``finish_reason``, and a final chunk with ``usage`` (``stream_options.include_usage``),
ending with ``data: [DONE]``. The chat, completions and token-id completions APIs stream this way.

Reasoning text comes as ``reasoning_content`` (llama.cpp, SGLang, vLLM < 0.11.1) or ``reasoning``
(vLLM ≥ 0.11.1); a role-only first chunk (vLLM) carries neither and is no token chunk.
"""

from __future__ import annotations

from pydantic import NonNegativeInt, TypeAdapter
from typing_extensions import TypedDict

from servelab.load.apis.base import Api, Sink


class _Delta(TypedDict, total=False):
    content: str | None
    reasoning_content: str | None  # llama.cpp, SGLang, vLLM < 0.11.1
    reasoning: str | None  # vLLM ≥ 0.11.1


class _Choice(TypedDict, total=False):
    index: int | None
    delta: _Delta | None  # chat completions
    text: str | None  # completions (``text_completion`` chunks)
    finish_reason: str | None


class _CompletionDetails(TypedDict, total=False):
    reasoning_tokens: NonNegativeInt | None


class _PromptDetails(TypedDict, total=False):
    cached_tokens: NonNegativeInt | None


class _Usage(TypedDict, total=False):
    prompt_tokens: NonNegativeInt | None
    completion_tokens: NonNegativeInt | None
    completion_tokens_details: _CompletionDetails | None
    prompt_tokens_details: _PromptDetails | None


class _Chunk(TypedDict, total=False):
    """One chunk as servelab reads it; other fields are ignored. ``error``: an error event (any shape)."""

    choices: list[_Choice] | None
    usage: _Usage | None
    error: object


CHUNK = TypeAdapter(_Chunk)
STREAM_FIELDS = {"stream": True, "stream_options": {"include_usage": True}}


class ChoicesApi(Api):
    """An API that streams choices (module docstring)."""

    events = CHUNK

    def read(self, event: dict, sink: Sink, t: float) -> None:
        """Of a chunk's choices only the first of index 0 counts (others: ``extra_choices``)."""
        if "error" in event:
            sink.failed("stream_error", event)
            return
        choices = event.get("choices") or ()
        choice = next((c for c in choices if not c.get("index")), None)
        if len(choices) > (choice is not None):
            sink.extra_choice()
        if choice is not None:
            delta = choice.get("delta") or {}
            content = delta.get("content") or choice.get("text")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if content or reasoning:
                sink.token(t, content, reasoning)
            if choice.get("finish_reason"):
                sink.finish(choice["finish_reason"])
        usage = event.get("usage")
        if usage:
            sink.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), (usage.get("completion_tokens_details") or {}).get("reasoning_tokens"),
                       (usage.get("prompt_tokens_details") or {}).get("cached_tokens"))  # fmt: skip
