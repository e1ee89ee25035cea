"""``servelab capacity``: the largest concurrency (or request rate) whose level meets every SLO."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from servelab.capacity import Capacity, predicted, search
from servelab.cli.bench import (
    DEFAULT_TURNS, ApiKeyEnvOpt, CtxSizeOpt, EndpointOpt, LlamaServerOpt, ModelOpt, ParallelOpt, TokenizerOpt, UrlOpt, _endpoint, check_traffic, measure,
    resolve_mix,
)  # fmt: skip
from servelab.cli.common import console, event_loop_runner, output_dir, parse_duration, remember, sigterm_as_sigint
from servelab.errors import ServelabError
from servelab.metrics.slo import SloResult, evaluate, parse_slo
from servelab.options import BenchOptions
from servelab.plan.calibration import calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.predict import limits_for, predict, terms
from servelab.results import load_run
from servelab.workloads.datasets import load_dataset
from servelab.workloads.sessions import parse_think_time
from servelab.workloads.traces import load_trace


def capacity_cmd(
    slo: Annotated[str, typer.Option(help="The objectives every probe must meet, e.g. ttft_p99=2s,tpot_p99=50ms (bench --slo's grammar).")],
    url: UrlOpt = None,
    model: ModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "SERVELAB_API_KEY",
    tokenizer: TokenizerOpt = None,
    open_loop: Annotated[bool, typer.Option("--open-loop/--closed-loop", help="Search request rates (open loop, Poisson) instead of streams (closed loop, the default).")] = False,
    start: Annotated[float | None, typer.Option(min=0.001, help="The first load probed (default servelab predict's estimate with --hardware, else 1).")] = None,
    repeats: Annotated[int, typer.Option(min=0, max=10, help="Extra measurements of the boundary, for its spread.")] = 2,
    input_tokens: Annotated[int, typer.Option(min=1, help="Prompt tokens per request, chat template included.")] = 256,
    output_tokens: Annotated[int, typer.Option(min=1, help="max_tokens per request.")] = 128,
    requests: Annotated[int | None, typer.Option(min=1, help="Measured requests per probe (default bench's: 8 per stream up to 512; open loop 30 s of arrivals).")] = None,
    duration: Annotated[str | None, typer.Option(help="Measured duration per probe instead, e.g. 60s (at least 3 request durations).")] = None,
    mix: Annotated[str | None, typer.Option(help="Draw requests from a weighted mix of workloads, as bench --mix.")] = None,
    workloads_file: Annotated[Path | None, typer.Option(help="YAML with your own workloads and mixes.")] = None,
    dataset: Annotated[Path | None, typer.Option(help="Prompts from a JSONL file, as bench --dataset.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware profile: predict the capacity first (start there) and name the bottleneck at the boundary.")] = None,
    model_config: Annotated[str | None, typer.Option(help="Model for the prediction (default the served name, from the catalog or the Hugging Face cache).")] = None,
    quant: Annotated[str | None, typer.Option(help="Weight format for the prediction (default bf16 or the checkpoint's own).")] = None,
    output: Annotated[Path | None, typer.Option(help="Directory of the probes, one run each; rerun with the same one to resume.")] = None,
    server_log: Annotated[Path | None, typer.Option(help="The server's live log (a file it appends to while the probes run): its boot facts, and a probe during which it compiled a kernel (JIT) is measured again.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: max_concurrency or max_rate, probes, slo, predicted.")] = False,
    parallel: ParallelOpt = 4,
    ctx_size: CtxSizeOpt = 4096,
    llama_server: LlamaServerOpt = None,
    endpoint: EndpointOpt = "chat",
    sessions: Annotated[bool, typer.Option("--sessions", help="Search the number of multi-turn sessions kept open (bench --sessions) instead of streams.")] = False,
    turns: Annotated[int | None, typer.Option(min=1, max=1000, help="--sessions: requests per session (default 4).")] = None,
    turn_input_tokens: Annotated[int | None, typer.Option(min=1, help="--sessions: text tokens of each later user message (default --input-tokens).")] = None,
    think_time: Annotated[str, typer.Option(help="--sessions: pause before each later turn (0, 2s, exp:2s).")] = "0",
    trace: Annotated[Path | None, typer.Option(help="Search the fastest replay of this trace (its time scale) that meets the SLOs (bench --trace's formats).")] = None,
    trace_format: Annotated[Literal["mooncake", "azure", "servelab"] | None, typer.Option(help="--trace format (default: from the file).")] = None,
) -> None:
    """Search the largest concurrency (or request rate, sessions, trace speed-up) whose level meets
    every SLO: predicted start, ×4 until a probe misses, bisection to 10 %, the boundary measured again."""
    sigterm_as_sigint()
    objectives = parse_slo(slo)
    if requests is not None and duration is not None:
        raise ServelabError("give either --requests or --duration, not both")
    check_traffic("sessions" if sessions else None, turns, trace, rate=None, dataset=dataset, duration=duration)
    replayed = load_trace(trace, trace_format, first=requests) if trace is not None else None  # bad lines refused before any server starts
    open_loop = open_loop or replayed is not None  # a trace's load is its speed: time scale 2 replays it twice as fast
    base = output_dir(output, "capacity")
    mix_weights, workloads = resolve_mix(mix, workloads_file)
    api_key = os.environ.get(api_key_env) or None
    with ExitStack() as stack, event_loop_runner() as runner:
        url, server, _ = _endpoint(stack, url, base, parallel, ctx_size, llama_server)
        # predict models single requests in a closed loop: no start for sessions or a trace
        guess, point = (_prediction(hardware, model_config or model, quant, objectives, input_tokens, output_tokens)
                        if hardware and not open_loop and not sessions else (None, None))  # fmt: skip

        done = [0]

        def probe(load: float) -> SloResult:
            done[0] += 1
            name = f"{done[0]:02d}-" + (f"x{load:.4g}" if replayed else f"c{int(load)}" if not open_loop else f"r{load:.4g}")
            out = base / name  # numbered in search order: a rerun with the same --output finds its finished probes again
            for done_dir in (base / f"{name}-again", out):  # a probe measured again (a JIT compile in the first) counts by its second
                if (done_dir / "run.json").is_file():
                    earlier, records = load_run(done_dir)
                    if earlier.status == "complete" and earlier.levels and (done_dir != out or not earlier.levels[0].jit_kernels):
                        lv = earlier.levels[0]
                        return lv.slo or evaluate(objectives, records, lv.request_throughput_rps, lv.output_throughput_tok_s)
            options = BenchOptions(
                concurrency=[] if open_loop else [int(load)], rates=[load] if open_loop and not replayed else None, requests=requests,
                duration_s=parse_duration(duration) if duration else None, input_tokens=input_tokens, output_tokens=output_tokens,
                mix=mix_weights, workloads=workloads, dataset=load_dataset(dataset) if dataset else None, tokenizer_path=tokenizer,
                server_log=server.log_path if server else server_log, slo=objectives, api=endpoint, sessions=sessions,
                turns=turns or (DEFAULT_TURNS if sessions else 1), turn_input_tokens=turn_input_tokens, think_time=parse_think_time(think_time),
                trace=load_trace(trace, trace_format, time_scale=load, first=requests) if replayed else None, trace_time_scale=load, warmup=0 if replayed else None,
            )  # fmt: skip
            bench, _ = runner.run(measure(url, model, api_key, options, out, server, (None, None, "bf16")))
            run, records = load_run(out)
            if run.levels and run.levels[0].jit_kernels:  # a kernel compiled inside the window: not a measurement, once more
                console.print(f"probe {escape(name)}: the server compiled {', '.join(run.levels[0].jit_kernels)} during it; measuring it again")
                out = base / f"{name}-again"
                bench, _ = runner.run(measure(url, model, api_key, options, out, server, (None, None, "bf16")))
                run, records = load_run(out)
            if not run.levels:
                raise ServelabError(f"probe {name} measured nothing ({run.partial_reason or run.status}); see {out}")
            level = run.levels[0]
            result = level.slo or evaluate(objectives, records, level.request_throughput_rps, level.output_throughput_tok_s)
            console.print(f"probe {escape(name)}: {'pass' if result.passed else 'miss'}" + (f", goodput {result.goodput_rps:.2f} req/s" if result.goodput_rps else ""))
            return result

        found = search(probe, closed_loop=not open_loop, start=start or guess or 1.0, repeats=repeats)
    remember(base)
    if json_out:
        key = "max_time_scale" if replayed else "max_sessions" if sessions else "max_rate" if open_loop else "max_concurrency"
        print(json.dumps({key: found.capacity, "converged": found.converged, "bracket": found.bracket, "spread_goodput_rps": found.spread,
                          "boundary_passes": found.boundary_passes,
                          "slo": {o.key: o.target_ms for o in objectives}, "predicted": guess, "bottleneck": point.bottleneck if point else None,
                          "probes": [p.model_dump() for p in found.probes]}, indent=1))  # fmt: skip
        return
    unit = "× trace speed" if replayed else "sessions" if sessions else "streams" if not open_loop else "req/s"
    console.print(_table(found, objectives, unit))
    console.print(_answer(found, guess, point.bottleneck if point else None, unit), soft_wrap=True)


def _prediction(hardware: str, model: str | None, quant: str | None, objectives: list, input_tokens: int, output_tokens: int) -> tuple[int | None, object]:
    """``servelab predict``'s largest concurrency within the objectives, and its point there."""
    if model is None:
        raise ServelabError("--hardware needs the model for the prediction: give --model-config (a catalog name, config.json or Hub id)")
    spec = load_model(model)
    hw = load_hardware(hardware)
    fmt = weight_format(quant, spec)
    cal = calibration(None, spec, fmt)
    limits = limits_for(spec, fmt, hw, tp=1, input_tokens=input_tokens, output_tokens=output_tokens)

    def point_at(c: int):
        return predict(terms(spec, fmt, hw, concurrency=c, input_tokens=input_tokens, output_tokens=output_tokens, limits=limits, tp=1, mode="stagger"),
                       cal, concurrency=c, output_tokens=output_tokens)  # fmt: skip

    return predicted(point_at, objectives, most=4 * limits.max_num_seqs)


def _table(found: Capacity, objectives: list, unit: str) -> Table:
    """The probes in order: load (in ``unit``), pass or miss, each objective's level percentile, goodput, attainment."""
    t = Table(title="capacity probes (" + ", ".join(f"{o.key} ≤ {o.target_ms:g} ms" for o in objectives) + ")")
    for col in ("#", unit, "SLO", *(o.key + " ms" for o in objectives), "goodput req/s", "met"):
        t.add_column(col, justify="right")
    for i, p in enumerate(found.probes, 1):
        checks = {c.key: c for c in p.slo.checks}
        t.add_row(f"{i}{' (again)' if p.repeat else ''}", f"{p.load:g}", "[green]pass[/]" if p.passed else "[red]miss[/]",
                  *(f"{checks[o.key].measured_ms:,.1f}" if checks[o.key].measured_ms is not None else "–" for o in objectives),
                  f"{p.slo.goodput_rps:,.2f}" if p.slo.goodput_rps is not None else "–", f"{p.slo.attainment:.0%}" if p.slo.attainment is not None else "–")  # fmt: skip
    return t


def _answer(found: Capacity, guess: int | None, bottleneck: str | None, unit: str) -> str:
    what = unit.removesuffix("s") if found.capacity == 1 and unit in ("streams", "sessions") else unit
    if found.capacity is None:
        return f"[red]no load meets the SLOs[/]: even {found.bracket[1]:g} {what} missed"
    lo, hi = found.bracket
    text = f"capacity: [bold]{found.capacity:g} {what}[/] (the smallest miss: {hi:g})" if hi is not None else f"capacity: at least {found.capacity:g} {what} (no probe missed)"
    if found.spread:
        passed, measured = found.boundary_passes
        text += f"; goodput at the boundary {found.spread[0]:.2f}–{found.spread[1]:.2f} req/s over {measured} measurements"
        if passed < measured:
            text += f", [yellow]{passed} of {measured} met the SLOs[/]: the boundary is within the run-to-run noise"
    if guess is not None:
        text += f"; predicted {guess} streams ({100 * (guess / found.capacity - 1):+.0f} %)" + (f", bottleneck there: {escape(bottleneck)}" if bottleneck else "")
    if not found.converged:
        text += " [yellow](not converged: see the probes)[/]"
    return text
