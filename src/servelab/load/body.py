"""Request bodies: what servelab sends for one request through an API (``--endpoint``,
``servelab.load.apis``): the API's own fields (model, prompt or conversation, output limit,
streaming), greedy sampling (``temperature: 0``), and the engine's fields for an exact output
length and a cold prefix cache (``Engine.request_fields``, ``servelab.engines``).
"""

from __future__ import annotations

import orjson

from servelab import engines
from servelab.load import apis
from servelab.server.endpoint import Endpoint
from servelab.values.prompt import Prompt


def request_body(
    endpoint: Endpoint,
    prompt: Prompt | list[dict],
    *,
    max_tokens: int,
    ignore_eos: bool,
    cold: bool,
    api: apis.ApiName = "chat",
    chat_template_kwargs: dict | None = None,
) -> bytes:
    """The JSON body of one streaming request through ``api``: ``prompt`` a built prompt, or a
    session's whole conversation (``{"role", "content"}`` messages, servelab.workloads.sessions) on
    an API that takes one (chat, responses).

    Raises:
        ValueError: a conversation on an API that takes one prompt, or a token-id API given a prompt without ids.
    """
    fields = apis.get(api).fields(endpoint.info.model, prompt, max_tokens, chat_template_kwargs)
    extra = engines.get(endpoint.info.engine).request_fields(max_tokens=max_tokens, ignore_eos=ignore_eos, cold=cold)
    return orjson.dumps({**fields, "temperature": 0, **extra})
