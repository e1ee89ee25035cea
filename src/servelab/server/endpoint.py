"""Endpoint discovery: what an OpenAI-compatible server offers, asked of the server itself.

For a base URL this finds the served model (``/v1/models``), the engine kind and version, the
context length per request, a tokenize endpoint and the metrics URL. The engine is the registered
one (``servelab.engines``) whose ``owned_by`` names the model card's owner, else the first whose
``recognise`` says so, else ``generic``; that engine then says how to read its version and context
(``describe``) and how to call ``/tokenize`` (``tokenize_body``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, Field

from servelab import engines
from servelab.engines.base import Engine
from servelab.errors import ServelabError
from servelab.guards.redaction import mask_url, remember

DISCOVERY_TIMEOUT_S = 4.0


class EndpointInfo(BaseModel):
    """What was measured. Never holds an API key."""

    url: str = Field(description="Server root URL (no /v1).")
    engine: str = Field(description="vllm, sglang, llama.cpp or generic.")
    engine_version: str | None = None
    model: str
    max_model_len: int | None = Field(None, description="Context length per request, tokens.")
    tokenizer: str | None = Field(None, description="Where token counts came from: server /tokenize or a local path.")
    metrics_url: str | None = None
    embedded: bool = Field(False, description="True when servelab started the server itself.")


def split_url(url: str) -> str:
    """The server root for a user-given URL: trailing ``/`` and ``/v1`` removed.

    Raises:
        ServelabError: the URL is not http(s).
    """
    root = url.strip().rstrip("/")
    if not root.startswith(("http://", "https://")):
        raise ServelabError(f"--url {url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


@dataclass
class Endpoint:
    """A discovered server. ``api_key`` stays in memory only: it is not part of ``info``."""

    root: str
    info: EndpointInfo
    api_key: str | None = field(default=None, repr=False)
    tokenize_path: str | None = None
    hidden_size: int | None = None  # the served model's, where the server says (Engine.hidden_size)

    @property
    def api_base(self) -> str:
        """The OpenAI API base, ``<root>/v1``."""
        return self.root + "/v1"

    def headers(self) -> dict[str, str]:
        """Request headers, with the bearer token when an API key was given."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> object | None:
    """GET ``url`` and return its JSON body, or None on any non-200 answer or non-JSON body."""
    try:
        async with session.get(url, headers=headers) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


async def _identify(card: dict, get) -> Engine:
    """The engine serving ``card`` (see the module docstring)."""
    owner = str(card.get("owned_by", "")).lower()
    for engine in engines.all_engines():
        if owner in engine.owned_by:
            return engine
    for engine in engines.all_engines():
        if await engine.recognise(get):
            return engine
    return engines.get(engines.GENERIC)


async def _probe_tokenize(session: aiohttp.ClientSession, root: str, engine: Engine, headers: dict[str, str]) -> str | None:
    """Return ``/tokenize`` if the server tokenizes a probe text there, else None."""
    try:
        async with session.post(root + "/tokenize", json=engine.tokenize_body("hello"), headers=headers) as resp:
            if resp.status == 200 and isinstance((await resp.json(content_type=None)).get("tokens"), list):
                return "/tokenize"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
        pass
    return None


async def _probe_metrics(session: aiohttp.ClientSession, root: str, headers: dict[str, str]) -> str | None:
    """Return the metrics URL if ``/metrics`` answers with Prometheus text, else None."""
    try:
        async with session.get(root + "/metrics", headers=headers) as resp:
            if resp.status == 200 and "# TYPE" in await resp.text():
                return root + "/metrics"
    except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
        pass
    return None


async def discover(url: str, model: str | None = None, api_key: str | None = None, *, embedded: bool = False) -> Endpoint:
    """Ask the server at ``url`` what it offers.

    Args:
        url: server root or API base (``http://host:8000`` or ``http://host:8000/v1``).
        model: served model to use; default the first one ``/v1/models`` lists.
        api_key: bearer token, kept in memory only.
        embedded: True when servelab started this server.

    Returns:
        An :class:`Endpoint`.

    Raises:
        ServelabError: the server cannot be reached within ``DISCOVERY_TIMEOUT_S`` per call, refuses
            the key, has no ``/v1/models``, or does not serve ``model``.
    """
    root = split_url(url)
    remember(api_key)
    if api_key and urlsplit(root).username is not None:
        raise ServelabError(f"--url {mask_url(root)} has credentials and an API key is set too; give one of them (HTTP allows one Authorization header)")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            async with session.get(root + "/v1/models", headers=headers) as resp:
                status = resp.status
                models = await resp.json(content_type=None) if status == 200 else None
        except asyncio.TimeoutError:
            raise ServelabError(
                f"no answer from {root} within {DISCOVERY_TIMEOUT_S:.0f} s; check --url and that the server is up"
            ) from None
        except aiohttp.ClientError as exc:
            raise ServelabError(f"cannot reach {root}: {exc}; check --url and that the server is running") from None
        except ValueError:
            raise ServelabError(f"{root}/v1/models did not return JSON; is this an OpenAI-compatible server?") from None
        if status in (401, 403):
            raise ServelabError(
                f"{root} refused the request (HTTP {status}); put the API key in SERVELAB_API_KEY or name its variable with --api-key-env"
            )
        if status == 503:
            raise ServelabError(f"{root} is still loading (HTTP 503); wait until it is ready and try again")
        if not isinstance(models, dict) or not isinstance(models.get("data"), list) or not models["data"]:
            raise ServelabError(f"{root}/v1/models answered HTTP {status} with no model list; is this an OpenAI-compatible server?")
        cards = {card["id"]: card for card in models["data"] if isinstance(card, dict) and isinstance(card.get("id"), str) and card["id"]}
        if not cards:
            raise ServelabError(f"{root}/v1/models lists no model with an id; is this an OpenAI-compatible server?")
        if model is None:
            model = next(iter(cards))
        elif model not in cards:
            raise ServelabError(f"--model {model!r} is not served at {root}; it serves: {', '.join(map(str, cards))}")
        card = cards[model]

        async def get(path: str) -> object | None:
            return await _get_json(session, root + path, headers)

        engine = await _identify(card, get)
        version, max_model_len = await engine.describe(get, card)
        tokenize_path = await _probe_tokenize(session, root, engine, headers)
        metrics_url = await _probe_metrics(session, root, headers)
    info = EndpointInfo(
        url=mask_url(root),
        engine=engine.name,
        engine_version=str(version) if version else None,
        model=str(model),
        max_model_len=max_model_len,
        tokenizer=f"server {tokenize_path}" if tokenize_path else None,
        metrics_url=metrics_url,
        embedded=embedded,
    )
    return Endpoint(root=root, info=info, api_key=api_key, tokenize_path=tokenize_path, hidden_size=engine.hidden_size(card))
