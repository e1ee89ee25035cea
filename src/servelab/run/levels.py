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
from collections.abc import Awaitable, Callable, Coroutine

from servelab import engines
from servelab.server.endpoint import Endpoint
from servelab.engines.counters import ServerStats
from servelab.load.body import request_body
from servelab.load.client import StreamClient
from servelab.load.scheduler import Phase, Send, closed_loop, open_loop, session_loop
from servelab.metrics.gpu import GpuSampler, GpuStats
from servelab.metrics.slo import evaluate
from servelab.metrics.server import MetricsWatch
from servelab.metrics.summary import LevelSummary, summarize
from servelab.metrics.turns import session_stats
from servelab.metrics.waves import wave_stats
from servelab.run.options import BenchHooks, BenchOptions
from servelab.values.records import RequestRecord
from servelab.store.results import RunWriter
from servelab.run.sessions import SessionPlayer
from servelab.workloads.corpus import Prompt, PromptBuilder
from servelab.workloads.suites import Workload
from servelab.workloads.traces import Trace

BUILD_PARALLELISM = 8


class LevelRunner:
    """Runs levels against one endpoint and appends their summaries to ``writer``'s run
    (:class:`servelab.run.bench.Bench` sets up the prompts, the writer and the client first).

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
        self.jit: list[str] = []  # kernels the server compiled during the last measured phase
        self.client_cpu: float | None = None
        self.cut: tuple[int, float | None, list[RequestRecord]] | None = None
        self._index = 0  # the next record's index (a resumed run goes on from its last one)
        self.sent: list[RequestRecord] = []  # the current phase's records as they are made
        self.player: SessionPlayer | None = None  # plays the sessions of a session-mode run (servelab.run.bench sets it up)
        self._level_start = 0

    def _record(self, concurrency: int, phase: str, expected_tokens: int | None, max_tokens: int) -> RequestRecord:
        rec = RequestRecord(
            index=self._index,
            concurrency=concurrency,
            phase=phase,
            expected_prompt_tokens=expected_tokens,
            max_tokens=max_tokens,
            queued=0.0,
        )
        self._index += 1
        self.sent.append(rec)
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
        """One phase of single requests: a closed loop of ``level`` streams, or open-loop arrivals at ``rate``."""
        o = self.opts
        self.hooks.phase_started(level, phase, count, duration_s)
        prompts = await self._prompts(pool, warm)

        def make(i: int) -> tuple[RequestRecord, bytes]:
            prompt, shape = prompts[i % len(prompts)]
            if i >= len(prompts) and warm is None:
                # Duration runs that outlive the prompt pool: a fresh nonce keeps every prompt unique;
                # its token count may then differ by a token or two, which the prompt check reports.
                prompt = Prompt(prompt.text.replace(f"[{self.tag}-", f"[{self.tag}-r{i}-", 1), prompt.tokens)
            rec = self._record(level, phase, prompt.tokens, o.draw_output(shape.max_tokens, self._index))
            rec.workload = shape.name or None
            rec.queued = time.perf_counter() - client.origin
            return rec, self._body(prompt.text, rec.max_tokens)

        if rate is None:
            load = closed_loop(client, make, concurrency=level, count=count, duration_s=duration_s, stagger_s=stagger_s,
                               on_record=self._on_record, alive=self.alive)  # fmt: skip
        else:
            load = open_loop(client, make, rate=rate, burstiness=o.burstiness, count=count, duration_s=duration_s,
                             max_concurrency=o.max_concurrency, seed=o.seed, on_record=self._on_record, alive=self.alive)  # fmt: skip
        return await self._sampled(level, phase, rate, load)

    def _body(self, prompt: str | list[dict], max_tokens: int, cold: bool | None = None) -> bytes:
        """A request's body under the run's options (API, exact output, template kwargs): one prompt,
        or a session's conversation; the prefix cache cold as ``--prefix-cache`` says unless ``cold``
        is given."""
        o = self.opts
        cold = o.prefix_cache == "cold" if cold is None else cold
        return request_body(self.endpoint, prompt, max_tokens=max_tokens, ignore_eos=self.ignore_eos, api=o.api, cold=cold,
                            chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip

    async def _sampled(self, level: int, phase: str, rate: float | None, load: Coroutine[None, None, Phase]) -> Phase:
        """Run a phase's ``load``; around a measured one, sample the server's /metrics and the GPU, and
        read what the server's log says it compiled meanwhile (``self.jit``)."""
        watch = MetricsWatch(self.endpoint.info.metrics_url if phase == "measured" else None, self.endpoint.info.engine, self.endpoint.headers())
        self.sent = []  # as sent, for the GPU energy per token even if the phase fails
        gpu = GpuSampler()
        try:
            await watch.start()
        except BaseException:
            load.close()
            raise
        cpu0, wall0 = time.process_time(), time.perf_counter()
        log_mark = self._log_size() if phase == "measured" else None
        if phase == "measured":
            gpu.start()
            self.cut = (level, rate, self.sent)  # until the phase ends: what a cut-short level's summary covers
        try:
            result = await load
        finally:
            self.client_cpu = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
            self.server_stats = await watch.stop()
            self.gpu_stats = await gpu.stop(sum(r.output_tokens or 0 for r in self.sent))
            self.jit = self._jit_since(log_mark)
        self.cut = None
        return result

    async def _session_phase(self, client: StreamClient, level: int, phase: str, count: int | None, duration_s: float | None) -> Phase:
        """One phase of ``level`` sessions kept open (servelab.run.sessions); their end reasons in ``player.ended``."""
        assert self.player is not None
        player = self.player
        player.ended.clear()
        turns = {shape.turns for shape, _ in self.shapes}
        self.hooks.phase_started(level, phase, count * turns.pop() if count is not None and len(turns) == 1 else None, duration_s)  # requests

        async def play(session: int, send: Send) -> None:
            await player.play(player.draw(self.shapes, session), session, send, level, phase)

        load = session_loop(client, play, concurrency=level, count=count, duration_s=duration_s, on_record=self._on_record, alive=self.alive)
        return await self._sampled(level, phase, None, load)

    async def _session_level(self, client: StreamClient, level: int) -> None:
        """A level of ``level`` sessions kept open: warm-up sessions (default one per stream), then
        the measured ones (``--requests`` sessions, default one per stream, or ``--duration``)."""
        o = self.opts
        self._level_start = self._index
        n_warm = o.warmup if o.warmup is not None else level
        if n_warm:
            await self._session_phase(client, level, "warmup", n_warm, None)
        count = None if o.duration_s is not None else (o.requests or level)
        measured = await self._session_phase(client, level, "measured", count, o.duration_s)
        summary = summarize(level, measured.records, measured.window)
        assert self.player is not None
        summary.sessions = session_stats(measured.records, self.player.ended)
        self._conclude_level(summary, measured, level)

    async def _trace_level(self, client: StreamClient, trace: Trace, prompts: list[Prompt]) -> None:
        """The trace replayed as one open-loop level: request i sent at its time with ``prompts[i]``;
        with Mooncake block ids the server may cache (the blocks are shared on purpose, servelab.run.replay)."""
        self._level_start = self._index
        cold = trace.prefix_share() is None
        self.hooks.phase_started(0, "measured", len(prompts), None)

        def make(i: int) -> tuple[RequestRecord, bytes]:
            r = trace.requests[i]
            rec = self._record(0, "measured", prompts[i].tokens, r.output_tokens)
            return rec, self._body(prompts[i].text, r.output_tokens, cold)

        load = open_loop(client, make, rate=1.0, count=len(prompts), arrivals=(r.at_s for r in trace.requests),
                         on_record=self._on_record, alive=self.alive)  # fmt: skip
        measured = await self._sampled(0, "measured", trace.rate_rps, load)
        self._conclude_open_level(0, trace.rate_rps, measured)

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
        self._conclude_open_level(cap, rate, measured)

    def _conclude_open_level(self, cap: int, rate: float | None, measured: Phase) -> None:
        """Summarise an open-loop level (``--rate``, or a replayed trace: ``rate`` its mean): target and
        achieved rate, and the ceiling at the mean number of streams in flight (Little's law: rate ×
        mean E2E latency)."""
        summary = summarize(cap, measured.records, measured.window)
        summary.rate_rps = rate
        starts = sorted(r.start for r in measured.records if r.start is not None)
        if len(starts) > 1 and starts[-1] > starts[0]:
            summary.achieved_rate_rps = (len(starts) - 1) / (starts[-1] - starts[0])
        self._conclude_level(summary, measured, max(1, round((rate or 0) * (summary.e2e_ms.mean or 0) / 1e3)))

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
        summary.jit_kernels = self.jit
        summary.client_cpu = self.client_cpu
        if self.opts.ceiling is not None:
            summary.decode_ceiling_tok_s = self.opts.ceiling.per_stream(batch, self.decode_context)
        self.writer.run.levels.append(summary)
        self._update_prompt_check(measured.records)
        self.writer.save()
        self.hooks.level_done(summary)

    def _log_size(self) -> int | None:
        """Bytes of the server's log so far (``--server-log``, or a launched server's), None without one."""
        log = self.opts.server_log
        try:
            return log.stat().st_size if log is not None else None
        except OSError:
            return None

    def _jit_since(self, mark: int | None) -> list[str]:
        """Kernels the server's log says it compiled since ``mark`` (bytes; ``servelab.engines.jit_kernels``):
        the log must be live, written while the level runs (a launched server's, or a file the server appends to)."""
        if mark is None or self.opts.server_log is None:
            return []
        try:
            with self.opts.server_log.open("rb") as f:
                f.seek(mark)
                return engines.jit_kernels(f.read().decode("utf-8", errors="replace"))
        except OSError:
            return []

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
