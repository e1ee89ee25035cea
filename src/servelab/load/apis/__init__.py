"""The APIs a load can be sent through (``--endpoint``), one module each, registered in :data:`APIS`:
``chat`` (``/v1/chat/completions``), ``completions`` (``/v1/completions``, text), ``completions-ids``
(``/v1/completions``, token ids) and ``responses`` (``/v1/responses``). A new API is one module
with an :class:`~servelab.load.apis.base.Api` and its line here.
"""

from __future__ import annotations

from typing import Literal

from servelab.load.apis import chat, completions, responses, token_ids
from servelab.load.apis.base import Api

APIS: dict[str, Api] = {api.name: api for api in (chat.API, completions.API, token_ids.API, responses.API)}
ApiName = Literal["chat", "completions", "completions-ids", "responses"]  # the keys of APIS, as a type (tests/test_apis.py checks)


def get(name: str) -> Api:
    """The API of ``--endpoint`` ``name``.

    Raises:
        KeyError: no such API (the settings refuse it before).
    """
    return APIS[name]


def templated(name: str) -> bool:
    """Whether the server applied the model's chat template to prompts sent through API ``name`` (a
    stored run's ``load.endpoint``; a name servelab does not know counts as templated, as chat)."""
    api = APIS.get(name)
    return api is None or api.templated
