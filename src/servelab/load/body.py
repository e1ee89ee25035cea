"""Request bodies: what servelab sends for one request, per API (``--endpoint``).

- ``chat``: ``POST /v1/chat/completions`` with ``messages`` (one user message, or a session's
  whole conversation), the model's chat template applied by the server;
- ``completions``: ``POST /v1/completions`` with the raw ``prompt`` text, no chat template.

Both stream (``stream: true``) with ``stream_options.include_usage`` (OpenAI API reference,
"Create chat completion", "Create completion"); the engine adds its own fields.
"""

from __future__ import annotations

from typing import Literal

import orjson

from servelab import engines
from servelab.server.endpoint import Endpoint

API_PATHS: dict[str, str] = {"chat": "/chat/completions", "completions": "/completions"}  # ``--endpoint`` → path under /v1
Api = Literal["chat", "completions"]


def request_body(
    endpoint: Endpoint,
    prompt: str | list[dict],
    *,
    max_tokens: int,
    ignore_eos: bool,
    cold: bool,
    api: Api = "chat",
    chat_template_kwargs: dict | None = None,
) -> bytes:
    """The JSON body of one streaming request, with the engine's extra fields.

    - ``api`` ``"chat"`` (``/v1/chat/completions``): ``prompt`` is one user message's text, or the
      whole conversation (a list of ``{"role", "content"}`` messages, servelab.workloads.sessions);
      ``chat_template_kwargs`` passed through (e.g. ``{"enable_thinking": false}``);
    - ``api`` ``"completions"`` (``/v1/completions``): ``prompt`` is the raw text, sent with no chat
      template (a conversation is refused: ValueError);
    - every request: greedy (``temperature: 0``), ``stream_options.include_usage`` so the server
      reports exact token counts in a final chunk; exact output length (``ignore_eos``) and a cold
      prefix cache as the engine spells them (``Engine.request_fields``, ``servelab.engines``).
    """
    if api == "completions":
        if not isinstance(prompt, str):
            raise ValueError("the completions API takes one prompt text, not a conversation")
        body: dict = {"model": endpoint.info.model, "prompt": prompt}
    else:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        body = {"model": endpoint.info.model, "messages": messages}
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
    body |= {
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **engines.get(endpoint.info.engine).request_fields(max_tokens=max_tokens, ignore_eos=ignore_eos, cold=cold),
    }
    return orjson.dumps(body)
