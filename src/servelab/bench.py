"""``servelab bench``: closed-loop load at each concurrency level against one endpoint.

Order of work: check every request fits the context (before anything is sent) → measure the chat
template's overhead with one calibration request → for each level: warm-up requests (recorded,
not counted), then the measured requests → summary per level. Records are appended as they
complete; ``run.json`` is rewritten after each level and says ``partial`` until the end.
"""

from __future__ import annotations

import asyncio
import math
import random
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import aiohttp

from servelab.endpoint import Endpoint
from servelab.diagnose import diagnose
from servelab.errors import ServelabError
from servelab.load.client import StreamClient, chat_body, connection_reuse
from servelab.load.scheduler import Phase, ServerGone, closed_loop, open_loop
from servelab.metrics.bootlog import parse_bootlog
from servelab.metrics.gpu import GpuSampler, GpuStats
from servelab.metrics.server import MetricsWatch, ServerStats
from servelab.metrics.summary import LevelSummary, summarize
from servelab.metrics.waves import wave_stats
from servelab.plan.hardware import Hardware
from servelab.plan.model_spec import ModelSpec
from servelab.plan.planner import bench_ceiling
from servelab.plan.quant import QuantFormat
from servelab.records import RequestRecord
from servelab.results import CeilingInfo, LoadSpec, PromptCheck, RecipeInfo, RunResult, RunWriter
from servelab.tokenizer import LocalTokenizer, ServerTokenizer, Tokenizer
from servelab.workloads.corpus import Prompt, PromptBuilder
from servelab.workloads.datasets import DatasetEntry
from servelab.workloads.suites import Workload

CALIBRATION_TOKENS = 32
BUILD_PARALLELISM = 8
KNOWN_ENGINES = ("vllm", "sglang", "llama.cpp")


@dataclass
class BenchOptions:
    """What the user asked for (CLI options of ``servelab bench``)."""

    concurrency: list[int]
    requests: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    input_tokens: int = 256
    output_tokens: int = 128
    prefix_cache: Literal["cold", "warm", "shared-prefix"] = "cold"
    shared_prefix_tokens: int = 512
    ignore_eos: bool | None = None
    chat_template_kwargs: dict | None = None
    seed: int = 0
    request_timeout_s: float = 600.0
    tokenizer_path: str | None = None
    ceiling: Ceiling | None = None
    server_log: Path | None = None
    rates: list[float] | None = None
    closed_loop: Literal["stagger", "burst"] = "stagger"  # how a closed-loop level's streams start (scheduler.closed_loop)
    burstiness: float = 1.0
    max_concurrency: int | None = None
    lang: str = "en"
    instruction: str = ""
    question: str = ""
    dataset: list[DatasetEntry] | None = None  # prompts from a file (``--dataset``); override the shape above
    mix: dict[str, float] | None = None  # workload name → weight (``--mix``); overrides the shape above
    workloads: dict[str, Workload] | None = None  # where the mix's names are looked up
    recipe: RecipeInfo | None = None  # the recipe variant that launched the server, stored with the run

    def shapes(self) -> list[tuple[Workload, float]]:
        """The request shapes with their weights: the mix's workloads, or one shape from the options."""
        if self.mix:
            return [(self.workloads[name], weight) for name, weight in self.mix.items()]
        single = Workload(name="", input_tokens=self.input_tokens, max_tokens=self.output_tokens, lang=self.lang,
                          instruction=self.instruction, question=self.question)  # fmt: skip
        return [(single, 1.0)]

    def requests_at(self, concurrency: int) -> int | None:
        """Measured requests at a level: ``--requests``, or by default 4 per slot and at least 8."""
        if self.duration_s is not None:
            return None
        return self.requests if self.requests is not None else max(8, 4 * concurrency)

    def requests_at_rate(self, rate: float) -> int | None:
        """Open loop: ``--requests``, or by default 30 s worth of arrivals, at least 8."""
        if self.duration_s is not None:
            return None
        return self.requests if self.requests is not None else max(8, math.ceil(30 * rate))


@dataclass
class Ceiling:
    """The roofline a bench compares against: model, weight format and hardware (``servelab plan``)."""

    spec: ModelSpec
    fmt: QuantFormat
    hardware: Hardware
    tp: int = 1

    def per_stream(self, batch: int, context: int) -> float:
        """Decode ceiling per stream, tok/s."""
        return bench_ceiling(self.spec, self.fmt, self.hardware, batch=batch, context=context, tp=self.tp)


class BenchHooks(Protocol):
    """Progress callbacks (the CLI draws Rich progress bars with them)."""

    def phase_started(self, concurrency: int, phase: str, total: int | None, duration_s: float | None) -> None: ...
    def record_done(self, record: RequestRecord) -> None: ...
    def level_done(self, summary: LevelSummary) -> None: ...


class DoesNotFit(ServelabError):
    """A request of the asked size cannot fit the server's context (nothing was sent)."""


def check_fits(endpoint: Endpoint, input_tokens: int, output_tokens: int) -> None:
    """Refuse, before anything is sent, a request that cannot fit the server's context.

    Raises:
        DoesNotFit: ``input_tokens + output_tokens`` exceeds the context per request.
    """
    limit = endpoint.info.max_model_len
    if limit is not None and input_tokens + output_tokens > limit:
        where = "per slot (llama.cpp -c / --parallel)" if endpoint.info.engine == "llama.cpp" else "(max_model_len)"
        raise DoesNotFit(
            f"a request needs {input_tokens} prompt + {output_tokens} output = {input_tokens + output_tokens} tokens, "
            f"but {endpoint.info.model} at {endpoint.root} allows {limit} tokens {where}; "
            "lower --input-tokens/--output-tokens or raise the server's context length"
        )


def choose_tokenizer(endpoint: Endpoint, session: aiohttp.ClientSession, path: str | None) -> Tokenizer:
    """``--tokenizer PATH`` if given, else the server's ``/tokenize``.

    Raises:
        ServelabError: neither is available.
    """
    if path:
        return LocalTokenizer(path)
    if endpoint.tokenize_path:
        return ServerTokenizer(endpoint, session)
    raise ServelabError(
        f"{endpoint.root} has no /tokenize endpoint; pass --tokenizer PATH (a local Hugging Face tokenizer.json or its directory)"
    )


class Bench:
    """One ``servelab bench`` run against a discovered endpoint.

    Args:
        endpoint: the server.
        options: the load to run.
        run_dir: where the run is written.
        hooks: progress callbacks.
        alive: asked after connection failures; False ends the run as partial.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        options: BenchOptions,
        run_dir: Path,
        hooks: BenchHooks,
        alive: Callable[[], Awaitable[bool]],
    ) -> None:
        self.endpoint = endpoint
        self.opts = options
        self.run_dir = run_dir
        self.hooks = hooks
        self.alive = alive
        engine = endpoint.info.engine
        self.ignore_eos = options.ignore_eos if options.ignore_eos is not None else engine in KNOWN_ENGINES
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
        self._index = 0

    def _load_spec(self) -> LoadSpec:
        o = self.opts
        return LoadSpec(
            concurrency=[] if o.rates else o.concurrency,
            rates=o.rates,
            closed_loop=o.closed_loop,
            burstiness=o.burstiness,
            max_concurrency=o.max_concurrency,
            requests=o.requests if o.duration_s is None else None,
            duration_s=o.duration_s,
            warmup=o.warmup,
            input_tokens=o.input_tokens,
            output_tokens=o.output_tokens,
            mix=o.mix,
            prefix_cache=o.prefix_cache,
            shared_prefix_tokens=o.shared_prefix_tokens if o.prefix_cache == "shared-prefix" else None,
            ignore_eos=self.ignore_eos,
            chat_template_kwargs=o.chat_template_kwargs,
            seed=o.seed,
            request_timeout_s=o.request_timeout_s,
        )

    async def run(self) -> RunResult:
        """Run the benchmark and return the finished (or partial) run document.

        Raises:
            ServelabError: a request cannot fit, no tokenizer, or calibration failed (nothing
                measured yet), or the server went away mid-run (the partial run is saved first).
            asyncio.CancelledError / KeyboardInterrupt: after saving the run as partial.
        """
        o = self.opts
        if o.dataset is None:
            self._fit_shapes()
        else:  # fitted entry by entry once the template is known
            self.shapes = [(Workload(name="dataset", input_tokens=1, max_tokens=o.output_tokens), 1.0)]
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(**connection_reuse(self.endpoint.info.engine))
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as tok_session:
            tokenizer = choose_tokenizer(self.endpoint, tok_session, o.tokenizer_path)
            self.endpoint.info.tokenizer = tokenizer.name
            builder = PromptBuilder(tokenizer, seed=o.seed, lang=o.lang)
            await builder.prepare()
            self.builders = {o.lang: builder}
            for shape, _ in self.shapes:
                if shape.lang not in self.builders:
                    self.builders[shape.lang] = PromptBuilder(tokenizer, seed=o.seed, lang=shape.lang)
                    await self.builders[shape.lang].prepare()
            run = self._resume() or RunResult(
                endpoint=self.endpoint.info, load=self._load_spec(), notes=list(self.notes), recipe=o.recipe
            )
            done = {(lv.rate_rps, lv.concurrency) for lv in run.levels}
            if o.ceiling is not None:
                c = o.ceiling
                run.ceiling = CeilingInfo(model=c.spec.name, hardware=c.hardware.name, quant=c.fmt.name, context_tokens=self.decode_context)
            self.writer = RunWriter(self.run_dir, run)
            origin = time.perf_counter()
            connections = o.max_concurrency or (256 if o.rates else max(o.concurrency))
            try:
                async with StreamClient(
                    self.endpoint,
                    origin=origin,
                    connections=connections,
                    request_timeout_s=o.request_timeout_s,
                    tokenizer=tokenizer,
                ) as client:
                    if o.prefix_cache == "shared-prefix":  # built with plain counts, before the template is known
                        if o.shared_prefix_tokens + CALIBRATION_TOKENS >= o.input_tokens:
                            raise ServelabError(f"--shared-prefix-tokens {o.shared_prefix_tokens} leaves no room in --input-tokens {o.input_tokens}")
                        shared = await PromptBuilder(tokenizer, seed=o.seed + 1).build_prepared(o.shared_prefix_tokens, f"[{self.tag}-shared]")
                        self.shared_prefix = shared.text + "\n\n"
                    run.prompt_check = await self._calibrate(client, builder)
                    if o.dataset is not None:
                        await self._fit_dataset(builder, tokenizer)
                        run.notes = list(self.notes)
                    warm_prompt = await self._build(self.shapes[0][0], f"[{self.tag}]") if o.prefix_cache == "warm" else None
                    for rate in o.rates or []:
                        if (rate, o.max_concurrency or 0) not in done:
                            await self._rate_level(client, rate, warm_prompt)
                    for level in [] if o.rates else o.concurrency:
                        if (None, level) not in done:
                            await self._level(client, level, warm_prompt)
            except ServerGone as exc:
                self._conclude(run)
                self.writer.finish(complete=False, reason=str(exc))
                raise ServelabError(f"{exc}; the partial run is in {self.run_dir}") from None
            except (asyncio.CancelledError, KeyboardInterrupt):
                self.writer.finish(complete=False, reason="interrupted by the user (Ctrl-C)")
                raise
            except BaseException as exc:
                self.writer.finish(complete=False, reason=f"servelab stopped on an error: {exc}")
                raise
        self._conclude(run)
        self.writer.finish(complete=True)
        return run

    def _conclude(self, run: RunResult) -> None:
        """Read the server's startup log (when known) and diagnose the run with it."""
        log = self.opts.server_log
        if log is not None and log.is_file():
            run.boot = parse_bootlog(log.read_text(encoding="utf-8", errors="replace"))
        run.findings = diagnose(run, run.boot.cudagraph_sizes if run.boot else None)

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

    async def _calibrate(self, client: StreamClient, builder: PromptBuilder) -> PromptCheck:
        """Measure the tokens the chat template adds, then switch the builder to templated counts.

        One request with a 32-token text and ``max_tokens = 1``: the template's overhead is the
        server's ``usage.prompt_tokens`` minus the text's own tokens. If the server can count a
        templated message itself (llama.cpp, vLLM) and agrees with that usage, prompts are built
        to its exact templated count; otherwise to text + overhead.

        Raises:
            ServelabError: the calibration request failed, or the template leaves no room for text.
        """
        o = self.opts
        prompt = await builder.build(CALIBRATION_TOKENS, f"[{self.tag}-calibration]")
        rec = self._record(0, "calibration", prompt, 1)
        rec.queued = time.perf_counter() - client.origin
        body = chat_body(self.endpoint, prompt.text, max_tokens=1, ignore_eos=False, cold=True,
                         chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip
        await client.send(rec, body)
        self._on_record(rec)
        if rec.status != "ok":
            raise ServelabError(f"the first request to {self.endpoint.root} failed ({rec.error_kind}): {rec.error}")
        if rec.prompt_tokens_source != "usage":
            for b in self.builders.values():
                b.use_template(0, templated=False)
            return PromptCheck(template_overhead_tokens=0, overhead_source="unknown: the server reports no usage")
        overhead = rec.prompt_tokens - prompt.tokens
        smallest = min(shape.input_tokens for shape, _ in self.shapes)
        if o.dataset is None and overhead + CALIBRATION_TOKENS >= smallest:
            raise ServelabError(f"--input-tokens {smallest} is too small: the chat template alone adds {overhead} tokens")
        templated = await builder.tokenizer.chat_count(prompt.text, o.chat_template_kwargs) == rec.prompt_tokens
        for b in self.builders.values():
            b.use_template(overhead, templated=templated, chat_template_kwargs=o.chat_template_kwargs)
        source = "server chat-template tokenization, checked by a calibration request" if templated else "usage of a calibration request"
        return PromptCheck(template_overhead_tokens=overhead, overhead_source=source)

    def _resume(self) -> RunResult | None:
        """An earlier run of the same load in the run directory: kept with its finished levels (those
        without failures), so that rerunning an interrupted sweep measures only what is missing.

        Raises:
            ServelabError: the directory holds a run of a different load (it is never overwritten).
        """
        path = self.run_dir / "run.json"
        if not path.exists():
            return None
        try:
            earlier = RunResult.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            raise ServelabError(f"{path} is not a servelab run; use another --output") from None
        if earlier.load != self._load_spec() or earlier.endpoint.model != self.endpoint.info.model:
            raise ServelabError(f"{self.run_dir} holds a run of another load or model; use another --output")
        earlier.levels = [lv for lv in earlier.levels if not lv.failed]
        earlier.status, earlier.partial_reason = "partial", "resumed: still running"
        self.notes.append(f"resumed {self.run_dir}: {len(earlier.levels)} finished levels kept")
        earlier.notes = list(dict.fromkeys([*earlier.notes, *self.notes]))
        return earlier

    def _fit_shapes(self) -> None:
        """Keep the request shapes that fit the server's context; drop the rest of a mix with a warning.

        Raises:
            DoesNotFit: a single shape, or every shape of a mix, is too long.
        """
        shapes = self.opts.shapes()
        fitting = []
        for shape, weight in shapes:
            try:
                check_fits(self.endpoint, shape.input_tokens, shape.max_tokens)
                fitting.append((shape, weight))
            except DoesNotFit as exc:
                if len(shapes) == 1:
                    raise
                self.notes.append(f"workload {shape.name} left out of the mix: {exc}")
        if not fitting:
            raise DoesNotFit(f"no workload of the mix fits the server's context: {'; '.join(self.notes)}")
        self.shapes = fitting
        self.decode_context = round(sum(w * (s.input_tokens + s.max_tokens // 2) for s, w in fitting) / sum(w for _, w in fitting))

    async def _fit_dataset(self, builder: PromptBuilder, tokenizer: Tokenizer) -> None:
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
            if limit is not None and tokens + out > limit:
                continue
            self.dataset.append((entry.prompt, max(1, out)))
        left_out = len(o.dataset) - len(self.dataset)
        if left_out:
            self.notes.append(f"{left_out} of {len(o.dataset)} dataset prompts left out: prompt + output above the {limit}-token context")
        if not self.dataset:
            raise DoesNotFit(f"no prompt of the dataset fits the server's {limit}-token context")
        self.decode_context = round(statistics.fmean(len(p) / 4 + m / 2 for p, m in self.dataset))  # rough: ~4 characters per token

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
            rec = self._record(level, phase, prompt, shape.max_tokens)
            rec.workload = shape.name or None
            records.append(rec)
            rec.queued = time.perf_counter() - client.origin
            body = chat_body(self.endpoint, prompt.text, max_tokens=shape.max_tokens, ignore_eos=self.ignore_eos,
                             cold=o.prefix_cache == "cold", chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip
            return rec, body

        gpu = GpuSampler()
        await watch.start()
        if phase == "measured":
            gpu.start()
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
            self.server_stats = await watch.stop()
            self.gpu_stats = await gpu.stop(sum(r.output_tokens or 0 for r in records))
        return result

    async def _level(self, client: StreamClient, level: int, warm: Prompt | None) -> None:
        o = self.opts
        assert self.writer is not None
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
        summary.server = self.server_stats
        summary.gpu = self.gpu_stats
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
