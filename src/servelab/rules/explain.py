"""``servelab explain RUN``: a measured closed-loop run beside ``servelab predict``'s curve for the same
model, hardware, load and server limits, with the named cause of each gap.

Per level: measured and predicted aggregate output tok/s, TPOT p50 and TTFT p50, the errors, the
predicted bottleneck, and the cause: "as predicted" when aggregate tok/s and TPOT agree within
``AGREE`` (noting a TTFT — p50, a burst's mean — off by more than twice that, with the terms the
model's TTFT is made of), a burst's first wave that needs several prefill steps, the level's findings (``servelab.rules.diagnose``: prefix-cache
hits, synchronized waves, CUDA-graph padding, server queueing with its cause, a busy client, a
ceiling exceeded — MoE routing not uniform or speculative decoding — preemptions; and, for a level
the model puts above its measure, the run's own: MoE layers without a tuned kernel config, from the boot log); a gap beyond
``AGREE`` is put on those findings, else on the calibration (this engine × hardware × model family
is not the one it was fitted on) — or, on a run with speculative decoding, on the drafting time per
step the calibration holds.

Given repeated runs of one load, :func:`repeatability` says how far they disagree per level and
calls a level unstable beyond ``TOK_S_SPREAD`` / ``TTFT_SPREAD``: a curve drawn through such a
level is noise, whatever the model says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.rules.diagnose import diagnose
from servelab.errors import ServelabError
from servelab.metrics.repeats import RepeatStats, repeat_stats
from servelab.plan.calibration import Calibration
from servelab.plan.fit import Measured, measured_levels
from servelab.plan.holdout import predicted_ttft
from servelab.plan.predict import API_TTFT_S, BURST_REQUESTS, Point, predict
from servelab.plan.quant import QuantFormat
from servelab.store.results import RunResult
from servelab.values.specs import Hardware, ModelSpec

AGREE = 0.15  # a level agrees with the prediction when its aggregate tok/s and TPOT are within 15 %
CAUSES = {  # finding kind → the gap it explains (diagnose.py has the numbers)
    "prefix_cache_contamination": "prefix-cache hits made prefill cheaper than modelled",
    "synchronized_waves": "synchronized waves: TTFT depends on how the waves line up",
    "bunched_prompts": "prompts bunched into cohorts: tok/s depends on how far they bunched and on the window",
    "cudagraph_padding": "CUDA-graph padding",
    "server_queueing": "server queueing",
    "unstable_measurement": "the client was saturated: its timestamps are late",
    "ceiling_exceeded": "faster than the roofline: MoE routing not uniform, or speculative decoding",
    "preemptions": "preemptions: work was recomputed",
    "power_capped": "the GPU was power-capped: its clock fell, compute-bound steps slowed",
    "short_window": "a --duration window of under 3 request durations: latencies of the early requests only",
    "jit_compile": "a kernel compiled (JIT) inside the window: not a measurement",
    "untuned_moe_kernels": "the MoE layers ran the engine's default kernel config (no tuned one for this GPU; the engine warns it may be slower)",
    "transformers_backend": "the engine ran the Transformers library's model code, which servelab's calibrations did not measure",
    "void_routing_simulation": "the engine's simulated MoE routing sent every token to the same top-k experts: not the model's throughput",
}
EITHER_WAY = {"transformers_backend", "void_routing_simulation"}  # whole-run findings named at a level missed either way (others: where it ran slower)


@dataclass(frozen=True)
class Row:
    """One level: measured beside predicted; errors are (predicted − measured) ÷ measured."""

    concurrency: int
    measured_tok_s: float
    predicted: Point
    measured_tpot_s: float
    measured_ttft_s: float  # p50; a burst's mean
    cause: str
    predicted_ttft_s: float  # the same statistic, predicted

    @property
    def tok_s_error(self) -> float:
        return self.predicted.aggregate_tok_s / self.measured_tok_s - 1


def explain(run: RunResult, spec: ModelSpec, fmt: QuantFormat, hw: Hardware, cal: Calibration, *, tp: int = 1) -> list[Row]:
    """The rows for a run's closed-loop levels (module docstring).

    Raises:
        ServelabError: the run has no closed-loop level with successful requests.
    """
    findings = diagnose(run, run.boot.cudagraph_sizes if run.boot else None)
    rows = []
    for m in measured_levels(run, spec, fmt, hw, tp=tp):
        pt = predict(m.terms, cal, concurrency=m.concurrency, output_tokens=m.output_tokens, acceptance=m.acceptance)
        agree = abs(pt.aggregate_tok_s / m.tok_s - 1) <= AGREE and abs(pt.tpot_s / m.tpot_s - 1) <= AGREE
        slower = not agree and pt.aggregate_tok_s > m.tok_s  # measured below the prediction: what slowed the whole run may be why
        mine = [f for f in findings if f.kind in CAUSES and (f.evidence.get("concurrency") == m.concurrency or ((slower or (not agree and f.kind in EITHER_WAY)) and "concurrency" not in f.evidence))]
        named = [CAUSES[f.kind] + (f" ({f.evidence['cause']})" if f.kind == "server_queueing" else "") for f in mine]
        wave = _wave(m)
        if wave:
            named.insert(0, wave)
        host = _host_terms(pt)
        if agree:
            ttft_off = abs(predicted_ttft(m, pt) / m.ttft_s - 1) > 2 * AGREE
            cause = "as predicted" + (f" but TTFT ({_ttft_terms(m)}{f'; {host}' if host else ''})" if ttft_off else "") + "".join(f"; {n}" for n in named)
        elif named:
            cause = "; ".join(named)
        elif host:
            cause = f"{host}: the host-bound steady state is an empirical rule fitted on small models (docs/metrics.md, \"waves\")"
        elif m.terms.draft_tokens:
            cause = (f"speculative decoding ({m.terms.draft_tokens} draft tokens, acceptance {m.acceptance:.0%} from the server's counters): "
                     f"the drafting time per step is not {cal.draft_overhead_ms:g} ms as in {cal.name}")  # fmt: skip
        else:
            cause = f"the calibration ({cal.name}) does not fit this engine × hardware × model" + _architecture_terms(m, cal)
        rows.append(Row(m.concurrency, m.tok_s, pt, m.tpot_s, m.ttft_s, cause, predicted_ttft(m, pt)))
    if not rows:
        raise ServelabError("the run has no closed-loop level with successful requests, TTFT and TPOT (token chunks that arrived apart) to explain")
    return rows


def _wave(m: Measured) -> str:
    """A burst level whose first wave needs several prefill steps: how many (servelab.plan.burst)."""
    tokens = m.concurrency * m.terms.input_tokens
    steps = math.ceil(tokens / m.terms.max_num_batched_tokens)
    if m.terms.mode not in BURST_REQUESTS or steps < 2:
        return ""
    return (f"a burst: the first wave's {tokens:,} prompt tokens prefill in {steps} steps of max_num_batched_tokens "
            f"{m.terms.max_num_batched_tokens:,}, so its TTFT ranges over them (compare TTFT mean and p99, not p50)")  # fmt: skip


def _architecture_terms(m: Measured, cal: Calibration) -> str:
    """The terms of predict's model for this architecture that a calibration fitted elsewhere may
    misprice (issue 53), with what the calibration gives each, and the way to fit them; "" for none."""
    terms = []
    if m.terms.mla_layers:
        terms.append(f"{m.terms.mla_layers} MLA layers ({f'{cal.mla_layer_us:g} µs a step each' if cal.mla_layer_us else 'no MLA layer time'} in {cal.name})")
    if m.terms.untuned_moe_layers:
        per = f"{cal.untuned_moe_layer_us:g} µs a step each" if cal.untuned_moe_layer_us else "priced at the kernel's measured rate, no time of their own"
        terms.append(f"{m.terms.untuned_moe_layers} MoE layers on the engine's default fused-MoE kernel config, no tuned one for this GPU ({per} in {cal.name})")
    if not terms:
        return ""
    return f"; its {' and '.join(terms)}: servelab calibrate --url measures this server's time per step"


def _host_terms(pt: Point) -> str:
    """For a host-bound point (``servelab.plan.cohorts.HOST_SHARE``): the terms predict priced for it, the host's share of the
    step and the host's queue in its TTFT (ms; docs/metrics.md, "waves"); "" for another point."""
    if not pt.host_bound:
        return ""
    queue = f", {pt.host_queue_s * 1e3:,.0f} ms of its TTFT in the host's queue" if pt.host_queue_s else ""
    return f"the host binds: its time per step {pt.host_share:.0%} of the GPU's{queue}"


def _ttft_terms(m: Measured) -> str:
    """What the model's TTFT is made of, for a level whose TTFT is off (docs/metrics.md, "predict")."""
    if m.terms.mode in BURST_REQUESTS:
        return "the model's: its wave's chunked prefill, the API server taking a wave's requests in turn"
    if m.terms.running <= 1:
        return f"the model's: the prompt's step and {API_TTFT_S * 1e3:g} ms outside the engine"
    return "the model's: the two steps already scheduled, the step carrying the prompt, its cohort in the API server"


def repeatability(runs: list[RunResult]) -> list[RepeatStats]:
    """How far repeated runs of one load disagree, per closed-loop level they share.

    Raises:
        ServelabError: the runs are not of the same load (compare them with servelab compare instead).
    """
    if any(r.load != runs[0].load for r in runs[1:]):
        raise ServelabError("the runs are not of the same load (concurrency, tokens, closed loop …): repeatability compares repeats of one load")
    return [r for r in repeat_stats([lv for run in runs for lv in run.levels]) if r.rate_rps is None]
