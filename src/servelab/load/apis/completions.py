"""``--endpoint completions``: ``POST /v1/completions`` with the raw ``prompt`` text, no chat
template (OpenAI API reference, "Create completion"); the server adds only its special tokens
(a BOS), which the calibration request measures."""

from __future__ import annotations

from servelab.load.apis.choices import STREAM_FIELDS, ChoicesApi
from servelab.values.prompt import Prompt


class Completions(ChoicesApi):
    """The completions API with text prompts (module docstring)."""

    name = "completions"
    path = "/completions"
    templated = False

    def fields(self, model: str, prompt: Prompt | list[dict], max_tokens: int, chat_template_kwargs: dict | None) -> dict:
        if not isinstance(prompt, Prompt):
            raise ValueError("the completions API takes one prompt, not a conversation")
        return {"model": model, "prompt": self.payload(prompt), "max_tokens": max_tokens, **STREAM_FIELDS}

    def payload(self, prompt: Prompt) -> str | list[int]:
        """What goes in ``prompt``: the text."""
        return prompt.text


API = Completions()
