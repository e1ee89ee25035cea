"""``--endpoint chat``: ``POST /v1/chat/completions`` with ``messages`` (one user message, or a
session's whole conversation); the server applies the model's chat template (OpenAI API
reference, "Create chat completion"). ``chat_template_kwargs`` is passed through (vLLM, SGLang,
llama.cpp: e.g. ``{"enable_thinking": false}``)."""

from __future__ import annotations

from servelab.load.apis.choices import STREAM_FIELDS, ChoicesApi
from servelab.values.prompt import Prompt


class Chat(ChoicesApi):
    """The chat completions API (module docstring)."""

    name = "chat"
    path = "/chat/completions"
    templated = True
    conversations = True

    def fields(self, model: str, prompt: Prompt | list[dict], max_tokens: int, chat_template_kwargs: dict | None) -> dict:
        messages = [{"role": "user", "content": prompt.text}] if isinstance(prompt, Prompt) else prompt
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, **STREAM_FIELDS}
        return body | ({"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {})


API = Chat()
