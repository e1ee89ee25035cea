"""``servelab explain RUN``: a measured closed-loop run beside ``servelab predict``'s curve for the same
model, hardware, load and server limits, with the named cause of each gap.

Per level: measured and predicted aggregate output tok/s, TPOT p50 and TTFT p50, the errors, the
predicted bottleneck, and the cause: "as predicted" when aggregate tok/s and TPOT agree within
``AGREE`` (noting a TTFT off by more than twice that: the steady-state TTFT the model does not
have, validation/RESULTS-predict.md), with the level's findings (``servelab.diagnose``: prefix-cache
hits, synchronized waves, CUDA-graph padding, server queueing with its cause, a busy client, a
ceiling exceeded — MoE routing not uniform or speculative decoding — preemptions); a gap beyond
``AGREE`` is put on those findings, else on the calibration (this engine × hardware × model family
is not the one it was fitted on).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.diagnose import diagnose
from servelab.errors import ServelabError
from servelab.plan.hardware import Hardware
from servelab.plan.model_spec import ModelSpec
from servelab.plan.predict import Calibration, Point, limits_for, predict, terms
from servelab.plan.quant import QuantFormat
from servelab.results import RunResult

AGREE = 0.15  # a level agrees with the prediction when its aggregate tok/s and TPOT are within 15 %
CAUSES = {  # finding kind → the gap it explains (diagnose.py has the numbers)
    "prefix_cache_contamination": "prefix-cache hits made prefill cheaper than modelled",
    "synchronized_waves": "synchronized waves: TTFT depends on how the waves line up",
    "cudagraph_padding": "CUDA-graph padding",
    "server_queueing": "server queueing",
    "unstable_measurement": "the client was saturated: its timestamps are late",
    "ceiling_exceeded": "faster than the roofline: MoE routing not uniform, or speculative decoding",
    "preemptions": "preemptions: work was recomputed",
}


@dataclass(frozen=True)
class Row:
    """One level: measured beside predicted; errors are (predicted − measured) ÷ measured."""

    concurrency: int
    measured_tok_s: float
    predicted: Point
    measured_tpot_s: float | None
    measured_ttft_s: float | None
    cause: str

    @property
    def tok_s_error(self) -> float:
        return self.predicted.aggregate_tok_s / self.measured_tok_s - 1


def explain(run: RunResult, spec: ModelSpec, fmt: QuantFormat, hw: Hardware, cal: Calibration, *, tp: int = 1) -> list[Row]:
    """The rows for a run's closed-loop levels (module docstring).

    Raises:
        ServelabError: the run has no closed-loop level with successful requests.
    """
    boot = run.boot
    p, o = run.load.input_tokens, run.load.output_tokens
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=p, output_tokens=o, max_num_seqs=boot.max_num_seqs if boot else None,
                        max_num_batched_tokens=boot.max_num_batched_tokens if boot else None,
                        capture_sizes=boot.cudagraph_sizes if boot else None)  # fmt: skip
    findings = diagnose(run, boot.cudagraph_sizes if boot else None)
    rows = []
    for lv in run.levels:
        if lv.rate_rps is not None or not lv.ok or not lv.output_throughput_tok_s:
            continue
        pt = predict(terms(spec, fmt, hw, concurrency=lv.concurrency, input_tokens=p, output_tokens=o, limits=limits, tp=tp),
                     cal, concurrency=lv.concurrency, output_tokens=o, mode=run.load.closed_loop)  # fmt: skip
        tpot = lv.tpot_ms.p50 / 1e3 if lv.tpot_ms.p50 else None
        ttft = lv.ttft_ms.p50 / 1e3 if lv.ttft_ms.p50 else None
        mine = [f for f in findings if f.evidence.get("concurrency") == lv.concurrency and f.kind in CAUSES]
        agree = abs(pt.aggregate_tok_s / lv.output_throughput_tok_s - 1) <= AGREE and (tpot is None or abs(pt.tpot_s / tpot - 1) <= AGREE)
        named = [CAUSES[f.kind] + (f" ({f.evidence['cause']})" if f.kind == "server_queueing" else "") for f in mine]
        if agree:
            ttft_off = ttft is not None and abs(pt.ttft_s / ttft - 1) > 2 * AGREE
            cause = "as predicted" + (" but TTFT (the model's is prefill plus one step)" if ttft_off else "") + "".join(f"; {n}" for n in named)
        elif named:
            cause = "; ".join(named)
        else:
            cause = f"the calibration ({cal.name}) does not fit this engine × hardware × model"
        rows.append(Row(lv.concurrency, lv.output_throughput_tok_s, pt, tpot, ttft, cause))
    if not rows:
        raise ServelabError("the run has no closed-loop level with successful requests to explain")
    return rows
