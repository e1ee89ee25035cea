"""How a request's record ends: failed, cut off (``incomplete``), or counted — shared by the
streaming client and its worker processes (``servelab.load.client``, ``servelab.load.workers``)."""

from __future__ import annotations

from typing import NamedTuple

from servelab.records import RequestRecord
from servelab.redaction import scrub
from servelab.tokenizer import Tokenizer

ERROR_TEXT_LIMIT = 500


class Texts(NamedTuple):
    """What a successful stream said, for token counting when the server sent no usage."""

    content: str
    reasoning: str
    reasoning_chunks: int



async def count_tokens(record: RequestRecord, texts: Texts, tokenizer: Tokenizer | None) -> None:
    """Fill the counts the server did not send: ``tokenizer`` on the streamed text, else one token
    per chunk; the prompt from the built length."""
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
    """Mark ``record`` failed with ``kind`` and ``message`` (secrets scrubbed, shortened)."""
    record.status = "failed"
    record.error_kind = kind
    record.error = scrub(message)[:ERROR_TEXT_LIMIT]
