"""``servelab bench``: closed-loop load at each concurrency level against one endpoint.

Order of work: check every request fits the context (before anything is sent) → measure the chat
template's overhead with one calibration request → for each level: warm-up requests (recorded,
not counted), then the measured requests → summary per level. Records are appended as they
complete; ``run.json`` is rewritten after each level and says ``partial`` until the end.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from servelab import engines
from servelab.rules.diagnose import diagnose
from servelab.server.endpoint import Endpoint
from servelab.errors import ServelabError
from servelab.run.levels import LevelRunner
from servelab.load.body import request_body
from servelab.load.client import StreamClient
from servelab.load.ray_workers import RayBackend
from servelab.load.scheduler import ServerGone
from servelab.load.workers import WorkerPool, auto_procs
from servelab.metrics.bootlog import parse_bootlog
from servelab.run.options import BenchHooks, BenchOptions
from servelab.run.replay import TracePrompts
from servelab.store.results import CeilingInfo, LoadSpec, PromptCheck, RunResult, RunWriter, TraceInfo, levels_to_run, resume_run, run_lock
from servelab.run.sessions import SessionPlayer
from servelab.server.tokenizer import LocalTokenizer, ServerTokenizer, Tokenizer
from servelab.workloads.corpus import Prompt, PromptBuilder
from servelab.workloads.suites import Workload
from servelab.workloads.traces import Trace

CALIBRATION_TOKENS = 32
CALIBRATION_ATTEMPTS = 3  # tries of the calibration request before the server counts as unusable


class DoesNotFit(ServelabError):
    """A request of the asked size cannot fit the server's context (nothing was sent)."""


def check_fits(endpoint: Endpoint, input_tokens: int, output_tokens: int) -> None:
    """Refuse, before anything is sent, a request that cannot fit the server's context.

    Raises:
        DoesNotFit: ``input_tokens + output_tokens`` exceeds the context per request.
    """
    limit = endpoint.info.max_model_len
    if limit is not None and input_tokens + output_tokens > limit:
        where = engines.get(endpoint.info.engine).context_limit
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


class Bench(LevelRunner):
    """One ``servelab bench`` run against a discovered endpoint: fit the shapes, calibrate the chat
    template, then run each level (:class:`servelab.run.levels.LevelRunner`), resuming a run directory.

    Args:
        endpoint: the server.
        options: the load to run.
        run_dir: where the run is written.
        hooks: progress callbacks.
        alive: asked after connection failures; False ends the run as partial.
    """

    def __init__(
        self, endpoint: Endpoint, options: BenchOptions, run_dir: Path, hooks: BenchHooks, alive: Callable[[], Awaitable[bool]]
    ) -> None:
        super().__init__(endpoint, options, hooks, alive)
        self.run_dir = run_dir
        self.trace: Trace | None = None  # --trace: the trace replayed, every request of it
        self.trace_info: TraceInfo | None = None

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
            output_spread=o.output_spread,
            mix=o.mix,
            prefix_cache=o.prefix_cache,
            shared_prefix_tokens=o.shared_prefix_tokens if o.prefix_cache == "shared-prefix" else None,
            ignore_eos=self.ignore_eos,
            chat_template_kwargs=o.chat_template_kwargs,
            seed=o.seed,
            request_timeout_s=o.request_timeout_s,
            slo=o.slo,
            endpoint=o.api,
            sessions=o.session_mode,
            turns=o.turns,
            turn_input_tokens=o.turn_input_tokens,
            think_time=o.think_time.label() if o.session_mode else None,
            trace=self.trace_info,
        )

    async def run(self) -> RunResult:
        """Run the benchmark and return the finished (or partial) run document, holding the run
        directory's lock (:func:`servelab.store.results.run_lock`) throughout.

        A server that goes away mid-run ends it as ``partial`` (its reason in ``partial_reason``);
        the level it cut short is summarised and marked ``cut_short``.

        Raises:
            ServelabError: a request cannot fit, no tokenizer, or calibration failed (nothing
                measured yet).
            asyncio.CancelledError / KeyboardInterrupt: after saving the run as partial.
        """
        if self.opts.trace is not None:
            self._fit_trace()
        elif self.opts.dataset is None:
            self._fit_shapes()
        else:  # fitted entry by entry once the template is known
            self.shapes = [(Workload(name="dataset", input_tokens=1, max_tokens=self.opts.output_tokens), 1.0)]
        with run_lock(self.run_dir):
            return await self._run()

    async def _run(self) -> RunResult:
        o = self.opts
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(**engines.get(self.endpoint.info.engine).connector_options())
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
            resumed = resume_run(self.run_dir, self._load_spec(), self.endpoint.info.model, self.notes)
            if resumed is not None:
                run, self._index = resumed
            else:
                run = RunResult(endpoint=self.endpoint.info, load=self._load_spec(), settings=o.settings, notes=list(self.notes), recipe=o.recipe)
            if self.trace is not None:
                asked = [(self.trace.rate_rps, 0)]
            elif o.rates:
                asked = [(rate, o.max_concurrency or 0) for rate in o.rates]
            else:
                asked = [(None, c) for c in o.concurrency]
            todo = levels_to_run(asked, run.levels)
            if o.ceiling is not None:
                c = o.ceiling
                run.ceiling = CeilingInfo(model=c.spec.name, hardware=c.hardware.name, quant=c.fmt.name, context_tokens=self.decode_context)
            self.writer = RunWriter(self.run_dir, run)
            origin = time.perf_counter()
            connections = o.max_concurrency or (256 if o.rates or self.trace else max(o.concurrency))
            procs = o.client_procs or (None if o.ray_address else auto_procs(connections))
            if procs == 1 and o.ray_address is None:
                client = StreamClient(self.endpoint, origin=origin, connections=connections, request_timeout_s=o.request_timeout_s, tokenizer=tokenizer,
                                      api=o.api)  # fmt: skip
            else:
                backend = RayBackend(o.ray_address) if o.ray_address is not None else None
                client = WorkerPool(self.endpoint, origin=origin, connections=connections, request_timeout_s=o.request_timeout_s,
                                    procs=procs, tokenizer=tokenizer, on_note=run.notes.append, backend=backend, api=o.api)  # fmt: skip
            try:
                async with client:
                    run.environment.client_procs = client.procs if isinstance(client, WorkerPool) else 1
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
                    trace_prompts = await self._trace_prompts(builder) if self.trace is not None and todo else []
                    if o.session_mode:
                        await self._start_sessions(tokenizer)
                    for i in todo:
                        rate, level = asked[i]
                        if self.trace is not None:
                            await self._trace_level(client, self.trace, trace_prompts)
                        elif o.session_mode:
                            await self._session_level(client, level)
                        elif rate is not None:
                            await self._rate_level(client, rate, warm_prompt)
                        else:
                            await self._level(client, level, warm_prompt)
            except ServerGone as exc:  # what ran is kept and summarised: a partial run, not an error
                self.save_cut_level()
                self._conclude(run)
                self.writer.finish(complete=False, reason=str(exc))
                return run
            except (asyncio.CancelledError, KeyboardInterrupt):
                self.save_cut_level()
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

    async def _calibrate(self, client: StreamClient, builder: PromptBuilder) -> PromptCheck:
        """Measure the tokens the chat template adds, then switch the builder to templated counts.

        One request with a 32-token text and ``max_tokens = 1`` (tried up to 3 times, unless the
        server refuses the request itself with a 4xx): the template's overhead is the
        server's ``usage.prompt_tokens`` minus the text's own tokens. If the server can count a
        templated message itself (llama.cpp, vLLM) and agrees with that usage, prompts are built
        to its exact templated count; otherwise to text + overhead.

        Raises:
            ServelabError: the calibration request failed every time, or the template leaves no room for text.
        """
        o = self.opts
        prompt = await builder.build(CALIBRATION_TOKENS, f"[{self.tag}-calibration]")
        body = request_body(self.endpoint, prompt.text, max_tokens=1, ignore_eos=False, cold=True, api=o.api,
                            chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip
        for _ in range(CALIBRATION_ATTEMPTS):  # a server that drops one request is not unusable
            rec = self._record(0, "calibration", prompt.tokens, 1)
            rec.queued = time.perf_counter() - client.origin
            await client.send(rec, body)
            self._on_record(rec)
            if rec.status == "ok" or (rec.error_kind.startswith("http_4") and rec.error_kind != "http_429"):
                break  # done, or a request the server refuses (it would refuse it again)
        if rec.status != "ok":
            raise ServelabError(f"the first request to {self.endpoint.info.url} failed ({rec.error_kind}): {rec.error}")
        if rec.prompt_tokens_source != "usage":
            for b in self.builders.values():
                b.use_template(0, templated=False)
            return PromptCheck(template_overhead_tokens=0, overhead_source="unknown: the server reports no usage")
        overhead = rec.prompt_tokens - prompt.tokens
        singles = [shape.input_tokens for shape, _ in self.shapes if not shape.multi_turn]
        smallest = min(singles) if singles and o.dataset is None and o.trace is None else None
        if smallest is not None and overhead + CALIBRATION_TOKENS >= smallest:
            raise ServelabError(f"--input-tokens {smallest} is too small: the chat template alone adds {overhead} tokens")
        # the completions API applies no template: its overhead is the special tokens the server adds (BOS)
        templated = o.api == "chat" and await builder.tokenizer.chat_count(prompt.text, o.chat_template_kwargs) == rec.prompt_tokens
        for b in self.builders.values():
            b.use_template(overhead, templated=templated, chat_template_kwargs=o.chat_template_kwargs)
        source = "server chat-template tokenization, checked by a calibration request" if templated else "usage of a calibration request"
        if o.api == "completions":
            source = "usage of a calibration request (completions API: no chat template, the server's special tokens)"
        return PromptCheck(template_overhead_tokens=overhead, overhead_source=source)

    def _fit_trace(self) -> None:
        """Replay every request of the trace, those longer than the server's context too: a trace is
        the user's traffic, and a request it holds that this server cannot take is one its users would
        see fail, so it is sent at its time and counted (the server refuses or cuts it), never left out;
        how many there were goes in the run (``TraceInfo.over_context``, finding ``trace_over_context``).
        A prompt longer than the context on its own is built to the context + 1 tokens: the server
        refuses it alike, and a trace's outlier of millions of tokens costs no such prompt.

        Raises:
            DoesNotFit: no request fits (nothing to measure).
        """
        trace = self.opts.trace
        limit = self.endpoint.info.max_model_len
        fitting = [r for r in trace.requests if limit is None or r.input_tokens + r.output_tokens <= limit]
        if not fitting:
            raise DoesNotFit(f"no request of the trace fits the server's {limit}-token context")
        sent = [r if limit is None or r.input_tokens <= limit else r.model_copy(update={"input_tokens": limit + 1}) for r in trace.requests]
        self.trace = Trace(trace.path, trace.format, sent, trace.skipped_lines)
        self.shapes = [(Workload(name="trace", input_tokens=min(r.input_tokens for r in fitting), max_tokens=1), 1.0)]
        self.decode_context = round(statistics.fmean(r.input_tokens + r.output_tokens / 2 for r in fitting))
        self.trace_info = TraceInfo(file=trace.path.name, format=trace.format, time_scale=self.opts.trace_time_scale, requests=len(trace.requests),
                                    skipped_lines=trace.skipped_lines, duration_s=trace.duration_s, prefix_share=trace.prefix_share(),
                                    over_context=len(trace.requests) - len(fitting), context_tokens=limit)  # fmt: skip

    async def _trace_prompts(self, builder: PromptBuilder) -> list[Prompt]:
        """The trace's prompts, built before the replay (servelab.run.replay), with a progress bar; the
        mean deviation of their lengths from the trace's goes in the run's prompt check."""
        assert self.trace is not None and self.writer is not None
        self.hooks.phase_started(0, "building prompts", len(self.trace.requests), None)
        prompts = await TracePrompts(builder, self.tag, self.opts.seed).build(self.trace, self.hooks.prompt_built)
        if (check := self.writer.run.prompt_check) is not None:
            check.trace_deviation_tokens = statistics.fmean(abs(p.tokens - r.input_tokens) for p, r in zip(prompts, self.trace.requests, strict=True))
        return prompts

    async def _start_sessions(self, tokenizer: Tokenizer) -> None:
        """Set up the session player: bare-text builders per corpus language (servelab.run.sessions)."""
        plain = {}
        for lang in {shape.lang for shape, _ in self.shapes}:
            plain[lang] = PromptBuilder(tokenizer, seed=self.opts.seed + 2, lang=lang)
            await plain[lang].prepare()
        self.player = SessionPlayer(self.endpoint, self.opts, tokenizer, plain, self.tag, self._record, self._build, self._body)

    def _fit_shapes(self) -> None:
        """Keep the request shapes that fit the server's context; drop the rest of a mix with a warning.

        Raises:
            DoesNotFit: a single shape, or every shape of a mix, is too long.
        """
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
            if limit is not None and tokens + o.output_range(out)[1] > limit:
                continue
            self.dataset.append((entry.prompt, max(1, out)))
        left_out = len(o.dataset) - len(self.dataset)
        if left_out:
            self.notes.append(f"{left_out} of {len(o.dataset)} dataset prompts left out: prompt + output above the {limit}-token context")
        if not self.dataset:
            raise DoesNotFit(f"no prompt of the dataset fits the server's {limit}-token context")
        self.decode_context = round(statistics.fmean(len(p) / 4 + m / 2 for p, m in self.dataset))  # rough: ~4 characters per token
