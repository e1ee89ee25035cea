"""A prompt as sent: its text, its exact token count as the server sees it, and its token ids when
it is sent as ids (built by ``servelab.workloads.corpus.PromptBuilder``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    """A user message and its exact token count as the server will see it (chat template included);
    with ``ids``, the token ids it is sent as (``--endpoint completions-ids``)."""

    text: str
    tokens: int
    ids: tuple[int, ...] | None = None
