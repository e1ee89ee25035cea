"""Token counting: the server's own tokenizer (``/tokenize``) or a local Hugging Face tokenizer.

Both give plain-text token ids without special tokens; the chat template's extra tokens are
measured separately (see ``workloads/corpus.py``).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from pydantic import BaseModel, NonNegativeInt, ValidationError
from tokenizers import Tokenizer as HFTokenizer

from servelab import engines
from servelab.server.endpoint import Endpoint
from servelab.errors import ServelabError


class ServerTokenizer:
    """Tokenizes with the server's ``/tokenize`` and ``/detokenize``; the request shapes are the
    engine's (``tokenize_body``, ``chat_count``: ``servelab.engines``)."""

    def __init__(self, endpoint: Endpoint, session: aiohttp.ClientSession) -> None:
        self.endpoint = endpoint
        self.session = session
        self.name = f"server {endpoint.tokenize_path}"
        self.engine = engines.get(endpoint.info.engine)

    async def _post(self, path: str, body: dict) -> dict:
        url = self.endpoint.root + path
        try:
            async with self.session.post(url, json=body, headers=self.endpoint.headers()) as resp:
                if resp.status != 200:
                    raise ServelabError(f"{url} answered HTTP {resp.status}: {(await resp.text())[:200]}")
                return await resp.json(content_type=None)
        except ValueError:  # not JSON
            raise self._unreadable(path, "not JSON") from None
        except aiohttp.ClientError as exc:
            raise ServelabError(f"tokenizing at {url} failed: {exc}") from None

    def _unreadable(self, path: str, detail: object) -> ServelabError:
        return ServelabError(f"{self.endpoint.root}{path} answered something that is not a tokenizer answer ({detail}); pass --tokenizer PATH")

    async def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added.

        Raises:
            ServelabError: the server failed or answered another shape (``_Tokens``).
        """
        try:
            tokens = _Tokens.model_validate(await self._post("/tokenize", self.engine.tokenize_body(text))).tokens
        except ValidationError as exc:
            raise self._unreadable("/tokenize", exc.errors()[0]["msg"]) from None
        return [t.id if isinstance(t, _Piece) else t for t in tokens]

    async def decode(self, ids: list[int]) -> str:
        """Text of token ids.

        Raises:
            ServelabError: the server failed or answered another shape (``_Text``).
        """
        try:
            out = _Text.model_validate(await self._post("/detokenize", {"tokens": ids}))
        except ValidationError as exc:
            raise self._unreadable("/detokenize", exc.errors()[0]["msg"]) from None
        return next((t for t in (out.content, out.prompt, out.text) if t is not None), "")

    async def chat_count(self, text: str, chat_template_kwargs: dict | None = None) -> int | None:
        """Tokens of ``text`` sent as one user message, chat template included (:meth:`count_messages`)."""
        return await self.count_messages([{"role": "user", "content": text}], chat_template_kwargs)

    async def count_messages(self, messages: list[dict], chat_template_kwargs: dict | None = None) -> int | None:
        """Prompt tokens of a conversation (``{"role", "content"}`` messages), chat template
        included, as the server counts them (the engine's ``chat_count``); None for engines without
        such an endpoint.

        Raises:
            ServelabError: the server failed or answered a shape the engine does not read.
        """
        extra = {"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {}
        try:
            count = await self.engine.chat_count(self._post, self.endpoint.info.model, messages, extra)
        except (KeyError, TypeError, AttributeError) as exc:
            raise self._unreadable("", f"chat-template count: {type(exc).__name__} {exc}") from None
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
            raise self._unreadable("", f"chat-template count {count!r}")
        return count


class _Piece(BaseModel):
    id: int


class _Tokens(BaseModel):
    """What ``/tokenize`` answers: ids, or llama.cpp's ``{id, piece}`` objects."""

    tokens: list[NonNegativeInt | _Piece]


class _Text(BaseModel):
    """What ``/detokenize`` answers: the text under the engine's key."""

    content: str | None = None
    prompt: str | None = None
    text: str | None = None


class LocalTokenizer:
    """A local Hugging Face tokenizer: a ``tokenizer.json`` file or a directory holding one.

    Raises:
        ServelabError: the path does not exist or is not a tokenizer.
    """

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise ServelabError(f"--tokenizer {path}: no tokenizer.json there; give a Hugging Face tokenizer directory or file")
        try:
            self._tok = HFTokenizer.from_file(str(p))
        except Exception as exc:  # the Rust library raises plain Exception on bad files
            raise ServelabError(f"--tokenizer {path}: cannot load it ({exc})") from None
        self.name = f"local {p}"

    async def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    async def decode(self, ids: list[int]) -> str:
        """Text of token ids."""
        return self._tok.decode(ids, skip_special_tokens=False)

    async def chat_count(self, text: str, chat_template_kwargs: dict | None = None) -> int | None:
        """A bare tokenizer file knows no chat template: always None (the measured overhead is used)."""
        return None

    async def count_messages(self, messages: list[dict], chat_template_kwargs: dict | None = None) -> int | None:
        """A bare tokenizer file knows no chat template: always None (a session's later turns are
        then counted by the server's usage alone)."""
        return None


Tokenizer = ServerTokenizer | LocalTokenizer
