"""What an API is to servelab: the path it is served at, the body of one streamed request, and how
one event of its stream is read (``servelab.load.apis``; ``--endpoint``).

An API reads a validated event into a :class:`Sink` (the client's stream parser): a token chunk
with its content and reasoning text, the finish reason, the usage counts, or an error. The SSE
framing, the timing and the record are the client's (``servelab.load.client``), the same for every API.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import TypeAdapter

from servelab.values.prompt import Prompt


class Sink(Protocol):
    """Where an API puts what one stream event says (``servelab.load.client.StreamParser``)."""

    def token(self, t: float, content: str | None, reasoning: str | None) -> None:
        """A token chunk that arrived at ``t`` (perf_counter s): its content and reasoning text."""

    def finish(self, reason: str) -> None:
        """The request finished (``stop``, ``length`` …)."""

    def usage(self, prompt: int | None, output: int | None, reasoning: int | None, cached: int | None) -> None:
        """The server's token counts (None: not reported)."""

    def failed(self, kind: str, detail: object) -> None:
        """The stream reported an error (``detail``: an OpenAI-style error object, ``{"error": {"message"…}}``
        or ``{"message"…}``, or text); nothing after it is read."""

    def extra_choice(self) -> None:
        """The event held a choice other than the first (``n`` > 1 was never asked for)."""


class Api:
    """One OpenAI-compatible API (module docstring). ``templated``: the server applies the model's
    chat template to the prompt (it is counted as a chat message); ``conversations``: a session's
    whole conversation can be sent; ``token_ids``: prompts are sent as token ids; ``events``: the
    adapter that validates one event (typed dicts: one pydantic pass, ~3 µs)."""

    name: str
    path: str  # under the API base (…/v1)
    templated: bool
    conversations: bool = False
    token_ids: bool = False
    events: TypeAdapter
    ends_with_done: bool = True  # the stream ends with ``data: [DONE]``

    def fields(self, model: str, prompt: Prompt | list[dict], max_tokens: int, chat_template_kwargs: dict | None) -> dict:
        """The API's own fields of a request body: the model, the prompt (or conversation) and the
        output limit, as this API spells them.

        Raises:
            ValueError: a conversation on an API that takes one prompt.
        """
        raise NotImplementedError

    def read(self, event: dict, sink: Sink, t: float) -> None:
        """Read one validated stream event (arrived at ``t``) into ``sink``."""
        raise NotImplementedError
