"""``servelab bench``: one run of a load against one endpoint, its levels sent by a load mode.

Order of work: the mode checks the load fits the server's context (before anything is sent) →
the chat template's overhead is measured with one calibration request → for each level the mode
sends its warm-up requests (recorded, not counted), then its measured ones → a summary per level.
Records are appended as they complete; ``run.json`` is rewritten after each level and says
``partial`` until the end. The run's state is :class:`~servelab.run.levels.Levels`; how its load is
sent is a :class:`~servelab.run.mode.LoadMode`, the first of :data:`MODES` that applies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from servelab import engines
from servelab.errors import ServelabError
from servelab.load.client import StreamClient
from servelab.load.ray_workers import RayBackend
from servelab.load.scheduler import ServerGone
from servelab.load.workers import WorkerPool, auto_procs
from servelab.metrics.bootlog import parse_bootlog
from servelab.rules.diagnose import diagnose
from servelab.run.closed_loop import ClosedLoop
from servelab.load import apis
from servelab.load.body import request_body
from servelab.run.levels import CALIBRATION_TOKENS, Levels
from servelab.run.mode import LoadMode
from servelab.run.open_loop import OpenLoop
from servelab.run.options import BenchHooks, BenchOptions
from servelab.run.replay import TraceReplay
from servelab.run.sessions import Sessions
from servelab.server.endpoint import Endpoint
from servelab.server.tokenizer import LocalTokenizer, ServerTokenizer, Tokenizer
from servelab.store.results import CeilingInfo, LoadSpec, PromptCheck, RunResult, levels_to_run, resume_run, run_lock
from servelab.workloads.corpus import PromptBuilder
from servelab.guards.files import head_text

CALIBRATION_ATTEMPTS = 3  # tries of the calibration request before the server counts as unusable
MODES: tuple[type[LoadMode], ...] = (TraceReplay, Sessions, OpenLoop, ClosedLoop)  # the first that applies sends the run's load


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
    """One ``servelab bench`` run against a discovered endpoint (module docstring), resuming a run
    directory: its levels (:class:`Levels`) sent by the load mode the options ask for (:data:`MODES`).

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
        self.endpoint = endpoint
        self.opts = options
        self.run_dir = run_dir
        self.levels = Levels(endpoint, options, hooks, alive)
        self.mode = next(mode for mode in MODES if mode.applies(options))()

    def _load_spec(self) -> LoadSpec:
        o = self.opts
        return LoadSpec(
            concurrency=[] if o.rates or o.trace else o.concurrency,  # an open loop or a trace has no closed-loop levels
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
            ignore_eos=self.levels.ignore_eos,
            chat_template_kwargs=o.chat_template_kwargs,
            seed=o.seed,
            request_timeout_s=o.request_timeout_s,
            slo=o.slo,
            endpoint=o.api,
            sessions=o.session_mode,
            turns=o.turns,
            turn_input_tokens=o.turn_input_tokens,
            think_time=o.think_time.label() if o.session_mode else None,
            trace=self.mode.trace_info,
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
        self.mode.fit(self.levels)
        with run_lock(self.run_dir):
            return await self._run()

    def _open(self) -> RunResult:
        """The run document: the one in the run directory when it holds this load's unfinished run
        (its records numbered on from its last one), else a new one."""
        lv = self.levels
        resumed = resume_run(self.run_dir, self._load_spec(), self.endpoint.info.model, lv.notes)
        run, next_index = resumed if resumed is not None else (RunResult(endpoint=self.endpoint.info, load=self._load_spec(), settings=self.opts.settings,
                                                                        notes=list(lv.notes), recipe=self.opts.recipe), 0)  # fmt: skip
        if (c := self.opts.ceiling) is not None:
            run.ceiling = CeilingInfo(model=c.spec.name, hardware=c.hardware.name, quant=c.fmt.name, context_tokens=lv.decode_context)
        lv.start(self.run_dir, run, next_index)
        return run

    def _client(self, run: RunResult, tokenizer: Tokenizer) -> StreamClient | WorkerPool:
        """The client streaming the requests: in this process, or in worker processes or Ray actors
        (``--client-procs``, ``--ray``; by default one process per 256 streams)."""
        o = self.opts
        origin = time.perf_counter()
        connections = o.max_concurrency or (256 if o.rates or o.trace else max(o.concurrency))
        procs = o.client_procs or (None if o.ray_address else auto_procs(connections))
        if procs == 1 and o.ray_address is None:
            return StreamClient(self.endpoint, origin=origin, connections=connections, request_timeout_s=o.request_timeout_s, tokenizer=tokenizer, api=o.api)
        backend = RayBackend(o.ray_address) if o.ray_address is not None else None
        return WorkerPool(self.endpoint, origin=origin, connections=connections, request_timeout_s=o.request_timeout_s,
                          procs=procs, tokenizer=tokenizer, on_note=run.notes.append, backend=backend, api=o.api)  # fmt: skip

    async def _run(self) -> RunResult:
        o, lv = self.opts, self.levels
        connector = aiohttp.TCPConnector(**engines.get(self.endpoint.info.engine).connector_options())
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), connector=connector) as tok_session:
            tokenizer = choose_tokenizer(self.endpoint, tok_session, o.tokenizer_path)
            self.endpoint.info.tokenizer = tokenizer.name
            builder = await lv.prepare(tokenizer)
            run = self._open()
            asked = self.mode.asked(o)
            todo = levels_to_run(asked, run.levels)
            client = self._client(run, tokenizer)
            try:
                async with client:
                    run.environment.client_procs = client.procs if isinstance(client, WorkerPool) else 1
                    await lv.share_prefix(tokenizer)
                    run.prompt_check = await self._calibrate(client, builder)
                    if o.dataset is not None:
                        await lv.fit_dataset(builder, tokenizer)
                        run.notes = list(lv.notes)
                    await lv.build_warm()
                    if todo:
                        await self.mode.prepare(lv, tokenizer)
                    for i in todo:
                        await self.mode.run(lv, client, *asked[i])
            except ServerGone as exc:  # what ran is kept and summarised: a partial run, not an error
                lv.save_cut_level()
                self._conclude(run)
                lv.writer.finish(complete=False, reason=str(exc))
                return run
            except (asyncio.CancelledError, KeyboardInterrupt):
                lv.save_cut_level()
                lv.writer.finish(complete=False, reason="interrupted by the user (Ctrl-C)")
                raise
            except BaseException as exc:
                lv.writer.finish(complete=False, reason=f"servelab stopped on an error: {exc}")
                raise
        self._conclude(run)
        lv.writer.finish(complete=True)
        return run

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
        o, lv = self.opts, self.levels
        prompt = await builder.build(CALIBRATION_TOKENS, f"[{lv.tag}-calibration]")
        body = request_body(self.endpoint, prompt, max_tokens=1, ignore_eos=False, cold=True, api=o.api,
                            chat_template_kwargs=o.chat_template_kwargs)  # fmt: skip
        for _ in range(CALIBRATION_ATTEMPTS):  # a server that drops one request is not unusable
            rec = lv.record(0, "calibration", prompt.tokens, 1)
            rec.queued = time.perf_counter() - client.origin
            await client.send(rec, body)
            lv.on_record(rec)
            if rec.status == "ok" or (rec.error_kind.startswith("http_4") and rec.error_kind != "http_429"):
                break  # done, or a request the server refuses (it would refuse it again)
        if rec.status != "ok":
            raise ServelabError(f"the first request to {self.endpoint.info.url} failed ({rec.error_kind}): {rec.error}")
        if rec.prompt_tokens_source != "usage":
            for b in lv.builders.values():
                b.use_template(0, templated=False)
            return PromptCheck(template_overhead_tokens=0, overhead_source="unknown: the server reports no usage")
        overhead = rec.prompt_tokens - prompt.tokens
        singles = [shape.input_tokens for shape, _ in lv.shapes if not shape.multi_turn]
        smallest = min(singles) if singles and o.dataset is None and o.trace is None else None
        if smallest is not None and overhead + CALIBRATION_TOKENS >= smallest:
            raise ServelabError(f"--input-tokens {smallest} is too small: the chat template alone adds {overhead} tokens")
        # the completions API applies no template: its overhead is the special tokens the server adds (BOS; none to token ids)
        templated = apis.get(o.api).templated and await builder.tokenizer.chat_count(prompt.text, o.chat_template_kwargs) == rec.prompt_tokens
        for b in lv.builders.values():
            b.use_template(overhead, templated=templated, chat_template_kwargs=o.chat_template_kwargs)
        source = "server chat-template tokenization, checked by a calibration request" if templated else "usage of a calibration request"
        if not apis.get(o.api).templated:
            source = f"usage of a calibration request ({o.api} API: no chat template, the server's special tokens)"
        return PromptCheck(template_overhead_tokens=overhead, overhead_source=source)

    def _conclude(self, run: RunResult) -> None:
        """Read the server's startup log (when known) and diagnose the run with it."""
        log = self.opts.server_log
        if log is not None and log.is_file():
            run.boot = parse_bootlog(head_text(log, "--server-log"))  # its first 64 MiB: a boot log is at the start
        run.findings = diagnose(run, run.boot.cudagraph_sizes if run.boot else None)
