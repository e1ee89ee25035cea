"""How a request's record ends: failed, cut off (``incomplete``), or counted — shared by the
streaming client and its worker processes (``servelab.load.client``, ``servelab.load.workers``)."""

from __future__ import annotations

from typing import NamedTuple

from servelab.values.records import RequestRecord
from servelab.guards.untrusted import outside
from servelab.server.tokenizer import Tokenizer

ERROR_TEXT_LIMIT = 500
TEXT_TOKENS_PER_BYTE = 2  # usage above this many tokens per UTF-8 byte received (+ TEXT_TOKEN_MARGIN) is not believed
TEXT_TOKEN_MARGIN = 16  # special tokens that decode to no text (EOS, think tags) and partial characters


class Texts(NamedTuple):
    """What a successful stream said, for token counting when the server sent no usage."""

    content: str
    reasoning: str
    reasoning_chunks: int



def disbelieve_usage(record: RequestRecord, texts: Texts) -> None:
    """Check the server's ``usage.completion_tokens`` against the stream itself; where they
    disagree, mark the record (``anomalies``) and drop the server's count, so that the output is
    counted from what was received. Not believed: more tokens than ``max_tokens``; fewer than the
    token chunks received (each carries at least one); more than ``TEXT_TOKENS_PER_BYTE`` per
    UTF-8 byte of the text received plus ``TEXT_TOKEN_MARGIN`` (a token decodes to at least one
    byte but for special tokens: an inflated count, docs/failure-semantics.md). Cached prompt tokens
    above the prompt tokens (a hit rate above 100 %) are not believed either."""
    prompt = record.prompt_tokens if record.prompt_tokens is not None else record.expected_prompt_tokens
    if record.cached_prompt_tokens is not None and prompt is not None and record.cached_prompt_tokens > prompt:
        record.anomalies.append("cached_above_prompt")
        record.cached_prompt_tokens = None
    n = record.output_tokens
    if n is None or record.output_tokens_source != "usage":
        return
    received = len((texts.reasoning + texts.content).encode())
    found = [kind for kind, wrong in (
        ("usage_above_max_tokens", n > record.max_tokens),
        ("usage_below_chunks", n < len(record.chunk_times)),
        ("usage_above_text", n > TEXT_TOKENS_PER_BYTE * received + TEXT_TOKEN_MARGIN),
    ) if wrong]  # fmt: skip
    if found:
        record.anomalies.extend(found)
        record.output_tokens = record.output_tokens_source = None


async def count_tokens(record: RequestRecord, texts: Texts, tokenizer: Tokenizer | None) -> None:
    """Fill the counts the server did not send, or sent wrong (:func:`disbelieve_usage`):
    ``tokenizer`` on the streamed text, else one token per chunk; the prompt from the built length."""
    disbelieve_usage(record, texts)
    content, reasoning, reasoning_chunks = texts.content, texts.reasoning, texts.reasoning_chunks
    if record.prompt_tokens is None and record.expected_prompt_tokens is not None:
        record.prompt_tokens, record.prompt_tokens_source = record.expected_prompt_tokens, "tokenizer"
    if record.reasoning_tokens is None and reasoning:
        if tokenizer is not None:
            record.reasoning_tokens = len(await tokenizer.encode(reasoning))
            record.reasoning_tokens_source = "tokenizer"
        else:
            record.reasoning_tokens, record.reasoning_tokens_source = reasoning_chunks, "chunks"
    if record.output_tokens is None:
        if tokenizer is not None:
            record.output_tokens = len(await tokenizer.encode(reasoning + content))
            record.output_tokens_source = "tokenizer"
        else:
            record.output_tokens, record.output_tokens_source = len(record.chunk_times), "chunks"


def mark_incomplete(record: RequestRecord, end: float) -> None:
    """Mark ``record`` cut off at ``end`` (run seconds): ``incomplete``, its tokens those streamed so far."""
    record.end = end
    record.status, record.error_kind = "incomplete", "cancelled"
    record.output_tokens, record.output_tokens_source = len(record.chunk_times), "chunks"


def fail(record: RequestRecord, kind: str, message: str) -> None:
    """Mark ``record`` failed with ``kind`` and ``message`` (``servelab.guards.untrusted.outside``: secrets masked, control characters removed, shortened)."""
    record.status = "failed"
    record.error_kind = kind
    record.error = outside(message, ERROR_TEXT_LIMIT)
