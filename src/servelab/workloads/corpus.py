"""The offline text corpus and token-exact prompts cut from it.

The corpus (``data/en.txt``, ``data/hu.txt``) is original prose written for servelab and
released with it under CC0, so it may be shipped and sliced freely. English and Hungarian
(accented letters, a different tokenizer load) are both present.

A prompt is ``<nonce> <slice of corpus>``, with exactly the requested number of tokens by the
given tokenizer. The nonce opens the prompt, so no prefix cache can serve any of it (a nonce at
the end, as llama-benchy puts it, leaves the whole prefix cacheable). Slices wrap around the
corpus, so any length can be built.
"""

from __future__ import annotations

import random
from importlib.resources import files

from servelab.errors import ServelabError
from servelab.values.prompt import Prompt
from servelab.server.tokenizer import Tokenizer

LANGUAGES = ("en", "hu")
MAX_ADJUST_ROUNDS = 4
MAX_OFFSETS = 16  # only tried while a slice fails to land on the count (rare: whitespace or merges at a seam)


def corpus_text(lang: str) -> str:
    """The corpus text of one language (``en`` or ``hu``).

    Raises:
        ServelabError: unknown language.
    """
    if lang not in LANGUAGES:
        raise ServelabError(f"unknown corpus language {lang!r}; choose one of {', '.join(LANGUAGES)}")
    return files("servelab.workloads").joinpath("data", f"{lang}.txt").read_text(encoding="utf-8")


class PromptBuilder:
    """Cuts prompts of an exact token count from the corpus.

    A prompt's count includes the chat template. Where the server can count a templated message
    (``tokenizer.chat_count``: llama.cpp, vLLM) that count is used, so seams between template and
    text are exact; elsewhere the count is the text's tokens plus ``overhead``, the template's
    tokens measured by a calibration request (exact up to merges at the seams, which the run's
    prompt check reports). Until ``use_template`` is called, counts are of the bare text.

    Args:
        tokenizer: the server's or a local tokenizer.
        seed: seeds the choice of slice offsets, so a run is reproducible (the nonce is not).
        lang: corpus language.
        ids: give each prompt its token ids (prompts sent as ids; one more tokenization each).
    """

    def __init__(self, tokenizer: Tokenizer, *, seed: int = 0, lang: str = "en", ids: bool = False) -> None:
        self.tokenizer = tokenizer
        self.lang = lang
        self.ids = ids
        self.overhead = 0
        self.templated = False
        self._chat_template_kwargs: dict | None = None
        self._rng = random.Random(seed)
        self._ids: list[int] = []

    def use_template(self, overhead: int, *, templated: bool, chat_template_kwargs: dict | None = None) -> None:
        """Count prompts as chat messages from now on: by the server's templated count, or text + ``overhead``."""
        self.overhead = overhead
        self.templated = templated
        self._chat_template_kwargs = chat_template_kwargs

    async def build_prepared(self, tokens: int, nonce: str = "") -> Prompt:
        """:meth:`prepare` (if needed), then :meth:`build`."""
        await self.prepare()
        return await self.build(tokens, nonce)

    async def count(self, text: str) -> int:
        """Tokens of ``text`` as a prompt (see the class docstring)."""
        if self.templated:
            n = await self.tokenizer.chat_count(text, self._chat_template_kwargs)
            if n is not None:
                return n
        return len(await self.tokenizer.encode(text)) + self.overhead

    async def prompt(self, text: str) -> Prompt:
        """``text`` as a prompt: its count (:meth:`count`), and its token ids when the builder gives them."""
        count = await self.count(text)
        return Prompt(text, count, tuple(await self.tokenizer.encode(text)) if self.ids else None)

    async def prepare(self) -> None:
        """Tokenize the corpus once; call before :meth:`build`."""
        if not self._ids:
            self._ids = await self.tokenizer.encode(corpus_text(self.lang))

    def corpus_ids(self) -> list[int]:
        """The corpus's token ids (after :meth:`prepare`)."""
        if not self._ids:
            raise RuntimeError("PromptBuilder.prepare() was not awaited")
        return self._ids

    async def build(self, tokens: int, nonce: str = "", prefix: str = "", instruction: str = "", suffix: str = "") -> Prompt:
        """A prompt of exactly ``tokens`` tokens: ``prefix`` (deliberately shared by many prompts),
        ``nonce``, ``instruction`` (a task; after the nonce, so that it is not a cacheable prefix),
        a corpus slice, then ``suffix`` (e.g. the question about the text).

        Cuts a slice at a random offset, detokenizes it, and re-tokenizes ``nonce + text``; token
        merges at the seams can shift the count by a few, so the slice is lengthened or shortened
        and re-checked until the count is exact. A seam where the count jumps past the target
        (e.g. text merging into a chat marker that is plain text to this tokenizer) is left for a
        slice at another offset.

        Raises:
            ServelabError: ``tokens`` is smaller than the nonce alone, or the count does not
                converge (a tokenizer that cannot reach that length from this corpus).
        """
        ids = self.corpus_ids()
        offsets = [self._rng.randrange(len(ids)) for _ in range(MAX_OFFSETS)]  # drawn before any await
        head = prefix + (f"{nonce} " if nonce else "") + instruction
        head_tokens = len(await self.tokenizer.encode(head + suffix)) if head or suffix else 0
        if tokens <= head_tokens + self.overhead:
            raise ServelabError(
                f"a prompt of {tokens} tokens cannot hold its {head_tokens} tokens of instruction and cache-busting nonce and "
                f"{self.overhead} chat-template tokens; use more input tokens"
            )
        for offset in offsets:  # a seam that never lands on the exact count: cut elsewhere
            length = tokens - head_tokens - self.overhead
            tried: set[int] = set()
            for _ in range(MAX_ADJUST_ROUNDS):
                window = [ids[(offset + i) % len(ids)] for i in range(max(length, 0))]
                text = head + (await self.tokenizer.decode(window)).strip() + suffix
                count = await self.count(text)
                if count == tokens:
                    return Prompt(text, count, tuple(await self.tokenizer.encode(text)) if self.ids else None)
                tried.add(length)
                length += tokens - count
                while length in tried:  # oscillating around a seam: step by one token instead
                    length += 1 if count < tokens else -1
        raise ServelabError(f"could not build a prompt of exactly {tokens} tokens with {self.tokenizer.name}; try another --input-tokens")
