"""``servelab predict``: a closed-loop curve before launching anything (``servelab.plan.predict``);
``servelab explain RUN``: a measured run beside it (``servelab.rules.explain``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from servelab.cli.common import console, read_model, write_file
from servelab.settings import parse_float_list, parse_int_list
from servelab.engines import plan_engine
from servelab.engines.cudagraph import prompt_step_graph
from servelab.errors import ServelabError
from servelab.rules.explain import explain, repeatability
from servelab.plan.band import Band, band_for, point_band
from servelab.plan.calibration import calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.drafter import parse_drafter
from servelab.plan.hardware import load_hardware, profiles
from servelab.plan.model_spec import load_model
from servelab.plan.curves import PredictedLoad, price
from servelab.plan.planner import moe_kernel_case
from servelab.plan.cohorts import HOST_SHARE
from servelab.plan.predict import NO_GRAPH, Point
from servelab.plan.rate import RatePoint
from servelab.report import plots
from servelab.report.explain_table import explain_table, repeat_table
from servelab.store.results import RunResult, read_document
from servelab.guards import jsonfile

ASSUMPTIONS = ("no prefix-cache hits, acceptance not falling with the batch, the drafter's time per step of the calibration, "
               "TP all-reduce at the profile's estimated latency (not measured), vLLM's asynchronous scheduling, "
               "a fixed time per layer per step, "
               "bursts of 2 requests per stream (vllm bench serve --num-prompts 2C) and batches of 1 (a servelab grid cell, a llama-benchy batch), "
               "each priced as the steady state with speculative decoding")
VARY_KEYS = {"quant": str, "tp": int, "draft-tokens": int, "acceptance": float, "max-num-seqs": int, "max-num-batched-tokens": int, "routing": float,
             "max-capture-size": int}  # fmt: skip
VARY_MIN = {"tp": 1, "draft-tokens": 0, "acceptance": 0, "max-num-seqs": 1, "max-num-batched-tokens": 1, "routing": 0.1, "max-capture-size": 1}


def _assumptions(routing: float) -> str:
    """The assumptions of a prediction, its MoE routing first, the plan engine's kernel pricing (``Engine.pricing``) last."""
    moe = "uniform MoE routing" if routing == 1 else f"MoE tokens sharing experts as B^{routing:g} independent ones would (--routing {routing:g})"
    pricing = plan_engine().pricing
    return f"{moe}, {ASSUMPTIONS}" + (f", {pricing}" if pricing else "")


def _variants(vary: list[str], base: dict) -> list[dict]:
    """The settings of each ``--vary KEY=V1,V2`` combination (the first value of each first).

    Raises:
        ServelabError: an unknown key or a value of the wrong type.
    """
    out = [dict(base)]
    for item in vary:
        key, _, values = item.partition("=")
        if key not in VARY_KEYS or not values:
            raise ServelabError(f"--vary {item!r}: give KEY=V1,V2 with KEY one of {', '.join(VARY_KEYS)}")
        try:
            parsed = [VARY_KEYS[key](v) for v in values.split(",")]
        except ValueError:
            raise ServelabError(f"--vary {item!r}: {key} takes {VARY_KEYS[key].__name__} values") from None
        if key in VARY_MIN and min(parsed) < VARY_MIN[key]:
            raise ServelabError(f"--vary {item!r}: {key} takes values of {VARY_MIN[key]:g} or more")
        out = [{**o, key: v} for o in out for v in parsed]
    return out


def predict_cmd(
    model: Annotated[str, typer.Option(help="A config.json or its directory, a catalog name (qwen3-8b, gpt-oss-120b …), or a Hugging Face Hub id (org/name; the local cache first).")],
    revision: Annotated[str | None, typer.Option(help="The Hub id's branch, tag or commit (default main).")] = None,
    hardware: Annotated[str, typer.Option(help="Profile name (h100-sxm, h200, dgx-spark …) or a YAML file.")] = "h100-sxm",
    quant: Annotated[str | None, typer.Option(help="Weight format (default bf16, or the checkpoint's own; a catalog model's published checkpoint of that format where there is one).")] = None,
    checkpoint_config: Annotated[Path | None, typer.Option(help="Another checkpoint than the published one: its config.json (quantization_config) or its directory.")] = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel size.")] = 1,
    concurrency: Annotated[str, typer.Option(help="Closed-loop streams, e.g. 1,8,64,256.")] = "1,4,16,64,256",
    rate: Annotated[str | None, typer.Option(help="Open loop instead: arrival rates in requests/s, e.g. 0.5,2,8 (requests in flight by Little's law; a rate above what the server completes is 'saturated').")] = None,
    input_tokens: Annotated[int, typer.Option(min=1, help="Prompt tokens per request.")] = 1024,
    output_tokens: Annotated[int, typer.Option(min=2, help="Output tokens per request.")] = 256,
    max_num_seqs: Annotated[int | None, typer.Option(min=1, help="The server's max_num_seqs (default vLLM's for the hardware).")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(min=1, help="The server's max_num_batched_tokens (default vLLM's for the hardware).")] = None,
    capture_sizes: Annotated[str | None, typer.Option(help="The server's CUDA-graph capture sizes (default vLLM's).")] = None,
    max_capture_size: Annotated[int | None, typer.Option(min=1, help="The server's largest CUDA-graph capture size, vLLM's capture sizes up to it (vLLM --max-cudagraph-capture-size; default 512 on an H100): a step of more tokens runs without CUDA graphs.")] = None,
    speculative: Annotated[str | None, typer.Option(help="A speculative drafter: mtp:K (the model's MTP layers), eagle3:PATH or ngram:K; a model drafter's K passes per step read its weights.")] = None,
    draft_tokens: Annotated[int, typer.Option(min=0, help="Speculative decoding: draft tokens per step (default K of --speculative; without it, drafting costs only the calibrated time per step).")] = 0,
    acceptance: Annotated[float, typer.Option(min=0.0, max=1.0, help="Speculative decoding: acceptance rate, accepted ÷ drafted tokens (vLLM's; servelab bench reports it).")] = 0.7,
    routing: Annotated[float, typer.Option(help="MoE routing γ: a decode step's B tokens reach the experts B^γ independent tokens would; 1 = uniform (default), 0.46 fitted on a published gpt-oss-120b DGX Spark curve (validation/spark_published.py).")] = 1.0,
    closed_loop: Annotated[Literal["stagger", "burst", "batch"], typer.Option(help="stagger: steady state (servelab bench's default); burst: the streams start together, 2 requests each (vllm bench serve --max-concurrency C --num-prompts 2C), run step by step through vLLM's scheduler; compare its TTFT mean and p99 (--json), not the p50; batch: the same with 1 request each (a servelab grid cell, llama-benchy), with its tg tok/s (total).")] = "stagger",
    plot: Annotated[Path | None, typer.Option(help="Also draw the curves to this PNG file.")] = None,
    overlay: Annotated[list[Path] | None, typer.Option(help="With --plot: a measured run (directory or run.json) drawn over the curves; repeatable.")] = None,
    vary: Annotated[list[str] | None, typer.Option(help="Compare alternatives: KEY=V1,V2 with KEY quant, tp, draft-tokens, acceptance, max-num-seqs, max-num-batched-tokens, routing or max-capture-size (repeatable); prints Δ% against the first.")] = None,
    calibration_name: Annotated[str | None, typer.Option("--calibration", help="A shipped calibration's name (servelab/data/calibration.yaml) or a servelab calibrate --out file; default the MoE one for MoE models in FP8, else the dense one.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
) -> None:
    """Predicted per-stream and aggregate tok/s, TTFT, TPOT and E2E at each concurrency, with the bottleneck."""
    spec = read_model(model, revision)
    hw = load_hardware(hardware)
    levels = parse_int_list(concurrency, "--concurrency")
    rates = parse_float_list(rate, "--rate") if rate else None
    sizes = parse_int_list(capture_sizes, "--capture-sizes") if capture_sizes else None
    if not 0.1 <= routing <= 1:
        raise ServelabError(f"--routing {routing:g}: give γ between 0.1 and 1 (1 = uniform routing; 0.46 fitted on gpt-oss-120b)")
    drafter = parse_drafter(speculative, spec, 2.0, draft_tokens) if speculative else None
    draft_tokens = draft_tokens or (drafter.num_tokens if drafter else 0)
    base = {"quant": quant, "tp": tp, "draft-tokens": draft_tokens, "acceptance": acceptance, "max-num-seqs": max_num_seqs,
            "max-num-batched-tokens": max_num_batched_tokens, "routing": routing, "max-capture-size": max_capture_size}  # fmt: skip
    variants = _variants(vary or [], base)
    if sizes and any(v["max-capture-size"] for v in variants):
        raise ServelabError("--capture-sizes and --max-capture-size: give one (a list's largest size is its largest capture size)")
    fmt = weight_format(variants[0]["quant"], spec, checkpoint_config)
    cal, band = calibration(calibration_name, spec, fmt), band_for(spec, fmt.name)  # one for all variants: their Δ% is the model's
    asked = PredictedLoad(input_tokens, output_tokens, levels, rates, closed_loop, sizes)
    curves, unfit = price(spec, hw, cal, variants, asked, checkpoint_config=checkpoint_config, drafter=drafter)
    results = [(c.settings, c.limits, c.points) for c in curves]
    if not results:
        raise ServelabError(unfit[0][1])
    compared = bool(sizes) or any(item.startswith("max-capture-size=") for item in vary or [])  # the capture sizes given or compared already
    kernel = moe_kernel_case(spec, fmt, hw, int(variants[0]["tp"] or 1))
    _render(spec, hw, cal, asked, results, unfit, routing, band=band, kernel=kernel, plot=plot, overlay=overlay or [], json_out=json_out, compared=compared)


def _render(spec, hw, cal, asked: PredictedLoad, results: list, unfit: list, routing: float, *, band: Band, kernel: tuple[str, bool, float] | None, plot: Path | None,
            overlay: list[Path], json_out: bool, compared: bool) -> None:  # fmt: skip
    """predict's output: the plot, then JSON or the table(s), the variants that do not fit and the capture-size hint
    (``kernel``: the fused-MoE kernel case, ``servelab.plan.planner.moe_kernel_case``)."""
    rates, levels, input_tokens, output_tokens, closed_loop = asked.rates, asked.levels, asked.input_tokens, asked.output_tokens, asked.mode
    labels = [f"{r:g} req/s" for r in rates] if rates else [f"{c} stream" + ("s" if c > 1 else "") for c in levels]
    if plot is not None:
        if rates:
            raise ServelabError("--plot draws closed-loop curves; leave out --rate, or --plot")
        curves = [(_label(v), [(p.concurrency, p.aggregate_tok_s, 1 / p.tpot_s) for p in pts]) for v, _, pts in results]
        runs = [(str(r), [(lv.concurrency, lv.output_throughput_tok_s, lv.decode_tok_s.p50) for lv in read_run(r).levels
                          if lv.rate_rps is None and lv.ok and lv.decode_tok_s.p50]) for r in overlay]  # fmt: skip
        write_file(plot, plots.prediction(curves, runs), "--plot")
    if json_out:
        print(jsonfile.dumps({"model": spec.name, "hardware": hw.name, "closed_loop": closed_loop, "calibration": cal.model_dump(), "assumptions": _assumptions(routing),
                          "band": band.model_dump(), "moe_kernel": kernel and kernel[0], "moe_rate": kernel and kernel[2],
                          "variants": [{"settings": v, "limits": asdict(lim), "points": [{**asdict(p), "band": _band(p, band)} for p in pts]} for v, lim, pts in results],
                          "not_fitting": [{"settings": v, "why": why} for v, why in unfit]}, indent=2, default=str))  # fmt: skip
        return
    moe = f", a MoE layer {cal.moe_layer_us} µs more in BF16 ({cal.moe_eager_layer_ms} ms without CUDA graphs)" if spec.moe_layers and (cal.moe_layer_us or cal.moe_eager_layer_ms) else ""
    moe += f", an MLA layer {cal.mla_layer_us} µs more ({cal.mla_eager_layer_ms} ms without CUDA graphs)" if spec.count("mla") and (cal.mla_layer_us or cal.mla_eager_layer_ms) else ""
    if kernel:
        untuned = f" ({cal.untuned_moe_layer_us} µs more a MoE layer)" if not kernel[1] and cal.untuned_moe_layer_us else ""
        moe += f"; MoE kernel: {kernel[0]}{untuned}"
    cohorts = f"; the server's cohorts as measured: s = {cal.mixed_share:g}, the share of the steady state's steps that carry prompts once k ≥ s arrive a decode step" if cal.mixed_share else ""
    caption = (f"calibration {cal.name} (η_bw {cal.bw_efficiency}, η_c {cal.compute_efficiency}, {cal.layer_overhead_us} µs per layer per step{moe}, {cal.eager_step_ms} ms more without CUDA graphs{cohorts}; {cal.source}). "
               f"Measured error: {cal.error} Band ({band.family_class}): ± {band.tok_s:.0%} on tok/s and TPOT, ± {band.ttft:.0%} on TTFT; {band.evidence}. "
               f"Assumes {_assumptions(routing)}.")  # fmt: skip
    if any(p.host_bound for _, _, pts in results for p in _points(pts)):
        host = point_band(band, HOST_SHARE)
        caption += (f" * host-bound (the host's time per step at least {HOST_SHARE:.0%} of the decode step's GPU time): above one stream, "
                    f"where fewer than one prompt a decode step arrives, a steady state's prompts ride in waves, and a steady state's or a burst's TTFT includes the host's queue; "
                    f"band ± {host.tok_s:.0%} on tok/s and TPOT, ± {host.ttft:.0%} on TTFT; {host.evidence}.")  # fmt: skip
    title = f"predicted: {spec.name} · {hw.name} · {input_tokens:,} in / {output_tokens:,} out · " + ("open loop" if rates else closed_loop)
    title, caption = escape(title), escape(caption)  # model names and calibration files are the user's text, not markup
    batch = closed_loop == "batch"
    console.print(_compare_table(results, labels, title, caption, batch=batch) if len(results) > 1 else _curve_table(*results[0], title, caption, batch=batch))
    for v, why in unfit:
        console.print(f"[yellow]{escape(f'{_label(v)}: {why}')}[/]", soft_wrap=True, highlight=False)
    if not compared and (hint := _capture_hint(results, input_tokens)):
        console.print(escape(hint), soft_wrap=True, highlight=False)


def _band(point: Point | RatePoint, model_band: Band) -> dict[str, list[float] | bool]:
    """A point's interval (docs/metrics.md, "predict's band"): for its aggregate tok/s and its TTFT, the values the prediction is
    within ± b of, [predicted ÷ (1 + b), predicted ÷ (1 − b)], b the class's band or the host's where the point is host-bound
    (``servelab.plan.band.point_band``); its TPOT, the inverse of the tok/s interval at the same streams, predicted × (1 ± b_tok)."""
    p = point.point if isinstance(point, RatePoint) else point
    band = point_band(model_band, p.host_share)

    def interval(value: float, b: float) -> list[float]:
        return [value / (1 + b), value / (1 - b)]

    return {"host_bound": p.host_bound, "aggregate_tok_s": interval(p.aggregate_tok_s, band.tok_s), "ttft_s": interval(p.ttft_s, band.ttft),
            "tpot_s": [p.tpot_s * (1 - band.tok_s), p.tpot_s * (1 + band.tok_s)]}


def _capture_hint(results: list, input_tokens: int) -> str | None:
    """The alternative to compare where a level's bottleneck is a step without CUDA graphs (``NO_GRAPH``):
    the plan engine's largest capture size raised to ``prompt_step_graph``, within max_num_batched_tokens;
    None where no level is, or no such size is larger."""
    engine = plan_engine()
    for _, limits, points in results if engine.largest_capture_flag else ():
        graphless = [p for p in _points(points) if p.bottleneck in NO_GRAPH]
        largest = max(limits.capture_sizes)
        if graphless:
            want = prompt_step_graph(input_tokens, max(p.running for p in graphless))
            if want and largest < want <= limits.max_num_batched_tokens:
                return (f"Steps run without CUDA graphs here (more tokens than the largest capture size, {largest}). Compare a larger one: "
                        f"add --vary max-capture-size={largest},{want} (on the server: {engine.largest_capture_flag} {want}"
                        + (f"; {engine.larger_graphs})." if engine.larger_graphs else ")."))  # fmt: skip
    return None


def _points(points: list) -> list[Point]:
    """The closed-loop points of a variant (an open-loop level's: the point at its requests in flight)."""
    return [p.point if isinstance(p, RatePoint) else p for p in points]


def _curve_table(v: dict, limits, points, title: str, caption: str, *, batch: bool = False) -> Table:
    """One variant's curve; ``batch``: a --closed-loop batch prediction, with its tg tok/s (total) where the level ran step by step."""
    spec_note = f" · {v['draft-tokens']} draft tokens at α {v['acceptance']}" if v["draft-tokens"] else ""
    table = Table(title=f"{title} · {escape(v['quant'])}" + (f" × TP {v['tp']}" if v["tp"] > 1 else "") + spec_note)
    open_loop = isinstance(points[0], RatePoint)
    for col in ("req/s", "in flight") if open_loop else ("streams",):
        table.add_column(col, justify="right")
    batch = batch and any(p.tg_total_tok_s is not None for p in _points(points))  # a batch's decode window (servelab grid's tg t/s total)
    for col in ("running", "decode tok/s per stream", "output tok/s per stream", "aggregate tok/s", *(("tg tok/s (total)",) if batch else ()),
                "TTFT ms", "TPOT ms", "E2E s", "bottleneck"):  # fmt: skip
        table.add_column(col, justify="left" if col == "bottleneck" else "right")
    for raw, p in zip(points, _points(points)):
        grows = open_loop and raw.saturated  # the queue grows while arrivals last
        level = (f"{raw.rate_rps:g}", str(p.concurrency)) if open_loop else (str(p.concurrency),)
        table.add_row(*level, str(p.running), f"{1 / p.tpot_s:,.1f}", f"{p.per_stream_tok_s:,.1f}", f"{p.aggregate_tok_s:,.0f}",
                      *((f"{p.tg_total_tok_s:,.1f}" if p.tg_total_tok_s is not None else "–",) if batch else ()), "grows" if grows else f"{p.ttft_s * 1e3:,.0f}", f"{p.tpot_s * 1e3:,.2f}",
                      "grows" if grows else f"{(p.e2e_s + p.queue_s):,.2f}", p.bottleneck + (" *" if p.host_bound else ""))  # fmt: skip
    table.caption = caption + (f" max_num_seqs {limits.max_num_seqs}, max_num_batched_tokens {limits.max_num_batched_tokens}, "
                               f"KV cache for {limits.kv_requests:,.0f} such requests.")  # fmt: skip
    return table


def _label(v: dict) -> str:
    """A variant's settings in words (acceptance only with draft tokens)."""
    return ", ".join(f"{k} {val}" for k, val in v.items() if val is not None and (k != "acceptance" or v["draft-tokens"]))


def _compare_table(results: list, labels: list[str], title: str, caption: str, *, batch: bool = False) -> Table:
    """Aggregate tok/s (and per-stream decode; a batch's tg tok/s total, ``Point.tg_total_tok_s``) of each variant at each level, Δ% against the first."""
    table = Table(title=title)
    table.add_column("variant")
    for label in labels:
        table.add_column(f"{label}: tok/s (Δ)", justify="right")
    base = _points(results[0][2])
    for v, _, points in results:
        label = _label(v)
        cells = [f"{p.aggregate_tok_s:,.0f} ({p.aggregate_tok_s / b.aggregate_tok_s - 1:+.0%}) · {1 / p.tpot_s:,.0f}/stream"
                 + (f" · tg {p.tg_total_tok_s:,.0f} total" if batch and p.tg_total_tok_s is not None else "") + f" · {p.bottleneck}"
                 for p, b in zip(_points(points), base)]  # fmt: skip
        table.add_row(escape(label), *cells)
    table.caption = caption
    return table


def read_run(run_dir: Path) -> RunResult:
    """A run document from a run directory or its run.json.

    Raises:
        ServelabError: unreadable, or not a servelab run.
    """
    path = run_dir / "run.json" if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise ServelabError(f"RUN {run_dir}: no such run; give a run directory or its run.json")
    return read_document(RunResult, path)


def setup_for(run: RunResult, where: str, model: str | None, quant: str | None, hardware: str | None) -> tuple:
    """(spec, format, hardware) of a run: the options given, else what its ceiling named (else the
    served model name, bf16).

    Raises:
        ServelabError: no hardware given and the run names no known profile.
    """
    ce = run.ceiling
    model = model or (ce.model if ce else run.endpoint.model)
    spec = load_model(model)
    fmt = weight_format(quant or (ce.quant if ce else None), spec)
    if hardware is None:
        named = {hw.name: key for key, hw in profiles().items()}
        if ce is None or ce.hardware not in named:
            raise ServelabError(f"{where}: the run names no hardware profile; pass --hardware (e.g. h100-sxm)")
        hardware = named[ce.hardware]
    return spec, fmt, load_hardware(hardware)


HardwareOpt = Annotated[str | None, typer.Option(help="Profile name or YAML (default the one the run's ceiling named).")]
ModelOpt = Annotated[str | None, typer.Option(help="Catalog name or config.json (default the run's ceiling model, else the served name).")]
QuantOpt = Annotated[str | None, typer.Option(help="Weight format (default the run's ceiling format, else bf16).")]
TpOpt = Annotated[int, typer.Option(min=1, help="Tensor-parallel size of the server.")]


def explain_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="A run directory (servelab bench --output) or its run.json; more runs of the same load add a repeatability table.")],
    hardware: HardwareOpt = None,
    model: ModelOpt = None,
    quant: QuantOpt = None,
    tp: TpOpt = 1,
    calibration_name: Annotated[str | None, typer.Option("--calibration", help="A shipped calibration's name or a servelab calibrate --out file; default the MoE one for MoE models in FP8, else the dense one.")] = None,
) -> None:
    """A measured run beside servelab predict's curve, with the cause of each gap (and, given repeats, how far they disagree)."""
    run_dir = run_dirs[0]
    run = read_run(run_dir)
    spec, fmt, hw = setup_for(run, str(run_dir), model, quant, hardware)
    cal = calibration(calibration_name, spec, fmt)
    rows = explain(run, spec, fmt, hw, cal, tp=tp)
    console.print(explain_table(rows, f"measured {run_dir} vs predicted: {spec.name} · {fmt.name} · {hw.name} · {run.load.closed_loop}", cal))
    if len(run_dirs) > 1:
        console.print(repeat_table(repeatability([run, *(read_run(r) for r in run_dirs[1:])])))
