"""A trace's prompts, built before its replay (``servelab bench --trace``).

Each request of a trace (servelab.workloads.traces) gets a prompt of its ``input_tokens`` (chat
template included), counted exactly as the server counts it; the count is the record's
``expected_prompt_tokens`` and is checked against the server's usage like any prompt.

- Requests with Mooncake block ids share content exactly where the trace says they do: block id
  *h* is always the same ``MOONCAKE_BLOCK_TOKENS`` tokens of the corpus (from an offset seeded by
  *h*), and a prompt is the run's tag followed by its blocks in order, the last one cut to length.
  So two requests that begin with the same ids begin with the same text, and a prefix cache can
  serve it — within this run only: the tag opens every prompt and differs per run.
- Other requests (Azure, servelab records) are unique prompts opened by a nonce, as bench builds them.

The prompts are built before the replay starts, so the replay's send times hold no tokenizer work.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from servelab.workloads.corpus import Prompt, PromptBuilder
from servelab.workloads.traces import MOONCAKE_BLOCK_TOKENS, Trace, TraceRequest

BUILD_PARALLELISM = 8


class TracePrompts:
    """Builds a trace's prompts (module docstring).

    Args:
        builder: the run's templated prompt builder (prepared, template calibrated).
        tag: the run's unique tag.
        seed: seeds the blocks' corpus offsets.
    """

    def __init__(self, builder: PromptBuilder, tag: str, seed: int) -> None:
        self.builder = builder
        self.tag = tag
        self.seed = seed
        self._blocks: dict[int, list[int]] = {}

    def _block(self, h: int) -> list[int]:
        """The corpus token ids of block ``h`` (the same for every request of the run)."""
        if h not in self._blocks:
            ids = self.builder.corpus_ids()
            start = random.Random(f"{self.seed}:block:{h}").randrange(len(ids))
            self._blocks[h] = [ids[(start + i) % len(ids)] for i in range(MOONCAKE_BLOCK_TOKENS)]
        return self._blocks[h]

    async def _shared(self, r: TraceRequest, head_tokens: int) -> Prompt:
        """A prompt of ``r``'s blocks after the run's tag (``head_tokens`` tokens with the template's)."""
        room = max(1, r.input_tokens - head_tokens)
        ids: list[int] = []
        for h in r.hash_ids:
            if len(ids) >= room:  # more block ids than the length holds: the rest are never read
                break
            ids += self._block(h)
        if len(ids) < room:  # fewer block ids than the length needs: unique text after them
            ids += self._block(-1 - len(self._blocks))[: room - len(ids)]
        text = f"[{self.tag}] " + (await self.builder.tokenizer.decode(ids[:room])).strip()
        return Prompt(text, await self.builder.count(text))

    async def build(self, trace: Trace, on_progress: Callable[[int], None] = lambda n: None) -> list[Prompt]:
        """One prompt per request of ``trace``, in its order; ``on_progress(n)`` after each.

        Raises:
            ServelabError: a request too short for its nonce and the chat template.
        """
        head_tokens = len(await self.builder.tokenizer.encode(f"[{self.tag}] ")) + self.builder.overhead
        sem = asyncio.Semaphore(BUILD_PARALLELISM)
        done = 0

        async def one(i: int, r: TraceRequest) -> Prompt:
            nonlocal done
            async with sem:
                prompt = await (self._shared(r, head_tokens) if r.hash_ids else self.builder.build(r.input_tokens, f"[{self.tag}-{i}]"))
            done += 1
            on_progress(done)
            return prompt

        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(trace.requests))))
