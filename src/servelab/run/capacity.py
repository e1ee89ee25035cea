"""The capacity search: the largest load (closed-loop streams, or open-loop requests/s) whose level
meets every SLO (``servelab capacity``; SLOs: ``servelab.metrics.slo``).

From a start (``servelab predict``'s estimate when the model and hardware are known, else 1) the
load grows ×4 until a probe misses, or shrinks ÷4 until one passes; then the bracket [pass, miss]
is bisected at its geometric middle until ``miss ≤ pass × 1.1`` (closed loop: or one stream
apart). The boundary (the largest passing load) is then measured ``repeats`` more times and the
spread of their goodput reported. A probe is one bench level, long enough for a steady state
(the caller's load: at least 3 request durations, diagnose's short_window rule). ×4 rather than ×2:
a capacity 40× the start is bracketed in 3 probes instead of 6, and the bisection costs the same
log₂ steps either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from servelab.errors import ServelabError
from servelab.run.measure import bench_options
from servelab.metrics.slo import SloResult, evaluate
from servelab.run.options import BenchOptions
from servelab.plan.calibration import calibration
from servelab.plan.checkpoint import weight_format
from servelab.plan.hardware import load_hardware
from servelab.plan.model_spec import load_model
from servelab.plan.band import Band, band_for, point_band
from servelab.plan.curves import GROWTH, PredictedLoad, price, within
from servelab.plan.pricing import class_band
from servelab.store.results import RunResult, load_run
from servelab.settings import Load, Target

Dimension = Literal["streams", "sessions", "rate", "trace"]  # what a probe's load is: streams, sessions kept open, requests/s, × trace speed

PRECISION = 1.1  # the bracket is within 10 %
MAX_PROBES = 24  # a search that has not converged by then stops and says so
MAX_PROBE_S = 600.0  # the longest a rate probe's requests may take to arrive (slowest_rate)
QUEUED = 4  # the streams worth probing per server slot: beyond 4 × max_num_seqs each request waits 3 turns or more in the queue before its own
DEFAULT_MAX: dict[str, float] = {"streams": 4096, "sessions": 4096, "rate": 10_000.0, "trace": 1_000.0}  # without --max-load or the server's limits


class Probe(BaseModel):
    """One measured load: ``load`` streams (closed loop) or requests/s (open loop), its SLO result."""

    load: float
    passed: bool
    slo: SloResult
    repeat: bool = Field(False, description="A re-measurement of the boundary, not a search step.")


class Capacity(BaseModel):
    """The search's answer: the largest passing load (None when even the smallest probe missed),
    every probe in order, whether it converged, and the boundary's repeats."""

    closed_loop: bool
    capacity: float | None
    probes: list[Probe]
    converged: bool
    bracket: tuple[float | None, float | None] = Field(description="(largest passing, smallest missing) load probed.")
    capped: float | None = Field(None, description="The bound the search stopped at with every probe passing (Prober.bound): the capacity is at least it.")

    @property
    def boundary_passes(self) -> tuple[int, int]:
        """(passed, measured) at the capacity: the search probe and its repeats. Fewer passes than
        measurements: the boundary is within the run-to-run noise of the SLO."""
        at = [p for p in self.probes if p.load == self.capacity]
        return sum(p.passed for p in at), len(at)

    @property
    def spread(self) -> tuple[float, float] | None:
        """(min, max) goodput req/s over the boundary's measurements (search probe and repeats)."""
        at = [p.slo.goodput_rps for p in self.probes if p.load == self.capacity and p.slo.goodput_rps is not None]
        return (min(at), max(at)) if at else None


def search(probe: Callable[[float], SloResult], *, closed_loop: bool = True, start: float = 1.0, repeats: int = 2,
           minimum: float | None = None, maximum: Callable[[], float] = lambda: math.inf) -> Capacity:  # fmt: skip
    """Find the capacity with ``probe(load) -> SloResult`` (module docstring).

    Args:
        probe: measures one level at ``load`` (an int number of streams in closed loop).
        start: the first load (``servelab predict``'s estimate, or 1).
        repeats: extra measurements of the boundary.
        minimum: the smallest load worth probing, besides the search's own floor (closed loop: 1
            stream; open loop: start ÷ 4⁴): a rate at which a probe's requests would take longer
            than ``MAX_PROBE_S`` to arrive (:func:`slowest_rate`).
        maximum: the largest load worth probing, asked before each probe (it may fall as the
            probes learn the server's limits: :class:`Prober` ``bound``). A pass there ends the
            growth: the capacity is then "at least" it (``Capacity.capped``).
    """
    start = min(start, maximum())
    floor = min(max(minimum or 0.0, 1.0 if closed_loop else start / GROWTH**4), maximum())
    probes: list[Probe] = []

    def measure(load: float, repeat: bool = False) -> tuple[float, bool]:
        """Probe ``load`` (rounded to whole streams in closed loop) unless it was probed already."""
        load = float(max(1, round(load))) if closed_loop else load
        known = next((p for p in probes if p.load == load and not p.repeat), None)
        if known is not None and not repeat:
            return load, known.passed
        result = probe(int(load) if closed_loop else load)
        probes.append(Probe(load=load, passed=result.passed, slo=result, repeat=repeat))
        return load, result.passed

    lo: float | None = None  # largest passing load
    hi: float | None = None  # smallest missing load
    load, passed = measure(max(start, floor))
    if passed:
        lo = load
        while hi is None and len(probes) < MAX_PROBES and load < maximum():  # grow until a probe misses or the bound
            load, passed = measure(min(load * GROWTH, maximum()))
            lo, hi = (load, hi) if passed else (lo, load)
    else:
        hi = load
        while lo is None and load > floor and len(probes) < MAX_PROBES:  # shrink until one passes
            load, passed = measure(max(floor, load / GROWTH))
            lo, hi = (load, hi) if passed else (lo, load)

    def narrow() -> bool:
        return lo is not None and hi is not None and hi > lo * PRECISION and not (closed_loop and hi - lo <= 1)

    while narrow() and len(probes) < MAX_PROBES:  # bisect at the geometric middle
        load, passed = measure(math.sqrt(lo * hi))
        if load in (lo, hi):
            break
        lo, hi = (load, hi) if passed else (lo, load)
    converged = not narrow() and (hi is not None or len(probes) < MAX_PROBES)
    if lo is not None:
        for _ in range(repeats):
            measure(lo, repeat=True)
    capped = maximum() if hi is None and lo is not None and lo >= maximum() else None
    return Capacity(closed_loop=closed_loop, capacity=lo, probes=probes, converged=converged, bracket=(lo, hi), capped=capped)


def slowest_rate(load: Load, kind: Dimension) -> float | None:
    """The smallest request rate worth a probe: ``--requests`` arriving within ``MAX_PROBE_S``
    (``--start 0.001`` with 100 requests would wait a day); None when the search is not over rates
    or the probe is a ``--duration``."""
    return load.requests / MAX_PROBE_S if kind == "rate" and load.requests else None


def dimension(load: Load, *, open_loop: bool, sessions: bool) -> Dimension:
    """What the search varies: a trace's speed, sessions kept open, a request rate or streams.

    Raises:
        ServelabError: settings that contradict each other (``Load.traffic``), or sessions with a
            trace or the open loop.
    """
    if sessions and (open_loop or load.trace is not None):
        raise ServelabError("--sessions searches sessions kept open (a closed loop): drop --open-loop and --trace")
    load.model_copy(update={"sessions": [1] if sessions else None}).traffic  # noqa: B018 (checks the settings)
    return "trace" if load.trace is not None else "sessions" if sessions else "rate" if open_loop else "streams"


def probe_load(load: Load, kind: Dimension, value: float) -> Load:
    """The load of one probe at ``value`` of the searched ``kind``."""
    update = {"trace": {"time_scale": value}, "sessions": {"sessions": [int(value)]}, "rate": {"rates": [value]}, "streams": {"concurrency": [int(value)]}}
    return load.model_copy(update=update[kind])


def probe_name(index: int, kind: Dimension, value: float) -> str:
    """A probe's directory, numbered in search order: a rerun with the same --output finds its
    finished probes again."""
    return f"{index:02d}-" + (f"x{value:.4g}" if kind == "trace" else f"r{value:.4g}" if kind == "rate" else f"c{int(value)}")


class Prober:
    """capacity's probes: each one bench level of ``load`` at a searched value, measured by
    ``measure(options, run_dir) -> RunResult`` (``servelab.run.measure`` under the caller's progress
    display) into ``base``/NN-…; a finished probe of an earlier search with the same ``base`` is
    read back instead, and a probe during which the server compiled a kernel (JIT) is measured once
    more (``-again``), the second counting.

    Raises (on call):
        ServelabError: a probe that measured nothing (the run's reason).
    """

    def __init__(self, base: Path, load: Load, kind: Dimension, embedded: bool, measure: Callable[[BenchOptions, Path], RunResult],
                 say: Callable[[str], None], maximum: float | None = None) -> None:  # fmt: skip
        self.base, self.load, self.kind, self.embedded, self.measure, self.say = base, load, kind, embedded, measure, say
        self.done = 0
        self.bounds: dict[str, float] = {"--max-load": maximum} if maximum else {}
        if kind in ("streams", "sessions") and load.requests:
            self.bounds["--requests (a stream needs a request)"] = float(load.requests)

    def bound(self) -> float:
        """The largest load worth probing: the bound given (else :data:`DEFAULT_MAX`), ``--requests``
        for streams, and what the probes' boot logs said of the server (:meth:`learn`)."""
        return min(self.bounds.values(), default=DEFAULT_MAX[self.kind])

    def bound_reason(self) -> str:
        """What sets :meth:`bound`."""
        return min(self.bounds, key=self.bounds.__getitem__) if self.bounds else "servelab's default (--max-load)"

    def learn(self, run: RunResult) -> None:
        """Lower the bound of streams and sessions to ``QUEUED`` × the server's own limits, where a
        probe's boot log gives them: its max_num_seqs (llama.cpp: slots), and the requests its KV
        cache holds at the load's prompt and output tokens (tokens ÷ (input + output)). Streams
        beyond the limits wait in the server's queue, which a TTFT objective may allow."""
        boot = run.boot
        if boot is None or self.kind not in ("streams", "sessions"):
            return
        if seqs := (boot.max_num_seqs or boot.slots):
            self.bounds[f"{QUEUED} × the server's max_num_seqs"] = float(QUEUED * seqs)
        per_request = (self.load.input_tokens or 0) + (self.load.output_tokens or 0)
        if boot.kv_cache_tokens and per_request and self.kind == "streams":
            self.bounds[f"{QUEUED} × the requests its KV cache holds"] = float(QUEUED * max(1, boot.kv_cache_tokens // per_request))

    def _earlier(self, name: str) -> SloResult | None:
        for done_dir in (self.base / f"{name}-again", self.base / name):  # a probe measured again (a JIT compile in the first) counts by its second
            if (done_dir / "run.json").is_file():
                earlier, records = load_run(done_dir)
                level = earlier.levels[0] if earlier.status == "complete" and earlier.levels else None
                if level is not None and (done_dir.name != name or not level.jit_kernels):
                    return level.slo or evaluate(self.load.slo, records, level.request_throughput_rps, level.output_throughput_tok_s)
        return None

    def __call__(self, value: float) -> SloResult:
        self.done += 1
        name = probe_name(self.done, self.kind, value)
        if (earlier := self._earlier(name)) is not None:
            return earlier
        options = bench_options(probe_load(self.load, self.kind, value), self.embedded)
        out = self.base / name
        run = self.measure(options, out)
        if run.levels and run.levels[0].jit_kernels:  # a kernel compiled inside the window: not a measurement, once more
            self.say(f"probe {name}: the server compiled {', '.join(run.levels[0].jit_kernels)} during it; measuring it again")
            out = self.base / f"{name}-again"
            run = self.measure(options, out)
        if not run.levels or run.levels[0].slo is None:
            raise ServelabError(f"probe {name} measured nothing ({run.partial_reason or run.status}); see {out}")
        self.learn(run)
        result = run.levels[0].slo  # each level is checked against the load's objectives as it ends
        self.say(f"probe {name}: {'pass' if result.passed else 'miss'}" + (f", goodput {result.goodput_rps:.2f} req/s" if result.goodput_rps else ""))
        return result


class Predicted(BaseModel):
    """``servelab predict``'s capacity for a search's start: the largest concurrency within the
    objectives (None: not even one stream), the bottleneck there, and its band: the capacity were every
    predicted time (1 ± ``half_width``, the family class's tok/s band, or the host's where the start is host-bound, at least ``FLOOR_BAND``:
    ``servelab.plan.pricing.class_band``) times itself (``servelab.plan.band``, ``servelab.plan.curves.within``)."""

    streams: int | None
    bottleneck: str | None
    bracket: tuple[int, int]
    band: Band
    half_width: float


def predicted_start(target: Target, load: Load) -> Predicted:
    """``servelab predict``'s largest concurrency within the load's objectives for the target's
    model and hardware, its bottleneck there and its band (module docstring: where the search starts).

    Raises:
        ServelabError: no model to predict (``--model-config`` or ``--model``), one that cannot be
            read, or one that does not fit (plan's reason).
    """
    model = target.roofline_model or target.model
    if model is None:
        raise ServelabError("--hardware needs the model for the prediction: give --model-config (a catalog name, config.json or Hub id)")
    spec = load_model(model)
    one = {"quant": target.quant, "tp": 1, "draft-tokens": 0, "acceptance": 0.0, "max-num-seqs": None, "max-num-batched-tokens": None, "routing": 1.0,
           "max-capture-size": None}  # the engine's defaults at TP 1  # fmt: skip
    fmt = weight_format(target.quant, spec)
    curves, unfit = price(spec, load_hardware(target.hardware), calibration(None, spec, fmt), [one],
                          PredictedLoad(load.input_tokens, load.output_tokens, [1]))  # fmt: skip
    if not curves:
        raise ServelabError(unfit[0][1])
    band = band_for(spec, fmt.name)
    got = within(curves[0], load.slo, class_band(band))
    if got.streams and (at := curves[0].at(got.streams)).host_bound:  # a host-bound start: the host's band, as predict shows it
        band = point_band(band, at.host_share)
        got = within(curves[0], load.slo, class_band(band))
    return Predicted(streams=got.streams, bottleneck=got.bottleneck, bracket=got.band, band=band, half_width=class_band(band))
