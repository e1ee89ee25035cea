"""One measurement: a :class:`~servelab.settings.Load` sent to a :class:`~servelab.settings.Target`,
its run returned in memory (and written to its run directory as it goes: ``run.json``, records).

``bench``, ``suite``, ``grid``, ``sweep`` and ``capacity``'s probes all measure through here; the CLI
only parses, calls and renders. Order: the load is resolved before any server starts
(:func:`bench_options`: files read, defaults filled, levels repeated), the target is served
(:func:`serve`: a URL as given, or the embedded server started for the caller's ``ExitStack``), then
:func:`measure` discovers the server, puts the roofline beside it (:func:`ceiling`) and runs the
levels (:class:`servelab.run.bench.Bench`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path

from servelab import engines
from servelab.run.bench import Bench
from servelab.server.endpoint import Endpoint, discover
from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.server.liveness import Liveness
from servelab.server.local import LocalServer
from servelab.run.options import BenchHooks, BenchOptions, Ceiling
from servelab.plan.checkpoint import weight_format
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.store.results import RecipeInfo, RunResult, default_run_dir
from servelab.settings import Load, Target
from servelab.workloads.datasets import load_dataset
from servelab.workloads.sessions import parse_think_time
from servelab.workloads.suites import Workload, load_workloads, read_workload_file, with_builtins
from servelab.workloads.traces import load_trace

DEFAULT_TURNS = 4  # --sessions without --turns
EMBEDDED_MODEL = "gemma-3-270m"  # the embedded server's model and weight format, for its roofline
EMBEDDED_QUANT = "gguf-q4_k_m"


@dataclass
class Served:
    """A target being served: its ``url``, the server servelab started for it (None for a URL the
    user gave), and the run directory its log decided (None: decided after discovery)."""

    url: str
    server: LocalServer | RecipeServer | None
    run_dir: Path | None

    @property
    def embedded(self) -> bool:
        """The embedded llama.cpp server (its first-look load defaults and its roofline)."""
        return isinstance(self.server, LocalServer)

    @property
    def log(self) -> Path | None:
        """The log of a server servelab started (a live log: boot facts and JIT compiles)."""
        return self.server.log_path if self.server is not None else None


def serve(stack: ExitStack, target: Target, run_dir: Path | None, starting: Callable[[str], AbstractContextManager]) -> Served:
    """The target's URL, or the embedded server started for the duration of ``stack`` (its log in
    the run directory, which is then decided here); ``starting(message)`` is shown while it starts.

    Raises:
        ServelabError: the embedded server cannot start (its reason).
    """
    if target.url is not None:
        return Served(target.url, None, run_dir)
    run_dir = run_dir or default_run_dir("gemma-3-270m-local")
    server = LocalServer(run_dir / "server.log", parallel=target.parallel, ctx_size=target.ctx_size, llama_server=target.llama_server)
    with starting(f"starting the embedded server (Gemma 3 270M, {server.backend})…"):
        stack.enter_context(server)
    return Served(server.url, server, run_dir)


def resolve_mix(mix: str | None, workloads_file: Path | None) -> tuple[dict[str, float] | None, dict[str, Workload] | None]:
    """``--mix`` → (weights, workloads): a built-in or ``--workloads-file`` mix by name, or a YAML file
    holding exactly one mix.

    Raises:
        ServelabError: unknown mix, or a file with no or several mixes.
    """
    if mix is None:
        return None, None
    if Path(mix).is_file():
        parsed = read_workload_file(Path(mix), "--mix")
        if len(parsed.mixes) != 1:
            raise ServelabError(f"--mix {mix}: the file defines {len(parsed.mixes)} mixes; name one with --mix NAME --workloads-file {mix}")
        workloads, _ = with_builtins(parsed)
        return next(iter(parsed.mixes.values())), workloads
    workloads, mixes = load_workloads(workloads_file)
    if mix not in mixes:
        raise ServelabError(f"--mix {mix!r}: unknown; known: {', '.join(mixes)}")
    return mixes[mix], workloads


def bench_options(load: Load, embedded: bool, *, first_look: bool = False, recipe: RecipeInfo | None = None) -> BenchOptions:
    """The load resolved for its levels, before any server starts: files read (mix, dataset, trace),
    the target's defaults filled (:meth:`Load.for_target`; with ``first_look``, bench's 4 requests
    and one warm-up a level on the ``embedded`` server), levels repeated ``repeats`` times,
    sessions and traces set up. The server's log is set by :func:`measure`.

    Raises:
        ServelabError: settings that contradict each other (:attr:`Load.traffic`), or a file that
            cannot be read.
    """
    traffic = load.traffic
    load = load.for_target(embedded)
    requests, warmup = load.requests, load.warmup
    if first_look and embedded:  # bench's first look on the embedded server: 4 requests a level, one warm-up
        requests = 4 if requests is None and load.duration_s is None and traffic != "trace" else requests
        warmup = 1 if warmup is None else warmup
    mix_weights, workloads = resolve_mix(load.mix, load.workloads_file)
    trace = load_trace(load.trace, load.trace_format, time_scale=load.time_scale, skip_bad=load.skip_bad, first=requests) if traffic == "trace" else None
    return BenchOptions(
        concurrency=[c for c in load.streams() for _ in range(load.repeats)],
        mix=mix_weights,
        workloads=workloads,
        dataset=load_dataset(load.dataset) if load.dataset else None,
        rates=[r for r in load.rates for _ in range(load.repeats)] if load.rates else None,
        closed_loop=load.closed_loop,
        burstiness=load.burstiness,
        max_concurrency=load.max_concurrency,
        requests=requests,
        duration_s=load.duration_s,
        input_tokens=load.input_tokens,
        output_tokens=load.output_tokens,
        output_spread=load.output_spread,
        prefix_cache=load.prefix_cache,
        shared_prefix_tokens=load.shared_prefix_tokens,
        ignore_eos=load.ignore_eos,
        chat_template_kwargs=load.chat_template_kwargs,
        seed=load.seed,
        request_timeout_s=load.request_timeout_s,
        client_procs=load.client_procs,
        ray_address=load.ray,
        tokenizer_path=load.tokenizer,
        slo=load.slo,
        api=load.endpoint,
        sessions=traffic == "sessions",
        turns=load.turns or (DEFAULT_TURNS if traffic == "sessions" else 1),
        turn_input_tokens=load.turn_input_tokens,
        think_time=parse_think_time(load.think_time),
        trace=trace,
        trace_time_scale=load.time_scale,
        warmup=0 if traffic == "trace" else warmup,
        recipe=recipe,
        settings=load.model_dump(mode="json"),
    )


def ceiling(target: Target, endpoint: Endpoint, embedded: bool, warn: Callable[[str], None]) -> Ceiling | None:
    """The roofline to compare with, when ``target.hardware`` is given (model from ``--model-config``
    or the served name looked up in the catalog; the embedded server's own model and format), checked
    against the served model's hidden size where the server gives it (llama.cpp). What leaves no
    ceiling without being an error is passed to ``warn``.

    Raises:
        ServelabError: ``--model-config`` cannot be read, or describes another model than the one served."""
    if target.hardware is None:
        return None
    hw = load_hardware(target.hardware)
    served = endpoint.info.model
    given = target.roofline_model or (EMBEDDED_MODEL if embedded else None)
    try:
        spec = load_model(given or served, online=given is not None)
    except ServelabError:
        if given:
            raise
        warn(f"no % of ceiling: {served!r} is neither in the model catalog nor in the Hugging Face cache; pass --model-config NAME|config.json|org/name")
        return None
    if endpoint.hidden_size and endpoint.hidden_size != spec.hidden_size:  # a ceiling, and explain, of another model than the one measured
        where = f"--model-config {given}" if given else f"the catalog's {spec.name} (found by the served name)"
        message = (f"{where} has hidden size {spec.hidden_size:,}, but the served model {served} has {endpoint.hidden_size:,} (its /v1/models card): "
                   "the ceiling would be another model's; give the served model's config.json with --model-config")  # fmt: skip
        if given:
            raise ServelabError(message)
        warn(f"no % of ceiling: {message}")
        return None
    return Ceiling(spec, weight_format(target.quant or (EMBEDDED_QUANT if embedded else None), spec), hw)


async def measure(
    served: Served, target: Target, options: BenchOptions, run_dir: Path | None, hooks: BenchHooks, warn: Callable[[str], None], api_key_env: str
) -> tuple[RunResult, Path]:
    """Discover the served target, run ``options`` against it and return the run (finished, or
    partial when the server went away) and its run directory (``run_dir``, or a new one named after
    the served model). The server's log is the one servelab started it with, else ``--server-log``.
    The API key is read from ``api_key_env`` here and never stored.

    Raises:
        ServelabError: an unusable server, a request that cannot fit, or a roofline of another model.
        KeyboardInterrupt / asyncio.CancelledError: after the partial run is saved.
    """
    api_key = os.environ.get(api_key_env) or None
    endpoint = await discover(served.url, target.model, api_key, embedded=served.server is not None)
    if served.embedded:  # the wheel's build reports no version of its own ("b0-unknown")
        endpoint.info.engine_version = f"{endpoint.info.engine_version} ({served.server.backend})"
    options.ceiling = ceiling(target, endpoint, served.embedded, warn)
    options.server_log = served.log or target.server_log
    run_dir = run_dir or default_run_dir(endpoint.info.model.rsplit("/", 1)[-1])
    if served.server is not None:
        server = served.server

        async def alive() -> bool:
            return server.alive()
    else:
        alive = Liveness(endpoint.root, engines.get(endpoint.info.engine).ready_path)
    bench = Bench(endpoint, options, run_dir, hooks, alive)
    return await bench.run(), run_dir
