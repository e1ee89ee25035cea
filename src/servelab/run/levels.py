"""What every level of a run shares, whatever sends its load (:class:`Levels`): the run's
records, prompts and request bodies, a phase sampled (the server's ``/metrics``, the GPU, the
kernels its log says it compiled), and a level's summary concluded and saved at once. How a load
is sent is a mode's (``run.mode``).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine

from pathlib import Path

from servelab import engines
from servelab.engines.counters import ServerStats
from servelab.errors import ServelabError
from servelab.load import apis
from servelab.load.body import request_body
from servelab.load.client import StreamClient
from servelab.load.scheduler import Phase, closed_loop, open_loop
from servelab.metrics.gpu import GpuSampler, GpuStats
from servelab.metrics.server import MetricsWatch
from servelab.metrics.slo import evaluate
from servelab.metrics.summary import LevelSummary, summarize
from servelab.run.options import BenchHooks, BenchOptions, DoesNotFit, check_fits
from servelab.server.endpoint import Endpoint
from servelab.server.tokenizer import Tokenizer
from servelab.store.results import RunResult, RunWriter
from servelab.values.records import RequestRecord
from servelab.values.prompt import Prompt
from servelab.workloads.corpus import PromptBuilder
from servelab.workloads.suites import Workload

BUILD_PARALLELISM = 8
CALIBRATION_TOKENS = 32  # tokens of the calibration request's text (and the least room a shared prefix leaves)


def fresh(prompt: Prompt, tag: str, i: int, pool: int) -> Prompt:
    """Request ``i`` of a duration run that outlived its pool of ``pool`` prompts: a fresh nonce keeps
    every prompt unique (its token count may then differ by a token or two, which the prompt check
    reports); a token-id prompt is rotated instead, its length exact and its first block new."""
    if prompt.ids is not None and len(prompt.ids) > 1:
        k = 1 + (i // pool - 1) % (len(prompt.ids) - 1)  # round r ≥ 1 of the pool: a rotation no other round has (up to len − 1 rounds)
        return Prompt(prompt.text, prompt.tokens, prompt.ids[k:] + prompt.ids[:k])
    return Prompt(prompt.text.replace(f"[{tag}-", f"[{tag}-r{i}-", 1), prompt.tokens)


class Levels:
    """A run's levels against one endpoint: its records (numbered, appended as they complete), its
    prompts, and each level's summary appended to the run (:meth:`start` first; the request shapes
    from :meth:`fit_shapes`, or a mode's own fit).

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
        self.warm: Prompt | None = None  # --prefix-cache warm: the one prompt every request repeats
        self.gpu_stats: GpuStats | None = None
        self.jit: list[str] = []  # kernels the server compiled during the last measured phase
        self.client_cpu: float | None = None
        self.cut: tuple[int, float | None, list[RequestRecord]] | None = None
        self._index = 0  # the next record's index (a resumed run goes on from its last one)
        self.sent: list[RequestRecord] = []  # the current phase's records as they are made
        self._level_start = 0

    def fit_shapes(self) -> None:
        """Keep the request shapes that fit the server's context; drop the rest of a mix with a note.
        A dataset's prompts are fitted one by one once the template is known (:meth:`fit_dataset`).

        Raises:
            DoesNotFit: a single shape, or every shape of a mix, is too long.
        """
        if self.opts.dataset is not None:
            self.shapes = [(Workload(name="dataset", input_tokens=1, max_tokens=self.opts.output_tokens), 1.0)]
            return
        shapes = self.opts.shapes()
        fitting = []
        for shape, weight in shapes:
            try:
                check_fits(self.endpoint, shape.input_tokens + shape.system_tokens, self.opts.output_range(shape.max_tokens)[1])
                fitting.append((shape, weight))
            except DoesNotFit as exc:
                if len(shapes) == 1:
                    raise
                self.notes.append(f"workload {shape.name} left out of the mix: {exc}")
        if not fitting:
            raise DoesNotFit(f"no workload of the mix fits the server's context: {'; '.join(self.notes)}")
        self.shapes = fitting
        self.decode_context = round(sum(w * (s.input_tokens + s.max_tokens // 2) for s, w in fitting) / sum(w for _, w in fitting))

    async def prepare(self, tokenizer: Tokenizer) -> PromptBuilder:
        """The prompt builders, one per corpus language of the shapes (prepared); returns the run's own
        language's, which calibrates the template."""
        o = self.opts
        ids = apis.get(o.api).token_ids
        builder = PromptBuilder(tokenizer, seed=o.seed, lang=o.lang, ids=ids)
        await builder.prepare()
        self.builders = {o.lang: builder}
        for shape, _ in self.shapes:
            if shape.lang not in self.builders:
                self.builders[shape.lang] = PromptBuilder(tokenizer, seed=o.seed, lang=shape.lang, ids=ids)
                await self.builders[shape.lang].prepare()
        return builder

    def start(self, run_dir: Path, run: RunResult, next_index: int) -> None:
        """Write ``run`` to ``run_dir`` from now on (records appended, ``run.json`` saved after each
        level), numbering records from ``next_index`` (a resumed run goes on from its last one)."""
        self.writer = RunWriter(run_dir, run)
        self._index = next_index

    async def share_prefix(self, tokenizer: Tokenizer) -> None:
        """``--prefix-cache shared-prefix``: the text every prompt starts with, built with plain counts
        before the template is known.

        Raises:
            ServelabError: the shared prefix leaves no room in the prompt.
        """
        o = self.opts
        if o.prefix_cache != "shared-prefix":
            return
        if o.shared_prefix_tokens + CALIBRATION_TOKENS >= o.input_tokens:
            raise ServelabError(f"--shared-prefix-tokens {o.shared_prefix_tokens} leaves no room in --input-tokens {o.input_tokens}")
        shared = await PromptBuilder(tokenizer, seed=o.seed + 1).build_prepared(o.shared_prefix_tokens, f"[{self.tag}-shared]")
        self.shared_prefix = shared.text + "\n\n"

    async def build_warm(self) -> None:
        """``--prefix-cache warm``: build the one prompt every request repeats (after calibration)."""
        if self.opts.prefix_cache == "warm":
            self.warm = await self.build(self.shapes[0][0], f"[{self.tag}]")

    async def fit_dataset(self, builder: PromptBuilder, tokenizer: Tokenizer) -> None:
        """Count each dataset prompt (template included) and its output length; keep those that fit.

        Raises:
            DoesNotFit: no entry fits the server's context.
        """
        o = self.opts
        limit = self.endpoint.info.max_model_len
        self.dataset = []
        for entry in o.dataset:
            tokens = await builder.count(f"[{self.tag}-0000] {entry.prompt}")
            out = entry.output_tokens or (len(await tokenizer.encode(entry.reply)) if entry.reply else o.output_tokens)
            if limit is not None and tokens + o.output_range(out)[1] > limit:
                continue
            self.dataset.append((entry.prompt, max(1, out)))
        left_out = len(o.dataset) - len(self.dataset)
        if left_out:
            self.notes.append(f"{left_out} of {len(o.dataset)} dataset prompts left out: prompt + output above the {limit}-token context")
        if not self.dataset:
            raise DoesNotFit(f"no prompt of the dataset fits the server's {limit}-token context")
        self.decode_context = round(statistics.fmean(len(p) / 4 + m / 2 for p, m in self.dataset))  # rough: ~4 characters per token

    def begin(self) -> None:
        """A level starts: its summary covers the records made from here (``record_span``)."""
        self._level_start = self._index

    def record(self, concurrency: int, phase: str, expected_tokens: int | None, max_tokens: int) -> RequestRecord:
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

    def on_record(self, record: RequestRecord) -> None:
        assert self.writer is not None
        self.writer.append(record)
        self.hooks.record_done(record)

    async def build(self, shape: Workload, nonce: str) -> Prompt:
        """One prompt of a shape: shared prefix, nonce, instruction, corpus slice, question."""
        builder = self.builders[shape.lang]
        return await builder.build(shape.input_tokens, nonce, prefix=self.shared_prefix, instruction=shape.instruction, suffix=shape.question)

    async def prompts(self, n: int) -> list[tuple[Prompt, Workload]]:
        """``n`` prompts with their shapes (drawn by the mix's weights, seeded): each with its own
        nonce (cold), or the one shared prompt (warm)."""
        if self.warm is not None:
            return [(self.warm, self.shapes[0][0])] * n
        if self.dataset is not None:  # file order, cycling; the nonce keeps repeats out of the prefix cache
            out = []
            for i in range(n):
                text, max_tokens = self.dataset[i % len(self.dataset)]
                nonce = f"[{self.tag}-{self._index + i}] " if self.opts.prefix_cache == "cold" else ""
                prompt = await self.builders[self.opts.lang].prompt(nonce + text)
                out.append((prompt, Workload(name="dataset", input_tokens=prompt.tokens, max_tokens=max_tokens)))
            return out
        rng = random.Random(self.opts.seed + self._index)
        chosen = rng.choices([s for s, _ in self.shapes], weights=[w for _, w in self.shapes], k=n)
        sem = asyncio.Semaphore(BUILD_PARALLELISM)

        async def one(i: int) -> tuple[Prompt, Workload]:
            async with sem:
                return await self.build(chosen[i], f"[{self.tag}-{self._index + i}]"), chosen[i]

        return list(await asyncio.gather(*(one(i) for i in range(n))))

    async def phase(
        self,
        client: StreamClient,
        level: int,
        phase: str,
        count: int | None,
        duration_s: float | None,
        pool: int,
        rate: float | None = None,
        stagger_s: float = 0.0,
    ) -> Phase:
        """One phase of single requests: a closed loop of ``level`` streams, or open-loop arrivals at ``rate``."""
        o = self.opts
        self.hooks.phase_started(level, phase, count, duration_s)
        prompts = await self.prompts(pool)

        def make(i: int) -> tuple[RequestRecord, bytes]:
            prompt, shape = prompts[i % len(prompts)]
            if i >= len(prompts) and self.warm is None:
                prompt = fresh(prompt, self.tag, i, len(prompts))
            rec = self.record(level, phase, prompt.tokens, o.draw_output(shape.max_tokens, self._index))
            rec.workload = shape.name or None
            rec.queued = time.perf_counter() - client.origin
            return rec, self.body(prompt, rec.max_tokens)

        if rate is None:
            load = closed_loop(client, make, concurrency=level, count=count, duration_s=duration_s, stagger_s=stagger_s,
                               on_record=self.on_record, alive=self.alive)  # fmt: skip
        else:
            load = open_loop(client, make, rate=rate, burstiness=o.burstiness, count=count, duration_s=duration_s,
                             max_concurrency=o.max_concurrency, seed=o.seed, on_record=self.on_record, alive=self.alive)  # fmt: skip
        return await self.sampled(level, phase, rate, load)

    def body(self, prompt: Prompt | list[dict], max_tokens: int, cold: bool | None = None) -> bytes:
        """A request's body under the run's options (API, exact output, template kwargs): one prompt,
        or a session's conversation; the prefix cache cold as ``--prefix-cache`` says unless ``cold``
        is given."""
        o = self.opts
        cold = o.prefix_cache == "cold" if cold is None else cold
        return request_body(self.endpoint, prompt, max_tokens=max_tokens, ignore_eos=self.ignore_eos, api=o.api, cold=cold,
                            chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip

    async def sampled(self, level: int, phase: str, rate: float | None, load: Coroutine[None, None, Phase]) -> Phase:
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

    def save_cut_level(self) -> None:
        """After the server went away or Ctrl-C in a measured phase: summarise what that phase ran
        (its in-flight requests are ``incomplete``) as a level marked ``cut_short`` and save it, so
        a run's summary is never dropped. Resuming measures the level again."""
        if self.cut is None:
            return
        level, rate, records = self.cut
        summary = summarize(level, records)
        summary.rate_rps, summary.cut_short = rate, True
        self.conclude(summary, Phase(records), max(1, level))
        self.cut = None

    def conclude_open(self, cap: int, rate: float | None, measured: Phase) -> None:
        """Summarise an open-loop level (``--rate``, or a replayed trace: ``rate`` its mean): target and
        achieved rate, and the ceiling at the mean number of streams in flight (Little's law: rate ×
        mean E2E latency)."""
        summary = summarize(cap, measured.records, measured.window)
        summary.rate_rps = rate
        starts = sorted(r.start for r in measured.records if r.start is not None)
        if len(starts) > 1 and starts[-1] > starts[0]:
            summary.achieved_rate_rps = (len(starts) - 1) / (starts[-1] - starts[0])
        self.conclude(summary, measured, max(1, round((rate or 0) * (summary.e2e_ms.mean or 0) / 1e3)))

    def conclude(self, summary: LevelSummary, measured: Phase, batch: int) -> None:
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
