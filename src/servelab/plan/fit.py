"""Calibrating ``servelab predict`` (``servelab.plan.predict``) on measured runs: a run's levels with
the model's terms for the same load (``measured_levels``), the least-squares fit of the efficiencies
and times per step (``fit``); their measured error: ``servelab.plan.holdout``.

Every shipped calibration (data/calibration.yaml) was fitted here by validation/predict_loo.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from servelab.errors import ServelabError
from servelab.metrics.summary import LevelSummary
from servelab.metrics.waves import bunched
from servelab.plan.calibration import BW_RANGE, COMPUTE_RANGE, HOST_SCALE_RANGE, MIXED_FLOOR_RANGE, SHIPPED_GPU, Calibration
from servelab.plan.cohorts import MIXED_SHARE, cohorts, recohorted
from servelab.plan.drafter import parse_drafter
from servelab.plan.limits import limits_for
from servelab.plan.predict import BURST_REQUESTS, fitted_extras, predict, step_times
from servelab.plan.terms import Terms, terms
from servelab.plan.quant import QuantFormat
from servelab.plan.roofline import spec_tokens_per_step
from servelab.store.results import RunResult
from servelab.values.specs import Hardware, ModelSpec


@dataclass(frozen=True)
class Measured:
    """One measured closed-loop level with the model's terms for it (times in s, rates in tok/s)."""

    concurrency: int
    terms: Terms
    output_tokens: int
    tpot_s: float
    ttft_s: float  # p50; a burst's mean (its TTFT is bimodal: docs/metrics.md)
    tok_s: float
    acceptance: float = 0.0  # speculative decoding: the level's acceptance rate from the server's counters
    prompts_per_step: float | None = None  # a steady-state level's prompts a step as measured (servelab.metrics.waves: its cohorts), None where not recorded


def measured_levels(run: RunResult, spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, tp: int = 1) -> list[Measured]:
    """A run's closed-loop levels with successful requests, each with the terms of the same load and
    the server's limits as its boot log gave them (the engine's defaults otherwise); with speculative
    decoding in the boot log, its draft tokens (an MTP drafter's passes priced when the model has MTP
    layers) and each level's acceptance rate from the server's counters (0 where the server gave none), and each level's
    prompts a step as servelab counted them (``waves.prompts_per_step``; None where the run file has no count).

    Raises:
        ServelabError: the model does not fit (``limits_for``).
    """
    boot = run.boot
    p, o = run.load.input_tokens, run.load.output_tokens
    draft = (boot.speculative_tokens or 0) if boot else 0
    drafter = parse_drafter(f"mtp:{draft}", spec, 2.0) if draft and boot and boot.speculative_method == "mtp" and spec.mtp_layers else None
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=p, output_tokens=o, max_num_seqs=boot.max_num_seqs if boot else None,
                        max_num_batched_tokens=boot.max_num_batched_tokens if boot else None,
                        capture_sizes=boot.cudagraph_sizes if boot else None, draft_tokens=draft)  # fmt: skip
    return [
        Measured(lv.concurrency, terms(spec, fmt, hw, concurrency=lv.concurrency, input_tokens=p, output_tokens=o, limits=limits, tp=tp,
                                       draft_tokens=draft, mode=level_mode(run, lv.concurrency), drafter=drafter), o, lv.tpot_ms.p50 / 1e3,
                 (lv.ttft_ms.mean if level_mode(run, lv.concurrency) in BURST_REQUESTS else lv.ttft_ms.p50) / 1e3,
                 lv.output_throughput_tok_s, (lv.server.acceptance_rate or 0.0) if draft and lv.server else 0.0,
                 lv.waves.prompts_per_step if lv.waves else None)  # fmt: skip
        for lv in run.levels
        if fittable(lv)
    ]


def fittable(lv: LevelSummary) -> bool:
    """Whether a measured level is one to fit: closed loop (no request rate), with successful requests, its aggregate tok/s, TPOT
    p50 and TTFT p50 and mean positive and finite (a hand-edited or corrupt run.json's are no level to explain)."""
    return lv.rate_rps is None and bool(lv.ok) and all(0 < (v or 0) < 1e12 for v in (lv.output_throughput_tok_s, lv.tpot_ms.p50, lv.ttft_ms.p50, lv.ttft_ms.mean))


def level_mode(run: RunResult, concurrency: int) -> str:
    """How a level's streams sent, as predict prices it (``servelab.plan.predict``): ``batch`` for a burst of one
    request a stream (a ``servelab grid`` cell: ``--requests`` equal to the streams), else the run's closed loop."""
    return "batch" if run.load.closed_loop == "burst" and run.load.requests == concurrency else run.load.closed_loop


def fit(rows: list[Measured], name: str, source: str, prior: Calibration | None = None, widths: dict[str, float] | None = None) -> Calibration:
    """:func:`fit_levels` on ``rows``, named ``name`` from ``source`` (text); with a ``prior`` (``servelab calibrate``), first the
    server's cohorts where its levels measured them (:func:`measured_share`), the levels the host does not bind priced with them
    (``cohorts.recohorted``; where it binds, predict's waves price them), and the calibration carries them
    (``Calibration.mixed_share``), so that predict prices the same server's other levels with them too. One share for all the
    ``rows``: give one server's runs; where they measured none, the prior's (a calibration of this server refitted: ``servelab
    tune``). A level whose prompts bunched (:func:`_level_share`) is priced with its own cohorts instead: the load's waves, not
    the server's (Laguna's design at 16 streams, 5.33 prompts a step where predict's cohorts carry one, pulled η_c to 0.1 fitted
    as the server's; validation/RESULTS-predict.md, "A level's own cohorts"). Without a prior, predict's ``MIXED_SHARE``.

    Raises:
        ServelabError: fewer than two steady-state levels.
    """
    if not prior:
        return fit_levels(rows, name, source, prior, widths)
    bound = [_host_bound(m, prior) for m in rows]
    share = measured_share([m for m, b in zip(rows, bound, strict=True) if not b]) or prior.mixed_share
    rows = [m if b else _cohorted(m, share) for m, b in zip(rows, bound, strict=True)]
    return fit_levels(rows, name, source, prior, widths).model_copy(update={"mixed_share": share})


def _cohorted(m: Measured, share: float | None) -> Measured:
    """``m`` with its terms' cohorts as it measured them where its prompts bunched (``waves.bunched``: the load's waves, its own
    share k ÷ its prompts a step), else under the server's ``share`` (None: predict's own)."""
    own, bunching = _level_share(m)
    use = own if bunching else share
    return replace(m, terms=recohorted(m.terms, use)) if use else m


def _level_share(m: Measured) -> tuple[float | None, bool]:
    """A steady-state level's own share, k ÷ the prompts a step it measured (``Measured.prompts_per_step``: from 1 to the running
    streams), in (0, 1], and whether those prompts bunched beyond predict's default cohorts (``waves.bunched`` against m₀ at
    ``MIXED_SHARE``, whatever share a prior carries: the level's own count is what it did); (None, False) for a level beyond one
    stream without draft tokens that counted none, or any other level."""
    t, per_step = m.terms, m.prompts_per_step or 0.0
    if t.mode != "stagger" or t.running < 2 or t.draft_tokens or not t.prompts_per_step or not 1 <= per_step <= t.running:
        return None, False
    return min(1.0, t.prompts_per_step / per_step), bunched(per_step, cohorts(t.prompts_per_step, math.inf)[1])


def _host_bound(m: Measured, cal: Calibration) -> bool:
    """Whether ``cal`` prices ``m``'s level as host-bound (``Point.host_bound``)."""
    return predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance).host_bound


def measured_share(rows: list[Measured]) -> float | None:
    """A server's s, the share in predict's cohorts m₀ = k ÷ min(k, s) (``Calibration.mixed_share``; docs/metrics.md, "mixed
    step"), in (0, 1]: the median of its steady-state levels' own shares (:func:`_level_share`) where their k prompts a decode
    step reach ``MIXED_SHARE`` (where predict's cohorts hold more than one prompt), rounded to 0.001 (at least 0.001). A level
    whose prompts bunched beyond predict's m₀ (``waves.bunched``: the rules' finding ``bunched_prompts``, cohorts that merge as
    the load runs) is the load's waves, not the server's cohorts, and is left out (the fit prices it with its own: :func:`fit`).
    None where no level is left (a run file from before that count)."""
    shares = []
    for m in rows:
        share, bunching = _level_share(m)
        if share and not bunching and m.terms.prompts_per_step >= MIXED_SHARE:
            shares.append(share)
    return max(0.001, round(float(np.median(shares)), 3)) if shares else None


def fit_levels(rows: list[Measured], name: str, source: str, prior: Calibration | None = None, widths: dict[str, float] | None = None) -> Calibration:
    """Calibration from measured steady-state levels (bursts are held out: ``servelab.plan.burst``
    predicts them step by step): the efficiencies (η_bw in ``BW_RANGE`` — the datasheet bandwidth is
    the ceiling —, η_c in ``COMPUTE_RANGE``, steps of 0.01), the time per layer t_ℓ ≥ 0 and the
    time t_eager ≥ 0 a step without CUDA graphs adds, that minimise the squared relative error of the
    predicted TPOT p50 and aggregate output tok/s of every level (the latter as its inverse, one
    stream's request cycle c · O ÷ tok/s; t_ℓ and t_eager in closed form for each pair of
    efficiencies: both are linear in them), a load measured n times (repeated runs) weighing as
    one. The aggregate rows carry what TPOT p50 misses where prefill limits the server: a level
    measured for a ``--duration`` close to one request's time keeps the TPOT of the requests that
    finished, the fast ones, while its tokens per second count all. TTFT is not fitted: with it
    (at one stream) the dense fit moved to η_bw 1.0 and its single-stream error held out from
    2.8 to 9.9 % (validation/RESULTS-predict.md); its error is reported instead. With speculative
    levels among at least two without, those two fit the above and the speculative ones then the
    drafting time per step (``draft_overhead_ms``, closed form on their TPOT). With levels of MoE
    models among at least two of dense ones, the dense ones fit the above and the MoE ones then
    the MoE layer times (:func:`fit_moe`); a MoE model alone folds its layers' times into the rest.

    With a ``prior`` (``servelab calibrate``: the shipped calibration of the model's class), the fit
    is a posterior mode instead, and what a step without CUDA graphs adds is the prior's (t_eager and
    the MoE and MLA layers' times, ``EAGER_SCALED``) times one fitted scale, not t_eager alone: that
    cost is the host's launching of the step's kernels (validation/RESULTS-predict.md, "the eager step
    alone": 10.5 to 66.5 ms by model and machine), and a MoE model's share of it sits in its layers'
    times, which t_eager ≥ 0 alone could not lower (gpt-oss-20b on an H200: validation/calibrate-h200/).
    The host's time per step (``Engine.step_host_s``, a floor under each step) is left out of this base fit (it is not
    linear in the fitted times), and so are the host-bound steady state's waves, host's floor and host's queue (``predict.waved``,
    ``Terms.eager_launch_s``): a
    host-bound server's calibration absorbs them in its fitted times, which predict then adds again (the fifth kept-back set's
    two small dense models: their 64-stream repeats 7–14 % off with the shipped calibration, 14–18 % after calibrate;
    validation/RESULTS-predict.md); the MoE and MLA layer times' fits see them through ``predict``. With a prior, this machine's
    host scale (``Calibration.host_scale``) is then fitted through the whole of ``predict``, the rest held (:func:`_fit_host`), and
    then the share of the host's floor a steady-state step with prompts takes (``Calibration.mixed_floor``, :func:`_fit_floor`).
    Each parameter is pulled toward the prior's by a Gaussian of width
    ``widths`` (merged over ``PRIOR_WIDTH``, which alone is the wide prior whatever the GPU; ``servelab calibrate`` passes
    :func:`prior_widths` for the GPU measured and the prior's) against the levels' noise ``LEVEL_NOISE``, so a design that does not pin a
    parameter leaves it near the prior instead of at the edge of its range, and each parameter's
    interval (``Calibration.uncertainty``) is where the objective (squared relative errors ÷
    LEVEL_NOISE², plus the prior's terms) rises by 1 above its minimum (the efficiencies profiled
    over the grid, the times from the linear least squares' covariance).

    Args:
        rows: the measured levels.

    Raises:
        ServelabError: fewer than two steady-state levels.
    """
    rows = [m for m in rows if m.terms.mode not in BURST_REQUESTS]  # bursts are predicted step by step (servelab.plan.burst): held out of every fit
    widths = {**PRIOR_WIDTH, **(widths or {})}
    if len(rows) < 2:
        raise ServelabError("a calibration needs at least two measured steady-state levels (servelab bench, --closed-loop stagger)")
    dense = [m for m in rows if not m.terms.moe_layers]
    moe = [m for m in rows if m.terms.moe_layers]
    if moe and len([m for m in dense if not m.terms.draft_tokens]) >= 2:
        return fit_moe(moe, fit_levels(dense, name, source, prior, widths))
    plain = [m for m in rows if not m.terms.draft_tokens]
    drafted = [m for m in rows if m.terms.draft_tokens]
    if len(plain) < 2 or not drafted:
        return _fit_base(rows, name, source, prior, widths)
    cal = _fit_base(plain, name, source, prior, widths)
    # the drafting time per step, in closed form on the speculative levels' TPOT (relative errors), the rest fixed
    per = [(predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance),
            spec_tokens_per_step(m.acceptance, m.terms.draft_tokens), m.tpot_s) for m in drafted]  # fmt: skip
    extra = _least_squares_term(np.array([p.tpot_s / tpot for p, _, tpot in per]), np.array([1 / (k * tpot) for _, k, tpot in per]))
    return cal.model_copy(update={"draft_overhead_ms": round(float(extra) * 1e3, 3)})


def fit_moe(rows: list[Measured], cal: Calibration) -> Calibration:
    """``cal`` with the times of a MoE layer fitted on MoE models' steady-state levels, everything
    else held: ``moe_layer_us`` (with CUDA graphs: every step pays it) and ``moe_eager_layer_ms``
    (the steps without them), both ≥ 0, the least squares of :func:`fit_levels` on the same relative errors
    of TPOT p50 and aggregate tok/s (both linear in them). The dense models' fit thus carries to MoE
    models: they share the memory system, the attention and the per-layer kernels, and a MoE layer
    adds its router and dispatch kernels (validation/RESULTS-predict.md).

    Raises:
        ServelabError: no steady-state level of a MoE model among ``rows``.
    """
    return _fit_layer_times(rows, cal, ("moe_layer_us", "moe_eager_layer_ms"), lambda t: t.moe_layers, "a MoE model")


def fit_mla(rows: list[Measured], cal: Calibration) -> Calibration:
    """``cal`` with the times of an MLA layer fitted on MLA models' steady-state levels, everything
    else held (their MoE layers priced by ``cal``'s MoE times): ``mla_layer_us`` (every step) and
    ``mla_eager_layer_ms`` (steps without CUDA graphs), both ≥ 0, as :func:`fit_moe` fits a MoE layer's
    (issue 53: an MLA layer runs its latent projections, their norms and the absorbed up-projections,
    ~2 × the kernels of a GQA layer; its prefill takes the non-absorbed path).

    Raises:
        ServelabError: no steady-state level of an MLA model among ``rows``.
    """
    return _fit_layer_times(rows, cal, ("mla_layer_us", "mla_eager_layer_ms"), lambda t: t.mla_layers, "an MLA model")


def _fit_layer_times(rows: list[Measured], cal: Calibration, keys: tuple[str, str], count: Callable[[Terms], int], what: str) -> Calibration:
    """``cal`` with ``keys`` (a per-layer time every step pays, µs, and one a step without CUDA graphs pays, ms) fitted
    on the steady-state levels of models with ``count(terms)`` such layers, the rest held (:func:`fit_moe`)."""
    rows = [m for m in rows if m.terms.mode not in BURST_REQUESTS and count(m.terms)]
    if not rows:
        raise ServelabError(f"fitting {keys[0]} needs steady-state levels of {what} (servelab bench, --closed-loop stagger)")
    cal = cal.model_copy(update={keys[0]: 0.0, keys[1]: 0.0})  # fitted afresh, not on top of ``cal``'s own
    a, b, c = [], [], []
    for m in rows:
        per_step = spec_tokens_per_step(m.acceptance, m.terms.draft_tokens)
        p = predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance)
        _, _, _, _, (e_tpot, e_ttft), (s_tpot, s_ttft) = step_times(m.terms, cal.bw_efficiency, cal.compute_efficiency, per_step)
        n, o, waiting = count(m.terms), m.output_tokens, m.concurrency / m.terms.running
        cycle = m.concurrency * o / m.tok_s
        a += [p.tpot_s / m.tpot_s, m.tok_s / p.aggregate_tok_s]
        b += [n * s_tpot / m.tpot_s, n * waiting * (s_ttft + (o - 1) * s_tpot) / cycle]
        c += [n * e_tpot / m.tpot_s, n * waiting * (e_ttft + (o - 1) * e_tpot) / cycle]
    every, eager = _least_squares_terms(np.array(a), np.array(b, dtype=float), np.array(c, dtype=float))
    return cal.model_copy(update={keys[0]: round(float(every) * 1e6, 2), keys[1]: round(float(eager) * 1e3, 3)})


def _least_squares_term(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The x ≥ 0 (s) that minimises Σ (a + x · b − 1)² over the last axis: ``a`` the predicted ÷
    measured ratios without the term, ``b`` what one second of it adds to each ratio."""
    return np.clip(((1 - a) * b).sum(-1) / np.maximum((b * b).sum(-1), 1e-30), 0, None)


def _least_squares_terms(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The x, y ≥ 0 (s) that minimise Σ (a + x · b + y · c − 1)² over the last axis (the 2 × 2
    normal equations; where one comes out negative, the better of the two with one term)."""
    r = 1 - a
    bb, cc, bc, rb, rc = (b * b).sum(-1), (c * c).sum(-1), (b * c).sum(-1), (r * b).sum(-1), (r * c).sum(-1)
    det = bb * cc - bc * bc
    with np.errstate(divide="ignore", invalid="ignore"):
        x, y = (rb * cc - rc * bc) / det, (rc * bb - rb * bc) / det
    both = (det > 1e-12 * np.maximum(bb * cc, 1e-30)) & (x >= 0) & (y >= 0)
    x1, y1 = _least_squares_term(a, b), _least_squares_term(a, c)
    first_better = ((r - x1[..., None] * b) ** 2).sum(-1) <= ((r - y1[..., None] * c) ** 2).sum(-1)
    return np.where(both, x, np.where(first_better, x1, 0.0)), np.where(both, y, np.where(first_better, 0.0, y1))


def _fit_base(rows: list[Measured], name: str, source: str, prior: Calibration | None, widths: dict[str, float]) -> Calibration:
    """η_bw, η_c, t_ℓ and the eager step time of :func:`fit_levels` (a speculative level's drafting time folded into t_ℓ); with
    ``prior``, the posterior mode (the prior's σ ``widths``) and each parameter's interval (:func:`fit_levels`). A prior's own per-step times (MoE, MLA, drafting)
    are kept: these rows cannot tell them from t_ℓ."""
    bw = np.linspace(*BW_RANGE, round((BW_RANGE[1] - BW_RANGE[0]) * 100) + 1)[:, None]
    cmp = np.linspace(*COMPUTE_RANGE, round((COMPUTE_RANGE[1] - COMPUTE_RANGE[0]) * 100) + 1)[None, :]
    shape = np.broadcast_shapes(bw.shape, cmp.shape)
    extra = {k: v for k, v in prior.model_dump().items() if k in PRIOR_KEPT and k not in EAGER_SCALED} if prior else {}
    base = Calibration(name=name, bw_efficiency=1, compute_efficiency=1, layer_overhead_us=0, source=source, **extra)  # with a prior, its eager times are scaled
    ratios: list[tuple] = []  # (predicted ÷ measured without t_ℓ and the eager time, what one second of t_ℓ adds, … of the eager time)
    weights: list[float] = []  # a load measured n times weighs as one (repeated runs would outvote the others)
    same = Counter(_load(m) for m in rows)
    eager_prior = prior.model_copy(update=_prior_eager_ms(prior)) if prior else None  # its times without CUDA graphs: one unit of the fitted scale
    for m in rows:
        per_step = spec_tokens_per_step(m.acceptance, m.terms.draft_tokens)
        tpot, ttft, _, (o_tpot, o_ttft), (e_tpot, e_ttft), (s_tpot, s_ttft) = step_times(m.terms, bw, cmp, per_step)
        fixed, _ = fitted_extras(m.terms, base)  # the prior's MoE/MLA times with CUDA graphs, on top of the roofline
        tpot, ttft = tpot + fixed * s_tpot, ttft + fixed * s_ttft
        unit = fitted_extras(m.terms, eager_prior)[1] if eager_prior else 1.0  # what one unit of the fitted eager variable adds to a step without graphs, s
        e_tpot, e_ttft = unit * e_tpot, unit * e_ttft
        ratios.append((tpot / m.tpot_s, o_tpot / m.tpot_s, e_tpot / m.tpot_s))
        waiting, cycle, o = m.concurrency / m.terms.running, m.concurrency * m.output_tokens / m.tok_s, m.output_tokens
        ratios.append((waiting * (ttft + (o - 1) * tpot) / cycle, waiting * (o_ttft + (o - 1) * o_tpot) / cycle, waiting * (e_ttft + (o - 1) * e_tpot) / cycle))
        weights += [1 / math.sqrt(same[_load(m)])] * 2
    if prior:  # the prior's values as two more rows (w · (t − t₀)), the residuals' unit the levels' noise: t_ℓ, and the eager scale (prior 1)
        w_l, w_e = LEVEL_NOISE / _width("layer_overhead_us", prior, widths), LEVEL_NOISE / widths["eager_scale"]
        ratios += [(1 - w_l * prior.layer_overhead_us / 1e6, w_l, 0.0), (1 - w_e, 0.0, w_e)]
        weights += [1.0, 1.0]
    a, b, c = (np.stack([np.broadcast_to(np.asarray(r[n], dtype=float), shape) for r in ratios], axis=-1) for n in range(3))
    w = np.array(weights)  # weighted rows w · (a + t_ℓ · b + t_eager · c − 1): the same least squares on 1 + w · (a − 1), w · b, w · c
    a, b, c = 1 + w * (a - 1), w * b, w * c
    layer, eager = _least_squares_terms(a, b, c)
    sse = ((a + layer[..., None] * b + eager[..., None] * c - 1) ** 2).sum(-1)
    if prior:
        sse = sse + (LEVEL_NOISE * (bw - prior.bw_efficiency) / widths["bw_efficiency"]) ** 2
        sse = sse + (LEVEL_NOISE * (cmp - prior.compute_efficiency) / widths["compute_efficiency"]) ** 2
    i, j = np.unravel_index(np.argmin(sse), sse.shape)
    cal = base.model_copy(update={"bw_efficiency": round(float(bw[i, 0]), 3), "compute_efficiency": round(float(cmp[0, j]), 3),
                                  "layer_overhead_us": round(float(layer[i, j]) * 1e6, 2)})  # fmt: skip
    if not prior:
        return cal.model_copy(update={"eager_step_ms": round(float(eager[i, j]) * 1e3, 3)})
    cal = cal.model_copy(update={key: round(float(eager[i, j]) * getattr(eager_prior, key), 3) for key in EAGER_SCALED})
    return _fit_floor(rows, _fit_host(rows, cal.model_copy(update={"uncertainty": _intervals(sse / LEVEL_NOISE**2, bw[:, 0], cmp[0], b[i, j], c[i, j], cal, eager_prior.eager_step_ms)})))


def _fit_host(rows: list[Measured], cal: Calibration) -> Calibration:
    """``cal`` with this machine's ``host_scale`` (its host's times over those of the machines measured: the floors under steps
    without CUDA graphs, the time per step, the queue; ``Terms.on_host``) fitted on ``rows``, the rest held (:func:`_fit_grid`
    on ``HOST_SCALES``, the prior's (log (scale ÷ the prior's) ÷ ``HOST_WIDTH``)²). Only where the host binds a level beyond one stream
    (``Point.host_bound`` under ``cal``): elsewhere the levels cannot tell its speed from another term's error, and ``cal`` comes
    back as it is (unguarded, DeepSeek-V2-Lite's MLA steady state took 1.9 and its bursts went 12–22 % slow). After the other
    parameters, not with them: they are fitted without the host's terms (:func:`fit_levels`), so a host-bound server's fitted
    times still carry some of them (validation/RESULTS-predict.md, "A host that calibrate pins")."""
    if not any(m.concurrency > 1 and _host_bound(m, cal) for m in rows):
        return cal  # the host binds no level beyond one stream: these levels cannot tell its scale from the other terms' errors
    return _fit_grid(rows, cal, "host_scale", HOST_SCALES, np.log(HOST_SCALES / cal.host_scale) ** 2 / HOST_WIDTH**2)


def _fit_floor(rows: list[Measured], cal: Calibration) -> Calibration:
    """``cal`` with this server's ``mixed_floor`` (the share of the host's floor a steady-state step with prompts takes at least:
    ``Calibration.mixed_floor``) fitted on ``rows``, the rest held (:func:`_fit_grid` on ``MIXED_FLOORS``, the prior's ((share −
    ``cal``'s) ÷ ``FLOOR_WIDTH``)²), where a level beyond one stream has steps with prompts without CUDA graphs and the engine a floor
    for them on this GPU; else ``cal``. After the base fit and this machine's host scale (the floor is the host's, scaled), not in
    the base fit: the floor is a maximum, not linear in the fitted times, which carry some of what such a step costs
    (validation/RESULTS-predict.md, "A share of the host's floor, fitted by calibrate")."""
    if not any(m.concurrency > 1 and m.terms.mixed_eager and m.terms.eager_host_s > 0 for m in rows):
        return cal  # no such step, or no floor measured for this GPU and format (Engine.eager_host_s 0)
    return _fit_grid(rows, cal, "mixed_floor", MIXED_FLOORS, ((MIXED_FLOORS - cal.mixed_floor) / FLOOR_WIDTH) ** 2)


def _fit_grid(rows: list[Measured], cal: Calibration, key: str, grid: np.ndarray, prior: np.ndarray) -> Calibration:
    """``cal`` with ``key`` the value on ``grid`` whose predictions (:func:`predict`, the whole model) minimise the squared log
    errors of each level's TPOT p50 and aggregate tok/s (÷ ``LEVEL_NOISE``) and, beyond one stream, its TTFT p50 (÷ ``TTFT_NOISE``:
    the host's queue shows there), plus ``prior`` (the prior's term at each grid value), a load measured n times weighing as
    one; its interval where that objective is within 1 of its minimum (``Calibration.uncertainty``)."""
    same = Counter(_load(m) for m in rows)
    objective = np.array(prior, dtype=float)
    for k, value in enumerate(grid):
        at = cal.model_copy(update={key: float(value)})
        for m in rows:
            p = predict(m.terms, at, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance)
            errors = [(p.tpot_s / m.tpot_s, LEVEL_NOISE), (p.aggregate_tok_s / m.tok_s, LEVEL_NOISE)] + [(p.ttft_s / m.ttft_s, TTFT_NOISE)] * (m.concurrency > 1)
            objective[k] += sum((math.log(ratio) / noise) ** 2 for ratio, noise in errors) / same[_load(m)]
    best, near = int(np.argmin(objective)), grid[objective <= objective.min() + 1]
    return cal.model_copy(update={key: float(grid[best]), "uncertainty": {**cal.uncertainty, key: (float(near.min()), float(near.max()))}})


def _prior_eager_ms(prior: Calibration) -> dict[str, float]:
    """The prior's times without CUDA graphs that a fit with it scales (``EAGER_SCALED``), ms; where all are 0, t_eager at
    ``PRIOR_FLOOR`` (so that the levels can still move it)."""
    times = {key: getattr(prior, key) for key in EAGER_SCALED}
    return times if any(times.values()) else {**times, "eager_step_ms": PRIOR_FLOOR["eager_step_ms"]}


LEVEL_NOISE = 0.05  # a level's relative noise in a fit with a prior: one server's levels measured again moved 4–14 % (validation/RESULTS-predict.md, repeats)
PRIOR_WIDTH = {"bw_efficiency": 0.15, "compute_efficiency": 0.3, "layer_overhead_us": 0.5, "eager_scale": 1.0}  # σ of the prior: absolute for the efficiencies and the eager scale (prior 1), relative (× the prior's) for t_ℓ
SAME_GPU_WIDTH = {"bw_efficiency": 0.08, "compute_efficiency": 0.1}  # … on the prior's own GPU generation (prior_widths): its efficiencies are the GPU's (η_c moved 5–8 % with an H100's power-capped clock; one-stream decode, η_bw's, agreed within 5 % over the H100 and H200 hosts measured); wider, calibrate moved η_c 0.74 → 0.27 on GLM-4.5-Air's steady state and priced its bursts 22 % slow
PRIOR_FLOOR = {"layer_overhead_us": 10.0, "eager_step_ms": 1.0}  # … at least this (µs, ms): a prior time of 0 still lets the levels move it
PRIOR_KEPT = ("moe_layer_us", "moe_eager_layer_ms", "mla_layer_us", "mla_eager_layer_ms", "untuned_moe_layer_us", "draft_overhead_ms", "mixed_floor",
              "host_scale")  # the prior's times a base fit keeps, and its host's scale and floor's share (their fits' priors; kept where the levels cannot fit them)
HOST_SCALES = np.round(np.geomspace(*HOST_SCALE_RANGE, 49), 3)  # the grid of Calibration.host_scale in a fit with a prior: its whole range, steps of 6 %
MIXED_FLOORS = np.round(np.linspace(*MIXED_FLOOR_RANGE, 15), 2)  # … of Calibration.mixed_floor: its whole range, steps of 0.1
FLOOR_WIDTH = 0.5  # σ of the prior's mixed_floor: the kept-back servers' steps with prompts (ITL p90) over the host's floor, 0.68–1.74 from the 10th to the 90th percentile of 84 levels (validation/mixed_steps.py)
HOST_WIDTH = math.log(2)  # σ of the prior's log host scale (about the prior's: 1 in the shipped calibrations): the seventh kept-back set's host launched and queued about 2 × faster than the others' (validation/RESULTS-predict.md)
TTFT_NOISE = 0.2  # a steady-state level's TTFT p50's relative noise in the host's fit: the fourth and fifth kept-back sets' 64-stream repeats, 5–25 % apart on five servers of six (*-repeats3-stagger-run.json)
EAGER_SCALED = ("eager_step_ms", "moe_eager_layer_ms", "mla_eager_layer_ms")  # … of them (and t_eager) what a fit with a prior scales by one factor


def _width(key: str, prior: Calibration, widths: dict[str, float]) -> float:
    """The prior's σ for time ``key``, s (``widths[key]`` × the prior's value, at least ``PRIOR_FLOOR``)."""
    scale = 1e6 if key.endswith("_us") else 1e3
    return max(widths[key] * getattr(prior, key), PRIOR_FLOOR[key]) / scale


def prior_widths(hw: Hardware, prior: Calibration) -> dict[str, float]:
    """The σ (``PRIOR_WIDTH``) of ``prior`` in a fit on ``hw``: on the GPU generation it was fitted on (``Calibration.gpu``, ``Hardware.generation``; the
    shipped ones' ``SHIPPED_GPU``, any sm_90 profile, though measured on H100 SXM and H200 only), the efficiencies' are ``SAME_GPU_WIDTH``
    (validation/RESULTS-predict.md, "The efficiencies are the GPU's"); elsewhere (the H100's on a GB10 or a Blackwell card) the
    prior's efficiencies are another GPU's, and theirs stay wide. A new dict each call."""
    return {**PRIOR_WIDTH, **SAME_GPU_WIDTH} if hw.generation == (prior.gpu or SHIPPED_GPU) else dict(PRIOR_WIDTH)


def _intervals(objective: np.ndarray, bw: np.ndarray, cmp: np.ndarray, b: np.ndarray, c: np.ndarray, cal: Calibration, eager_ms: float) -> dict[str, tuple[float, float]]:
    """Each parameter's interval where ``objective`` (on the η_bw × η_c grid, times at their best) is within 1 of its
    minimum; t_ℓ's (µs) and t_eager's (ms: the eager scale's, column ``c``, × the prior's ``eager_ms``; the MoE and MLA
    layers' eager times move with it) from the covariance of their least squares at the optimum (columns ``b``, ``c``)."""
    near = objective <= objective.min() + 1
    rows, cols = np.nonzero(near)
    out = {"bw_efficiency": (round(float(bw[rows].min()), 3), round(float(bw[rows].max()), 3)),
           "compute_efficiency": (round(float(cmp[cols].min()), 3), round(float(cmp[cols].max()), 3))}
    cov = np.linalg.pinv(np.array([[b @ b, b @ c], [b @ c, c @ c]])) * LEVEL_NOISE**2
    for k, (key, unit) in enumerate((("layer_overhead_us", 1e6), ("eager_step_ms", eager_ms))):
        sd = math.sqrt(max(float(cov[k, k]), 0.0)) * unit
        value = getattr(cal, key)
        out[key] = (round(max(0.0, value - sd), 3), round(value + sd, 3))
    return out


def _load(m: Measured) -> tuple:
    """What makes two measured levels the same load: model and hardware (their decode step's bytes), lengths, streams, mode."""
    return (round(m.terms.decode_bytes_s, 9), m.terms.input_tokens, m.output_tokens, m.concurrency, m.terms.mode, m.terms.draft_tokens)
