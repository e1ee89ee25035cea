"""The per-request record: everything the client saw of one request.

Times (``queued`` … ``end``) are seconds on the client's monotonic clock (``time.perf_counter``)
relative to the run's origin; see ``docs/metrics.md`` for how each metric is derived from them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Phase = Literal["calibration", "warmup", "measured"]
# What a server's stream said that servelab did not believe (servelab.load.client, docs/failure-semantics.md):
# data after [DONE] (ignored), choices other than the first of index 0 (ignored), and a
# usage.completion_tokens above max_tokens, below the token chunks received or above the bytes received
# (the output then counted from the stream).
Anomaly = Literal["after_done", "extra_choices", "usage_above_max_tokens", "usage_below_chunks", "usage_above_text"]
Status = Literal["ok", "failed", "incomplete"]
CountSource = Literal["usage", "tokenizer", "chunks"]


class RequestRecord(BaseModel):
    """One request as the client saw it.

    Times (``queued`` … ``end``) are seconds since the run origin; ``chunk_times`` are seconds since
    ``start``, one per streamed chunk that carried content or reasoning text (a chunk may hold
    several tokens, e.g. under speculative decoding). Any time is ``None`` when that moment never
    came (an error before the first token, say).
    """

    index: int = Field(description="Position of the request in the run.")
    concurrency: int = Field(description="Concurrency level the request belongs to.")
    phase: Phase
    workload: str | None = Field(None, description="Named workload of a mix, when the run used one.")
    session: int | None = Field(None, description="Multi-turn session the request belongs to (sessions, agentic), numbered in its level.")
    turn: int | None = Field(None, description="The request's turn in its session, from 0; its prompt holds every earlier turn.")
    expected_prompt_tokens: int | None = Field(None, description="Prompt tokens servelab built, chat template included.")
    max_tokens: int
    queued: float = Field(description="When the scheduler handed the request to the client (s).")
    start: float | None = Field(None, description="When the request body was written to the connection (s).")
    first_byte: float | None = Field(None, description="When the response headers arrived (s).")
    first_token: float | None = Field(None, description="Arrival of the first chunk carrying content or reasoning (s).")
    first_content: float | None = Field(None, description="Arrival of the first chunk carrying content (s).")
    end: float | None = Field(None, description="End of the response stream (s).")
    chunk_times: list[float] = Field(default_factory=list, description="Token-bearing chunk arrivals, s since start.")
    prompt_tokens: int | None = None
    prompt_tokens_source: CountSource | None = None
    cached_prompt_tokens: int | None = Field(None, description="usage.prompt_tokens_details.cached_tokens, if sent.")
    output_tokens: int | None = Field(None, description="Generated tokens, reasoning included.")
    output_tokens_source: CountSource | None = None
    reasoning_tokens: int | None = None
    reasoning_tokens_source: CountSource | None = None
    anomalies: list[Anomaly] = Field(default_factory=list, description="What the server's stream said that was not believed (ignored, or counted from the stream instead).")
    finish_reason: str | None = None
    http_status: int | None = None
    status: Status = "ok"
    error_kind: str | None = None
    error: str | None = None
