"""A trace replayed open-loop at its own times (``servelab bench --trace``), and its prompts, built
before the replay.

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
import statistics
from collections.abc import Callable

from servelab.load.client import StreamClient
from servelab.load.scheduler import open_loop
from servelab.run.levels import Levels
from servelab.run.mode import LoadMode
from servelab.run.options import DoesNotFit
from servelab.run.options import BenchOptions
from servelab.server.tokenizer import Tokenizer
from servelab.store.results import TraceInfo
from servelab.values.records import RequestRecord
from servelab.values.prompt import Prompt
from servelab.workloads.corpus import PromptBuilder
from servelab.workloads.suites import Workload
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
        return await self.builder.prompt(text)

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


class TraceReplay(LoadMode):
    """One open-loop level replaying the trace: request i sent at its time with its prompt; with
    Mooncake block ids the server may cache what they share (on purpose: :class:`TracePrompts`)."""

    def __init__(self) -> None:
        self.trace: Trace | None = None  # the requests sent, every one of the trace's (:meth:`fit`)
        self.prompts: list[Prompt] = []

    @classmethod
    def applies(cls, options: BenchOptions) -> bool:
        return options.trace is not None

    def asked(self, options: BenchOptions) -> list[tuple[float | None, int]]:
        assert self.trace is not None
        return [(self.trace.rate_rps, 0)]

    def fit(self, levels: Levels) -> None:
        """Replay every request of the trace, those longer than the server's context too: a trace is
        the user's traffic, and a request it holds that this server cannot take is one its users would
        see fail, so it is sent at its time and counted (the server refuses or cuts it), never left out;
        how many there were goes in the run (``TraceInfo.over_context``, finding ``trace_over_context``).
        A prompt longer than the context on its own is built to the context + 1 tokens: the server
        refuses it alike, and a trace's outlier of millions of tokens costs no such prompt.

        Raises:
            DoesNotFit: no request fits (nothing to measure).
        """
        trace = levels.opts.trace
        limit = levels.endpoint.info.max_model_len
        fitting = [r for r in trace.requests if limit is None or r.input_tokens + r.output_tokens <= limit]
        if not fitting:
            raise DoesNotFit(f"no request of the trace fits the server's {limit}-token context")
        sent = [r if limit is None or r.input_tokens <= limit else r.model_copy(update={"input_tokens": limit + 1}) for r in trace.requests]
        self.trace = Trace(trace.path, trace.format, sent, trace.skipped_lines)
        levels.shapes = [(Workload(name="trace", input_tokens=min(r.input_tokens for r in fitting), max_tokens=1), 1.0)]
        levels.decode_context = round(statistics.fmean(r.input_tokens + r.output_tokens / 2 for r in fitting))
        self.trace_info = TraceInfo(file=trace.path.name, format=trace.format, time_scale=levels.opts.trace_time_scale, requests=len(trace.requests),
                                    skipped_lines=trace.skipped_lines, duration_s=trace.duration_s, prefix_share=trace.prefix_share(),
                                    over_context=len(trace.requests) - len(fitting), context_tokens=limit)  # fmt: skip

    async def prepare(self, levels: Levels, tokenizer: Tokenizer) -> None:
        """The trace's prompts, built before the replay with the run's templated builder, with a
        progress bar; the mean deviation of their lengths from the trace's goes in the run's prompt check."""
        assert levels.writer is not None
        levels.hooks.phase_started(0, "building prompts", len(self.trace.requests), None)
        builder = levels.builders[levels.opts.lang]
        self.prompts = await TracePrompts(builder, levels.tag, levels.opts.seed).build(self.trace, levels.hooks.prompt_built)
        if (check := levels.writer.run.prompt_check) is not None:
            check.trace_deviation_tokens = statistics.fmean(abs(p.tokens - r.input_tokens) for p, r in zip(self.prompts, self.trace.requests, strict=True))

    async def run(self, levels: Levels, client: StreamClient, rate: float | None, concurrency: int) -> None:
        trace, prompts = self.trace, self.prompts
        levels.begin()
        cold = trace.prefix_share() is None
        levels.hooks.phase_started(0, "measured", len(prompts), None)

        def make(i: int) -> tuple[RequestRecord, bytes]:
            r = trace.requests[i]
            rec = levels.record(0, "measured", prompts[i].tokens, r.output_tokens)
            return rec, levels.body(prompts[i], r.output_tokens, cold)

        load = open_loop(client, make, rate=1.0, count=len(prompts), arrivals=(r.at_s for r in trace.requests),
                         on_record=levels.on_record, alive=levels.alive)  # fmt: skip
        measured = await levels.sampled(0, "measured", trace.rate_rps, load)
        levels.conclude_open(0, trace.rate_rps, measured)
