"""``servelab predict``: a closed-loop curve before launching anything (``servelab.plan.predict``);
``servelab explain RUN``: a measured run beside it (``servelab.explain``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import ValidationError
from rich.table import Table

from servelab.cli.common import console, parse_int_list, read_text
from servelab.cli.plan import _weight_format
from servelab.errors import ServelabError
from servelab.explain import explain
from servelab.plan.hardware import load_hardware, profiles
from servelab.plan.model_spec import load_model
from servelab.plan.predict import calibration, limits_for, predict, terms
from servelab.results import RunResult

ASSUMPTIONS = "uniform MoE routing, no prefix-cache hits, acceptance not falling with the batch, no drafter time, TP all-reduce not modelled"
VARY_KEYS = {"quant": str, "tp": int, "draft-tokens": int, "acceptance": float, "max-num-seqs": int, "max-num-batched-tokens": int}


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
        out = [{**o, key: v} for o in out for v in parsed]
    return out


def predict_cmd(
    model: Annotated[str, typer.Option(help="Catalog name (qwen3-8b, gpt-oss-120b …), a config.json or its directory.")],
    hardware: Annotated[str, typer.Option(help="Profile name (h100-sxm, h200, dgx-spark …) or a YAML file.")] = "h100-sxm",
    quant: Annotated[str | None, typer.Option(help="Weight format (default bf16, or the checkpoint's own).")] = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel size.")] = 1,
    concurrency: Annotated[str, typer.Option(help="Closed-loop streams, e.g. 1,8,64,256.")] = "1,4,16,64,256",
    input_tokens: Annotated[int, typer.Option(min=1, help="Prompt tokens per request.")] = 1024,
    output_tokens: Annotated[int, typer.Option(min=2, help="Output tokens per request.")] = 256,
    max_num_seqs: Annotated[int | None, typer.Option(min=1, help="The server's max_num_seqs (default vLLM's for the hardware).")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(min=1, help="The server's max_num_batched_tokens (default vLLM's for the hardware).")] = None,
    capture_sizes: Annotated[str | None, typer.Option(help="The server's CUDA-graph capture sizes (default vLLM's).")] = None,
    draft_tokens: Annotated[int, typer.Option(min=0, help="Speculative decoding: draft tokens per step (MTP, EAGLE, n-gram).")] = 0,
    acceptance: Annotated[float, typer.Option(min=0.0, max=1.0, help="Speculative decoding: acceptance rate per draft token.")] = 0.7,
    closed_loop: Annotated[Literal["stagger", "burst"], typer.Option(help="stagger: steady state (servelab bench's default); burst: each wave's requests arrive together (vllm bench serve).")] = "stagger",
    vary: Annotated[list[str] | None, typer.Option(help="Compare alternatives: KEY=V1,V2 with KEY quant, tp, draft-tokens, acceptance, max-num-seqs or max-num-batched-tokens (repeatable); prints Δ% against the first.")] = None,
    calibration_name: Annotated[str, typer.Option("--calibration", help="Efficiencies to use (servelab/data/calibration.yaml).")] = "vllm-0.25-h100-bf16",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")] = False,
) -> None:
    """Predicted per-stream and aggregate tok/s, TTFT, TPOT and E2E at each concurrency, with the bottleneck."""
    spec = load_model(model)
    hw, cal = load_hardware(hardware), calibration(calibration_name)
    levels = parse_int_list(concurrency, "--concurrency")
    sizes = parse_int_list(capture_sizes, "--capture-sizes") if capture_sizes else None
    base = {"quant": quant, "tp": tp, "draft-tokens": draft_tokens, "acceptance": acceptance, "max-num-seqs": max_num_seqs, "max-num-batched-tokens": max_num_batched_tokens}
    results = []
    for v in _variants(vary or [], base):
        fmt = _weight_format(v["quant"], model, spec)
        limits = limits_for(spec, fmt, hw, tp=v["tp"], input_tokens=input_tokens, output_tokens=output_tokens, max_num_seqs=v["max-num-seqs"],
                            max_num_batched_tokens=v["max-num-batched-tokens"], capture_sizes=sizes, draft_tokens=v["draft-tokens"])  # fmt: skip
        points = [predict(terms(spec, fmt, hw, concurrency=c, input_tokens=input_tokens, output_tokens=output_tokens, limits=limits, tp=v["tp"],
                                draft_tokens=v["draft-tokens"]), cal, concurrency=c, output_tokens=output_tokens, mode=closed_loop,
                          acceptance=v["acceptance"]) for c in levels]  # fmt: skip
        results.append(({**v, "quant": fmt.name}, limits, points))
    if json_out:
        print(json.dumps({"model": spec.name, "hardware": hw.name, "closed_loop": closed_loop, "calibration": cal.model_dump(), "assumptions": ASSUMPTIONS,
                          "variants": [{"settings": v, "limits": asdict(lim), "points": [asdict(p) for p in pts]} for v, lim, pts in results]}, indent=2))  # fmt: skip
        return
    caption = (f"calibration {cal.name} (η_bw {cal.bw_efficiency}, η_c {cal.compute_efficiency}, {cal.step_overhead_ms} ms per step; {cal.source}). "
               f"Measured error: {cal.error} Assumes {ASSUMPTIONS}.")  # fmt: skip
    title = f"predicted: {spec.name} · {hw.name} · {input_tokens:,} in / {output_tokens:,} out · {closed_loop}"
    console.print(_compare_table(results, levels, title, caption) if len(results) > 1 else _curve_table(*results[0], title, caption))


def _curve_table(v: dict, limits, points, title: str, caption: str) -> Table:
    spec_note = f" · {v['draft-tokens']} draft tokens at α {v['acceptance']}" if v["draft-tokens"] else ""
    table = Table(title=f"{title} · {v['quant']}" + (f" × TP {v['tp']}" if v["tp"] > 1 else "") + spec_note)
    for col in ("streams", "running", "decode tok/s per stream", "output tok/s per stream", "aggregate tok/s", "TTFT ms", "TPOT ms", "E2E s", "bottleneck"):
        table.add_column(col, justify="left" if col == "bottleneck" else "right")
    for p in points:
        table.add_row(str(p.concurrency), str(p.running), f"{1 / p.tpot_s:,.1f}", f"{p.per_stream_tok_s:,.1f}", f"{p.aggregate_tok_s:,.0f}",
                      f"{p.ttft_s * 1e3:,.0f}", f"{p.tpot_s * 1e3:,.2f}", f"{(p.e2e_s + p.queue_s):,.2f}", p.bottleneck)  # fmt: skip
    table.caption = caption + (f" max_num_seqs {limits.max_num_seqs}, max_num_batched_tokens {limits.max_num_batched_tokens}, "
                               f"KV cache for {limits.kv_requests:,.0f} such requests.")  # fmt: skip
    return table


def _compare_table(results: list, levels: list[int], title: str, caption: str) -> Table:
    """Aggregate tok/s (and per-stream decode) of each variant at each level, Δ% against the first."""
    table = Table(title=title)
    table.add_column("variant")
    for c in levels:
        table.add_column(f"{c} streams: tok/s (Δ)", justify="right")
    base = results[0][2]
    for v, _, points in results:
        label = ", ".join(f"{k} {val}" for k, val in v.items() if val is not None and (k != "acceptance" or v["draft-tokens"]))
        cells = [f"{p.aggregate_tok_s:,.0f} ({p.aggregate_tok_s / b.aggregate_tok_s - 1:+.0%}) · {1 / p.tpot_s:,.0f}/stream · {p.bottleneck}" for p, b in zip(points, base)]
        table.add_row(label, *cells)
    table.caption = caption
    return table


def explain_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (servelab bench --output) or its run.json.")],
    hardware: Annotated[str | None, typer.Option(help="Profile name or YAML (default the one the run's ceiling named).")] = None,
    model: Annotated[str | None, typer.Option(help="Catalog name or config.json (default the run's ceiling model, else the served name).")] = None,
    quant: Annotated[str | None, typer.Option(help="Weight format (default the run's ceiling format, else bf16).")] = None,
    tp: Annotated[int, typer.Option(min=1, help="Tensor-parallel size of the server.")] = 1,
    calibration_name: Annotated[str, typer.Option("--calibration", help="Efficiencies to use (servelab/data/calibration.yaml).")] = "vllm-0.25-h100-bf16",
) -> None:
    """A measured run beside servelab predict's curve, with the cause of each gap."""
    try:
        run = RunResult.model_validate_json(read_text(run_dir / "run.json" if run_dir.is_dir() else run_dir, "RUN"))
    except ValidationError as exc:
        raise ServelabError(f"{run_dir} is not a servelab run ({exc.errors()[0]['msg']}); give a run directory or its run.json") from None
    ce = run.ceiling
    model = model or (ce.model if ce else run.endpoint.model)
    spec = load_model(model)
    fmt = _weight_format(quant or (ce.quant if ce else None), model, spec)
    if hardware is None:
        named = {hw.name: key for key, hw in profiles().items()}
        if ce is None or ce.hardware not in named:
            raise ServelabError(f"{run_dir}: the run names no hardware profile; pass --hardware (e.g. h100-sxm)")
        hardware = named[ce.hardware]
    hw, cal = load_hardware(hardware), calibration(calibration_name)
    rows = explain(run, spec, fmt, hw, cal, tp=tp)
    table = Table(title=f"measured {run_dir} vs predicted: {spec.name} · {fmt.name} · {hw.name} · {run.load.closed_loop}")
    for col in ("streams", "tok/s measured", "predicted", "err", "TPOT ms meas / pred", "TTFT ms meas / pred", "predicted bottleneck", "the gap"):
        table.add_column(col, justify="left" if col in ("predicted bottleneck", "the gap") else "right")

    def pair(measured: float | None, predicted: float) -> str:
        return f"{measured * 1e3:,.1f} / {predicted * 1e3:,.1f}" if measured else f"– / {predicted * 1e3:,.1f}"

    for r in rows:
        table.add_row(str(r.concurrency), f"{r.measured_tok_s:,.0f}", f"{r.predicted.aggregate_tok_s:,.0f}", f"{r.tok_s_error:+.0%}",
                      pair(r.measured_tpot_s, r.predicted.tpot_s), pair(r.measured_ttft_s, r.predicted.ttft_s), r.predicted.bottleneck, r.cause)  # fmt: skip
    table.caption = f"calibration {cal.name}: {cal.error}"
    console.print(table)
