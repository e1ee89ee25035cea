"""``--endpoint completions-ids``: ``POST /v1/completions`` with the prompt as a list of token ids
(OpenAI API reference, "Create completion": ``prompt`` may be an array of tokens; vLLM and
llama.cpp take it as given, adding no special token). The server then sees exactly the ids
servelab counted, so every prompt is token-exact by construction; the run's prompt check compares
them with the server's ``usage.prompt_tokens`` as for any prompt (docs/metrics.md)."""

from __future__ import annotations

from servelab.load.apis.completions import Completions
from servelab.values.prompt import Prompt


class CompletionIds(Completions):
    """The completions API with token-id prompts (module docstring)."""

    name = "completions-ids"
    token_ids = True

    def payload(self, prompt: Prompt) -> str | list[int]:
        """What goes in ``prompt``: the token ids the prompt was counted with.

        Raises:
            ValueError: a prompt built without its ids (``PromptBuilder(ids=True)`` builds them).
        """
        if prompt.ids is None:
            raise ValueError("a token-id prompt needs its ids: build it with PromptBuilder(ids=True)")
        return list(prompt.ids)


API = CompletionIds()
