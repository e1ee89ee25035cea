"""Level execution: the prompts of a phase, its warm-up and measured requests, and each level's summary.

A closed-loop level is a warm-up (recorded, not counted), then the measured phase: ``stagger``
ramps its streams up over one request's duration (the warm-up's median E2E; the ramp's requests
count as warm-up), ``burst`` starts them together. An open-loop level is a one-stream warm-up,
then arrivals at the rate. Around the measured phase the server's ``/metrics`` and the GPU are
sampled; the summary gets them, the wave statistics and the ceiling, and is saved at once.
"""

from __future__ import annotations

import asyncio
import math
import random
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable

from servelab import engines
from servelab.endpoint import Endpoint
from servelab.engines.counters import ServerStats
from servelab.load.client import StreamClient, chat_body
from servelab.load.scheduler import Phase, closed_loop, open_loop
from servelab.metrics.gpu import GpuSampler, GpuStats
from servelab.metrics.slo import evaluate
from servelab.metrics.server import MetricsWatch
from servelab.metrics.summary import LevelSummary, summarize
from servelab.metrics.waves import wave_stats
from servelab.options import BenchHooks, BenchOptions
from servelab.records import RequestRecord
from servelab.results import RunWriter
from servelab.workloads.corpus import Prompt, PromptBuilder
from servelab.workloads.suites import Workload

BUILD_PARALLELISM = 8


class LevelRunner:
    """Runs levels against one endpoint and appends their summaries to ``writer``'s run
    (:class:`servelab.bench.Bench` sets up the prompts, the writer and the client first).

    Args:
        endpoint: the server.
        options: the load to run.
        hooks: progress callbacks.
        alive: asked after connection failures; False ends the run as partial.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        options: BenchOptions,
        hooks: BenchHooks,
        alive: Callable[[], Awaitable[bool]],
    ) -> None:
        self.endpoint = endpoint
        self.opts = options
        self.hooks = hooks
        self.alive = alive
        engine = endpoint.info.engine
        self.ignore_eos = options.ignore_eos if options.ignore_eos is not None else engines.get(engine).exact_output_length
        self.tag = secrets.token_hex(4)  # unique per run: repeated runs never share a prefix
        self.decode_context = options.input_tokens + options.output_tokens // 2  # mean context while decoding
        self.notes: list[str] = []
        self.shapes: list[tuple[Workload, float]] = []
        self.builders: dict[str, PromptBuilder] = {}
        self.dataset: list[tuple[str, int]] | None = None
        self.writer: RunWriter | None = None
        self.server_stats: ServerStats | None = None
        self.shared_prefix = ""  # --prefix-cache shared-prefix: the text every prompt starts with
        self.gpu_stats: GpuStats | None = None
        self.client_cpu: float | None = None
        self.cut: tuple[int, float | None, list[RequestRecord]] | None = None
        self._index = 0  # the next record's index (a resumed run goes on from its last one)
        self._level_start = 0

    def _record(self, concurrency: int, phase: str, prompt: Prompt, max_tokens: int) -> RequestRecord:
        rec = RequestRecord(
            index=self._index,
            concurrency=concurrency,
            phase=phase,
            expected_prompt_tokens=prompt.tokens,
            max_tokens=max_tokens,
            queued=0.0,
        )
        self._index += 1
        return rec

    def _on_record(self, record: RequestRecord) -> None:
        assert self.writer is not None
        self.writer.append(record)
        self.hooks.record_done(record)

    async def _build(self, shape: Workload, nonce: str) -> Prompt:
        """One prompt of a shape: shared prefix, nonce, instruction, corpus slice, question."""
        builder = self.builders[shape.lang]
        return await builder.build(shape.input_tokens, nonce, prefix=self.shared_prefix, instruction=shape.instruction, suffix=shape.question)

    async def _prompts(self, n: int, warm: Prompt | None) -> list[tuple[Prompt, Workload]]:
        """``n`` prompts with their shapes (drawn by the mix's weights, seeded): each with its own
        nonce (cold), or the one shared prompt (warm)."""
        if warm is not None:
            return [(warm, self.shapes[0][0])] * n
        if self.dataset is not None:  # file order, cycling; the nonce keeps repeats out of the prefix cache
            out = []
            for i in range(n):
                text, max_tokens = self.dataset[i % len(self.dataset)]
                nonce = f"[{self.tag}-{self._index + i}] " if self.opts.prefix_cache == "cold" else ""
                prompt = Prompt(nonce + text, await self.builders[self.opts.lang].count(nonce + text))
                out.append((prompt, Workload(name="dataset", input_tokens=prompt.tokens, max_tokens=max_tokens)))
            return out
        rng = random.Random(self.opts.seed + self._index)
        chosen = rng.choices([s for s, _ in self.shapes], weights=[w for _, w in self.shapes], k=n)
        sem = asyncio.Semaphore(BUILD_PARALLELISM)

        async def one(i: int) -> tuple[Prompt, Workload]:
            async with sem:
                return await self._build(chosen[i], f"[{self.tag}-{self._index + i}]"), chosen[i]

        return list(await asyncio.gather(*(one(i) for i in range(n))))

    async def _phase(
        self,
        client: StreamClient,
        level: int,
        phase: str,
        warm: Prompt | None,
        count: int | None,
        duration_s: float | None,
        pool: int,
        rate: float | None = None,
        stagger_s: float = 0.0,
    ) -> Phase:
        o = self.opts
        self.hooks.phase_started(level, phase, count, duration_s)
        prompts = await self._prompts(pool, warm)
        watch = MetricsWatch(self.endpoint.info.metrics_url if phase == "measured" else None, self.endpoint.info.engine, self.endpoint.headers())
        records: list[RequestRecord] = []  # as sent, for the GPU energy per token even if the phase fails

        def make(i: int) -> tuple[RequestRecord, bytes]:
            prompt, shape = prompts[i % len(prompts)]
            if i >= len(prompts) and warm is None:
                # Duration runs that outlive the prompt pool: a fresh nonce keeps every prompt unique;
                # its token count may then differ by a token or two, which the prompt check reports.
                prompt = Prompt(prompt.text.replace(f"[{self.tag}-", f"[{self.tag}-r{i}-", 1), prompt.tokens)
            rec = self._record(level, phase, prompt, o.draw_output(shape.max_tokens, self._index))
            rec.workload = shape.name or None
            records.append(rec)
            rec.queued = time.perf_counter() - client.origin
            body = chat_body(self.endpoint, prompt.text, max_tokens=rec.max_tokens, ignore_eos=self.ignore_eos,
                             cold=o.prefix_cache == "cold", chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip
            return rec, body

        gpu = GpuSampler()
        await watch.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if phase == "measured":
            gpu.start()
            self.cut = (level, rate, records)  # until the phase ends: what a cut-short level's summary covers
        try:
            if rate is None:
                result = await closed_loop(
                    client, make, concurrency=level, count=count, duration_s=duration_s, stagger_s=stagger_s,
                    on_record=self._on_record, alive=self.alive,
                )  # fmt: skip
            else:
                result = await open_loop(
                    client, make, rate=rate, burstiness=o.burstiness, count=count, duration_s=duration_s,
                    max_concurrency=o.max_concurrency, seed=o.seed, on_record=self._on_record, alive=self.alive,
                )  # fmt: skip
        finally:
            self.client_cpu = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
            self.server_stats = await watch.stop()
            self.gpu_stats = await gpu.stop(sum(r.output_tokens or 0 for r in records))
        self.cut = None
        return result

    def save_cut_level(self) -> None:
        """After the server went away or Ctrl-C in a measured phase: summarise what that phase ran
        (its in-flight requests are ``incomplete``) as a level marked ``cut_short`` and save it, so
        a run's summary is never dropped. Resuming measures the level again."""
        if self.cut is None:
            return
        level, rate, records = self.cut
        summary = summarize(level, records)
        summary.rate_rps, summary.cut_short = rate, True
        self._conclude_level(summary, Phase(records), max(1, level))
        self.cut = None

    async def _level(self, client: StreamClient, level: int, warm: Prompt | None) -> None:
        o = self.opts
        assert self.writer is not None
        self._level_start = self._index
        n_warm = o.warmup if o.warmup is not None else level
        e2e_s = None
        if n_warm:
            warm_phase = await self._phase(client, level, "warmup", warm, n_warm, None, n_warm)
            done = [r.end - r.start for r in warm_phase.records if r.status == "ok" and r.start is not None]
            e2e_s = statistics.median(done) if done else None
        count = o.requests_at(level)
        # stagger: the measured phase ramps its streams up over one request's duration (the warm-up's
        # median E2E); the ramp's requests are warm-up, so the pool holds them too
        stagger_s = e2e_s if o.closed_loop == "stagger" and e2e_s and level > 1 else 0.0
        if count is not None:
            pool = count + (2 * level if stagger_s else 0)
        else:
            # Enough unique prompts for the whole duration at the warm-up's pace, with 50% to spare.
            per_slot = o.duration_s / e2e_s if e2e_s else 16
            pool = max(2 * level, math.ceil(1.5 * level * per_slot) + level)
        measured = await self._phase(client, level, "measured", warm, count, o.duration_s, pool, stagger_s=stagger_s)
        summary = summarize(level, measured.records, measured.window)
        summary.waves = wave_stats(level, measured.records, summary.window_s)
        self._conclude_level(summary, measured, level)

    async def _rate_level(self, client: StreamClient, rate: float, warm: Prompt | None) -> None:
        """One open-loop level: a closed-loop warm-up of one stream, then arrivals at ``rate``/s."""
        o = self.opts
        cap = o.max_concurrency or 0
        self._level_start = self._index
        n_warm = o.warmup if o.warmup is not None else 1
        if n_warm:
            await self._phase(client, 1, "warmup", warm, n_warm, None, n_warm)
        count = o.requests_at_rate(rate)
        pool = count if count is not None else math.ceil(1.5 * rate * o.duration_s) + 4
        measured = await self._phase(client, cap, "measured", warm, count, o.duration_s, pool, rate=rate)
        summary = summarize(cap, measured.records, measured.window)
        summary.rate_rps = rate
        starts = sorted(r.start for r in measured.records if r.start is not None)
        if len(starts) > 1 and starts[-1] > starts[0]:
            summary.achieved_rate_rps = (len(starts) - 1) / (starts[-1] - starts[0])
        # Ceiling at the mean number of streams in flight (Little's law: rate × mean E2E latency).
        self._conclude_level(summary, measured, max(1, round(rate * (summary.e2e_ms.mean or 0) / 1e3)))

    def _conclude_level(self, summary: LevelSummary, measured: Phase, batch: int) -> None:
        """Attach server and GPU stats and the ceiling (at ``batch`` streams) to a level; save it."""
        assert self.writer is not None
        summary.record_span = (self._level_start, self._index - 1)
        if self.ignore_eos:
            summary.short_outputs = sum(
                1 for r in measured.records if r.phase == "measured" and r.status == "ok" and (r.output_tokens or 0) < r.max_tokens
            )
        if self.opts.slo:
            summary.slo = evaluate(self.opts.slo, measured.records, summary.request_throughput_rps, summary.output_throughput_tok_s)
        summary.server = self.server_stats
        summary.gpu = self.gpu_stats
        summary.client_cpu = self.client_cpu
        if self.opts.ceiling is not None:
            summary.decode_ceiling_tok_s = self.opts.ceiling.per_stream(batch, self.decode_context)
        self.writer.run.levels.append(summary)
        self._update_prompt_check(measured.records)
        self.writer.save()
        self.hooks.level_done(summary)

    def _update_prompt_check(self, records: list[RequestRecord]) -> None:
        """Compare built prompt lengths with the server's ``usage.prompt_tokens`` (docs/metrics.md)."""
        assert self.writer is not None
        check = self.writer.run.prompt_check
        devs = [
            r.prompt_tokens - r.expected_prompt_tokens
            for r in records
            if r.status == "ok" and r.prompt_tokens_source == "usage" and r.expected_prompt_tokens is not None
        ]
        if check is None or not devs:
            return
        n_before = check.checked_requests
        check.checked_requests += len(devs)
        check.mismatched_requests += sum(1 for d in devs if d)
        check.max_abs_deviation_tokens = max(check.max_abs_deviation_tokens, *(abs(d) for d in devs))
        check.mean_deviation_tokens = (check.mean_deviation_tokens * n_before + sum(devs)) / check.checked_requests
