"""``servelab predict``: a closed-loop level's speed before it is measured, from the roofline's bytes
and FLOPs (``servelab.plan.roofline``), the engine's scheduler limits, and three efficiencies
calibrated on real runs.

The model, per GPU of a TP group, at ``c`` streams of P prompt and O output tokens:

- **running** B = min(c, max_num_seqs, requests of P + O tokens the KV cache holds); the rest
  wait on the server (the *slot cap* or *KV capacity*), adding (c − B) ÷ B request durations;
- **decode step** at B sequences and context L = P + O/2:
  t_d = bytes ÷ (bandwidth · η_bw) + t₀, or FLOPs ÷ (peak · η_c) + t₀ when that is larger;
  bytes = weights touched (MoE: the distinct experts B tokens reach under uniform routing) + the
  KV of B sequences; FLOPs, and the experts reached, over the *padded* batch s = the smallest
  CUDA-graph capture size ≥ B (vLLM runs the captured graph of size s, its padding tokens routed
  like real ones; eager above the largest size);
- **prefill** of one prompt: t_p = FLOPs ÷ (peak · η_c) (or its bytes, when larger);
- **steady state** (``stagger``, servelab's default; vLLM's chunked prefill mixes prefills into
  decode steps): while a request decodes its O tokens, the other B − 1 streams each prefill once,
  so TPOT = t_d + (B − 1) · t_p ÷ O and TTFT = t_p + t_d (its prefill, then the step it lands in);
- **burst** (``--closed-loop burst``, and vllm bench serve: the B requests of a wave arrive
  together): their prefills run one after another, so the median request waits for half of them,
  TTFT = (B + 1) ÷ 2 · t_p + t_d, and decodes beside the half still prefilling,
  TPOT = t_d + B ÷ 2 · t_p ÷ O;
- E2E = TTFT + (O − 1) · TPOT; output tok/s per stream = O ÷ E2E, aggregate = c · O ÷ (E2E + queue wait).

Tensor parallel over ``tp`` GPUs (or nodes): bytes and FLOPs per GPU come from the roofline; each
step adds its all-reduces (:func:`allreduce_s`: two per layer over the interconnect, with an
estimated fixed latency each; not measured against a run yet).

Bottleneck named per point: the slot cap or KV capacity (streams waiting), prefill (the prefill
term of TPOT above the decode step), CUDA-graph padding (the padded step ≥ 1.1 × the unpadded one:
FLOPs when compute-bound, and on MoE models the experts the padding tokens reach), per-step
overhead (t₀ above half the step), the TP all-reduce (above half the step), else bandwidth or
compute (the larger term of t_d).

Speculative decoding with K draft tokens at acceptance α per token: the step verifies B · (1 + K)
tokens (padded to the capture size above them) and yields (1 − α^(K+1)) ÷ (1 − α) tokens per
sequence (Leviathan et al. 2023), so TPOT = (t_d + t_draft) ÷ that + the prefill share, with the
drafting time per step t_draft a calibrated constant (``draft_overhead_ms``: vLLM 0.25's n-gram
drafter on H100 adds 2–4 ms a step, validation/RESULTS-predict.md; an MTP or EAGLE head's own
forward pass is not modelled beyond that).

Assumptions (stated with every prediction): uniform MoE routing (or a routing γ, ``servelab.plan.roofline``); the engine's chunked prefill
interleaving prefills with decode (vLLM V1); no prefix-cache hits; acceptance that does not fall
with the batch; the all-reduce latency of each hardware profile (an estimate). Calibration (:class:`Calibration`): η_bw, η_c and t₀ fitted by least
squares on measured TPOT, aggregate tok/s and TTFT p50 of real runs (``fit``), relative errors, since every row is
linear in (1 ÷ η_bw, 1 ÷ η_c, t₀) with the decode step taken as bandwidth-bound (the model's own
``max`` is used to predict). Shipped calibrations and their measured errors: data/calibration.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, Field, ValidationError

from servelab.engines import plan_engine
from servelab.errors import ServelabError
from servelab.plan.hardware import Hardware
from servelab.plan.memory import plan_memory
from servelab.plan.model_spec import ModelSpec
from servelab.plan.quant import QuantFormat
from servelab.plan.roofline import compute_dtype, decode_step, prefill, spec_tokens_per_step, weights_touched
from servelab.results import RunResult
from servelab.yamlfile import read_yaml

DEFAULT_CALIBRATION = "vllm-0.25-h100-bf16"  # dense models (data/calibration.yaml)
MOE_CALIBRATION = "vllm-0.25-h100-moe-fp8"  # MoE models in FP8
PADDING_NAMED = 1.1  # padding is named the bottleneck when it makes the decode step this much longer
BW_RANGE = (0.2, 1.0)  # the grid of η_bw in fit (steps of 0.01); the datasheet bandwidth is the ceiling
COMPUTE_RANGE = (0.1, 1.2)  # … of η_c
TTFT_FIT_RUNNING = 1  # TTFT p50 enters the fit only at this many streams or fewer (see fit; MoE on vLLM 0.25: 30 ms at 1 stream, 118 ms at 2)


class Calibration(BaseModel):
    """Efficiencies of one engine × hardware × format family, with where they came from."""

    name: str
    bw_efficiency: float = Field(gt=0, le=1.5, description="Achieved share of the datasheet memory bandwidth in decode.")
    compute_efficiency: float = Field(gt=0, le=1.5, description="Achieved share of the datasheet dense peak in prefill.")
    step_overhead_ms: float = Field(ge=0, description="Fixed time per decode step (scheduling, launches, sampling), ms.")
    draft_overhead_ms: float = Field(
        0.0, ge=0, description="Time a speculative step adds for drafting (n-gram: CPU matching and the host sync it needs), ms; 0 when no speculative run was fitted."
    )
    source: str = Field(description="The runs it was fitted on.")
    error: str = Field("", description="Measured error (leave-one-run-out), in words.")


def calibrations() -> dict[str, Calibration]:
    """The shipped calibrations (``servelab/data/calibration.yaml``) by name."""
    data = yaml.safe_load(files("servelab.data").joinpath("calibration.yaml").read_text())
    return {name: Calibration(name=name, **value) for name, value in data.items()}


def calibration(name: str | None, spec: ModelSpec | None = None, fmt: QuantFormat | None = None) -> Calibration:
    """A shipped calibration by name, or the first of a YAML file (``servelab calibrate --out``);
    without a name, the shipped one that was fitted on such models: the MoE one for a MoE model in
    FP8, the dense one otherwise (on gpt-oss-120b MXFP4 on a DGX Spark the MoE one was 45–77 % slow,
    the dense one 1–55 %: validation/RESULTS-predict.md).

    Raises:
        ServelabError: neither a known name (the known ones listed) nor a valid calibration file.
    """
    if name is None:
        moe_fp8 = spec is not None and spec.moe_layers and fmt is not None and fmt.name == "fp8"
        name = MOE_CALIBRATION if moe_fp8 else DEFAULT_CALIBRATION
    known = calibrations()
    if name in known:
        return known[name]
    path = Path(name)
    if path.is_file():
        data = read_yaml(path, "--calibration")
        try:
            (key, value), *_ = data.items()
            return Calibration(name=key, **value)
        except (AttributeError, ValueError, TypeError, ValidationError) as exc:
            raise ServelabError(f"--calibration {name}: not a calibration file ({exc}); write one with servelab calibrate --out") from None
    raise ServelabError(f"--calibration {name!r} is not known; use one of {', '.join(known)}, or a file from servelab calibrate --out")


@dataclass(frozen=True)
class Limits:
    """The engine's scheduler limits for the prediction (vLLM's names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    capture_sizes: list[int]
    kv_requests: float  # requests of P + O tokens the KV cache holds (servelab plan)


def limits_for(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, tp: int, input_tokens: int, output_tokens: int,
    max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None, capture_sizes: list[int] | None = None, draft_tokens: int = 0,
) -> Limits:  # fmt: skip
    """The plan engine's limits (its defaults for the hardware where not given, its default
    capture sizes for them and ``draft_tokens``) and the requests of P + O tokens ``servelab plan``
    fits in the KV cache.

    Raises:
        ServelabError: the model does not fit (no KV cache left, or not one request).
    """
    engine = plan_engine()
    mbt_default, seqs_default = engine.batch_defaults(hw)
    seqs, mbt = max_num_seqs or seqs_default, max_num_batched_tokens or mbt_default
    mem = plan_memory(spec, fmt, hw, tp=tp, max_model_len=input_tokens + output_tokens, max_num_seqs=seqs, max_num_batched_tokens=mbt)
    if not mem.fits:
        raise ServelabError(f"{spec.name} in {fmt.name} does not fit {hw.name} at TP {tp} ({'; '.join(mem.notes) or 'no KV cache left'}): "
                            "nothing to predict; `servelab plan` shows the memory, try another --quant or --tp")  # fmt: skip
    kv = mem.max_concurrency
    return Limits(max_num_seqs=seqs, max_num_batched_tokens=mbt, capture_sizes=capture_sizes or engine.capture_sizes(seqs, mbt, draft_tokens), kv_requests=kv)


@dataclass(frozen=True)
class Point:
    """One predicted level. Times in s, rates in tok/s."""

    concurrency: int
    running: int
    padded_batch: int
    decode_step_s: float
    prefill_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    queue_s: float
    per_stream_tok_s: float
    aggregate_tok_s: float
    bottleneck: str


@dataclass(frozen=True)
class Terms:
    """The calibration-free terms of one level: seconds at 100 % efficiency and no overhead."""

    decode_bytes_s: float  # decode step's bytes ÷ bandwidth (MoE experts reached by the padded batch)
    decode_flops_s: float  # decode step's FLOPs (padded batch) ÷ peak
    prefill_s: float  # one prompt's FLOPs ÷ peak (or bytes ÷ bandwidth, when larger)
    running: int
    padded: int
    unpadded_bytes_s: float  # the same step without padding, to name padding as a bottleneck
    unpadded_flops_s: float
    draft_tokens: int = 0  # speculative decoding: draft tokens per step (the step verifies B · (1 + K) tokens)
    allreduce_s: float = 0.0  # tensor parallel: the decode step's all-reduces (not scaled by the efficiencies)
    prefill_allreduce_s: float = 0.0  # … and one prompt's


def terms(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, concurrency: int, input_tokens: int, output_tokens: int, limits: Limits,
    tp: int = 1, draft_tokens: int = 0, routing: float = 1.0,
) -> Terms:  # fmt: skip
    """The roofline terms of one level (module docstring); with ``draft_tokens`` K the step verifies
    B · (1 + K) tokens, padded to the capture size above that many tokens; ``routing`` γ: the MoE
    experts B tokens reach (``servelab.plan.roofline``; 1 = uniform)."""
    running = max(1, min(concurrency, limits.max_num_seqs, math.floor(limits.kv_requests) or 1))
    per_seq = 1 + draft_tokens
    padded = next((s for s in sorted(limits.capture_sizes) if s >= running * per_seq), running * per_seq)  # tokens
    context = input_tokens + output_tokens // 2
    step = decode_step(spec, fmt, hw, batch=running, context=context, tp=tp, tokens_per_seq=per_seq, routing=routing)
    pad = decode_step(spec, fmt, hw, batch=padded, context=context, tp=tp, routing=routing)
    padded_bytes = (weights_touched(spec, fmt, padded, routing) + running * spec.seq_bytes(context, 2.0)) / tp  # padding tokens reach experts too
    peak = hw.peak_flops(compute_dtype(fmt)) or float("inf")
    pf = prefill(spec, fmt, hw, tokens=input_tokens, tp=tp)
    bw = hw.bandwidth_gbs * 1e9
    return Terms(padded_bytes / bw, pad.flops / peak, max(pf.flops / peak, pf.bytes / bw), running, padded, step.bytes / bw,
                 step.flops / peak, draft_tokens, allreduce_s(spec, hw, padded, tp), allreduce_s(spec, hw, input_tokens, tp))  # fmt: skip


def allreduce_s(spec: ModelSpec, hw: Hardware, tokens: int, tp: int) -> float:
    """Time of one step's tensor-parallel all-reduces over ``tokens`` tokens: two per layer (after
    attention and after the MLP, vLLM's RowParallelLinear; vidur prices ``2 · TP_allreduce`` per
    layer the same way), each the ring all-reduce's 2 · (tp − 1) ÷ tp of the BF16 activations
    (tokens × hidden × 2 B) over the interconnect plus a fixed latency (``Hardware.allreduce_latency_us``,
    an estimate). 0 at TP 1; not measured against a run yet."""
    if tp <= 1:
        return 0.0
    bw = (hw.interconnect_gbs or hw.bandwidth_gbs) * 1e9
    per = hw.allreduce_latency_us / 1e6 + 2 * (tp - 1) / tp * tokens * spec.hidden_size * 2 / bw
    return 2 * len(spec.layers) * per


def _shares(running: int, mode: str) -> tuple[float, float]:
    """(prefills a request waits for before its first token, prefills beside its decode) (module docstring)."""
    if mode == "burst":
        return (running + 1) / 2, running / 2
    return 1.0, running - 1.0


def predict(t: Terms, cal: Calibration, *, concurrency: int, output_tokens: int, mode: str = "stagger", acceptance: float = 0.0) -> Point:
    """A level's prediction from its terms and a calibration; ``mode``: ``stagger`` (steady
    state) or ``burst``; with draft tokens, ``acceptance`` α per draft token (module docstring)."""
    overhead = (cal.step_overhead_ms + (cal.draft_overhead_ms if t.draft_tokens else 0.0)) / 1e3
    t_mem, t_cmp = t.decode_bytes_s / cal.bw_efficiency, t.decode_flops_s / cal.compute_efficiency
    t_d = max(t_mem, t_cmp) + overhead + t.allreduce_s
    t_p = t.prefill_s / cal.compute_efficiency + t.prefill_allreduce_s
    b, o = t.running, output_tokens
    before, beside = _shares(b, mode)
    tpot = t_d / spec_tokens_per_step(acceptance, t.draft_tokens) + beside * t_p / o
    ttft = before * t_p + t_d
    e2e = ttft + (o - 1) * tpot
    queue = (concurrency - b) / b * e2e if concurrency > b else 0.0
    if concurrency > b:
        bottleneck = "slot cap / KV capacity"
    elif beside * t_p / o > t_d:
        bottleneck = "prefill"
    elif t_d - overhead - t.allreduce_s >= PADDING_NAMED * max(t.unpadded_bytes_s / cal.bw_efficiency, t.unpadded_flops_s / cal.compute_efficiency):
        bottleneck = "CUDA-graph padding"
    elif t.allreduce_s > 0.5 * t_d:
        bottleneck = "TP all-reduce"
    elif overhead > 0.5 * t_d:
        bottleneck = "per-step overhead"
    else:
        bottleneck = "bandwidth" if t_mem >= t_cmp else "compute"
    return Point(concurrency, b, t.padded, t_d, t_p, ttft, tpot, e2e, queue, o / e2e, concurrency * o / (e2e + queue), bottleneck)


@dataclass(frozen=True)
class Measured:
    """One measured closed-loop level with the model's terms for it (times in s, rates in tok/s)."""

    concurrency: int
    terms: Terms
    output_tokens: int
    mode: str
    tpot_s: float
    ttft_s: float
    tok_s: float
    acceptance: float = 0.0  # speculative decoding: the level's acceptance rate from the server's counters


def measured_levels(run: RunResult, spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, tp: int = 1) -> list[Measured]:
    """A run's closed-loop levels with successful requests, each with the terms of the same load and
    the server's limits as its boot log gave them (the engine's defaults otherwise); with speculative
    decoding in the boot log, its draft tokens and each level's acceptance rate from the server's
    counters (0 where the server gave none).

    Raises:
        ServelabError: the model does not fit (``limits_for``).
    """
    boot = run.boot
    p, o = run.load.input_tokens, run.load.output_tokens
    draft = (boot.speculative_tokens or 0) if boot else 0
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=p, output_tokens=o, max_num_seqs=boot.max_num_seqs if boot else None,
                        max_num_batched_tokens=boot.max_num_batched_tokens if boot else None,
                        capture_sizes=boot.cudagraph_sizes if boot else None, draft_tokens=draft)  # fmt: skip
    return [
        Measured(lv.concurrency, terms(spec, fmt, hw, concurrency=lv.concurrency, input_tokens=p, output_tokens=o, limits=limits, tp=tp,
                                       draft_tokens=draft), o, run.load.closed_loop, lv.tpot_ms.p50 / 1e3, lv.ttft_ms.p50 / 1e3,
                 lv.output_throughput_tok_s, (lv.server.acceptance_rate or 0.0) if draft and lv.server else 0.0)  # fmt: skip
        for lv in run.levels
        if lv.rate_rps is None and lv.ok and lv.output_throughput_tok_s and lv.tpot_ms.p50 and lv.ttft_ms.p50
    ]


def fit(rows: list[Measured], name: str, source: str) -> Calibration:
    """Calibration from measured levels: the efficiencies (η_bw in ``BW_RANGE`` — the datasheet
    bandwidth is the ceiling —, η_c in ``COMPUTE_RANGE``, steps of 0.01) and the per-step overhead t₀ ≥ 0 that minimise the squared relative error of the
    predicted TPOT p50 and aggregate output tok/s of every level (the latter as its inverse, one
    stream's request cycle c · O ÷ tok/s) and TTFT p50 of the levels with at most
    ``TTFT_FIT_RUNNING`` streams (t₀ in closed form for each pair of efficiencies: every one of
    those is linear in it). The aggregate rows carry what TPOT p50 misses where prefill limits the
    server: a level measured for a ``--duration`` close to one request's time keeps the TPOT and
    TTFT of the requests that finished, the fast ones, while its tokens per second count all.
    Higher up, measured TTFT grows beyond the model's prefill-plus-one-step (vLLM 0.25, H100,
    stagger: about 4.5 decode steps at 64 and 256 streams — front-end and scheduling delays the
    model does not have), so those levels would bend the efficiencies; their TTFT error is reported
    instead (validation/RESULTS-predict.md). With speculative levels among at least two without,
    those two fit the above and the speculative ones then the drafting time per step
    (``draft_overhead_ms``, closed form on their TPOT).

    Args:
        rows: the measured levels.

    Raises:
        ServelabError: fewer than two levels.
    """
    if len(rows) < 2:
        raise ServelabError("a calibration needs at least two measured levels")
    plain = [m for m in rows if not m.terms.draft_tokens]
    drafted = [m for m in rows if m.terms.draft_tokens]
    if len(plain) < 2 or not drafted:
        return _fit_base(rows, name, source)
    cal = _fit_base(plain, name, source)
    # the drafting time per step, in closed form on the speculative levels' TPOT (relative errors), the rest fixed
    per = [(predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, mode=m.mode, acceptance=m.acceptance),
            spec_tokens_per_step(m.acceptance, m.terms.draft_tokens), m.tpot_s) for m in drafted]  # fmt: skip
    extra = _least_squares_term(np.array([p.tpot_s / tpot for p, _, tpot in per]), np.array([1 / (k * tpot) for _, k, tpot in per]))
    return cal.model_copy(update={"draft_overhead_ms": round(float(extra) * 1e3, 3)})


def _least_squares_term(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The x ≥ 0 (s) that minimises Σ (a + x · b − 1)² over the last axis: ``a`` the predicted ÷
    measured ratios without the term, ``b`` what one second of it adds to each ratio."""
    return np.clip(((1 - a) * b).sum(-1) / (b * b).sum(-1), 0, None)


def _fit_base(rows: list[Measured], name: str, source: str) -> Calibration:
    """η_bw, η_c and t₀ of :func:`fit` (a speculative level's drafting time folded into t₀)."""
    bw = np.linspace(*BW_RANGE, round((BW_RANGE[1] - BW_RANGE[0]) * 100) + 1)[:, None, None]
    cmp = np.linspace(*COMPUTE_RANGE, round((COMPUTE_RANGE[1] - COMPUTE_RANGE[0]) * 100) + 1)[None, :, None]
    mem, flop, pre, ar, pre_ar, before, beside, out, per_step, tpot, ttft, waiting, cycle = (np.array(x, dtype=float) for x in zip(*[
        (m.terms.decode_bytes_s, m.terms.decode_flops_s, m.terms.prefill_s, m.terms.allreduce_s, m.terms.prefill_allreduce_s,
         *_shares(m.terms.running, m.mode), m.output_tokens, spec_tokens_per_step(m.acceptance, m.terms.draft_tokens), m.tpot_s, m.ttft_s,
         m.concurrency / m.terms.running, m.concurrency * m.output_tokens / m.tok_s)
        for m in rows]))  # fmt: skip
    step = np.maximum(mem / bw, flop / cmp) + ar  # the decode step without t₀, per (η_bw, η_c, level)
    prefill_s = pre / cmp + pre_ar
    low = np.array([m.terms.running <= TTFT_FIT_RUNNING for m in rows])
    ttft0, tpot0 = before * prefill_s + step, step / per_step + beside * prefill_s / out
    a = np.concatenate([tpot0 / tpot, (ttft0 / ttft)[..., low], waiting * (ttft0 + (out - 1) * tpot0) / cycle], axis=-1)  # predicted ÷ measured, t₀ = 0
    b = np.concatenate([1 / (per_step * tpot), 1 / ttft[low], waiting * (1 + (out - 1) / per_step) / cycle])  # how much t₀ adds to each ratio
    t0 = _least_squares_term(a, b)
    sse = ((a + t0[..., None] * b - 1) ** 2).sum(-1)
    i, j = np.unravel_index(np.argmin(sse), sse.shape)
    return Calibration(name=name, bw_efficiency=round(float(bw[i, 0, 0]), 3), compute_efficiency=round(float(cmp[0, j, 0]), 3),
                       step_overhead_ms=round(float(t0[i, j]) * 1e3, 3), source=source)  # fmt: skip


def leave_one_out(runs: list[list[Measured]], name: str) -> list[tuple[int, Measured, Point]]:
    """Every level predicted with the calibration fitted on the *other* runs (one run: on its other
    levels): (run index, measured, predicted) per level.

    Raises:
        ServelabError: too few levels to fit without the one held out.
    """
    if len(runs) > 1:
        held = [(i, None) for i in range(len(runs))]
    else:
        held = [(0, j) for j in range(len(runs[0]))]
    out = []
    for i, j in held:
        train = [m for k, levels in enumerate(runs) for n, m in enumerate(levels) if (k != i if j is None else n != j)]
        cal = fit(train, name, "leave-one-out")
        for n, m in enumerate(runs[i]):
            if j is None or n == j:
                out.append((i, m, predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, mode=m.mode, acceptance=m.acceptance)))
    return out


def error_summary(pairs: list[tuple[int, Measured, Point]]) -> str:
    """The measured error of :func:`leave_one_out`, in words: aggregate tok/s, single-stream decode
    (levels of one stream) and TTFT p50, median and worst absolute %."""

    def stats(values: list[float]) -> str:
        return f"median {100 * float(np.median(values)):.1f} %, worst {100 * max(values):.1f} %"

    agg = [abs(p.aggregate_tok_s / m.tok_s - 1) for _, m, p in pairs]
    single = [abs(m.tpot_s / p.tpot_s - 1) for _, m, p in pairs if m.concurrency == 1]
    ttft = [abs(p.ttft_s / m.ttft_s - 1) for _, m, p in pairs]
    return (f"aggregate output tok/s {stats(agg)} ({len(pairs)} levels)" + (f"; single-stream decode {stats(single)}" if single else "")
            + f"; TTFT p50 {stats(ttft)}")  # fmt: skip
