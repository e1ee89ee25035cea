"""What a run asks of its levels: the load (:class:`BenchOptions`), the roofline it compares
against (:class:`Ceiling`) and the progress callbacks it reports to (:class:`BenchHooks`).

``servelab.run.bench`` (a run) and ``servelab.run.levels`` (its levels) both use them;
``servelab.run.measure.bench_options`` resolves a :class:`servelab.settings.Load` into them (same
names and units). A request that cannot fit the server's context is refused here (:func:`check_fits`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from servelab import engines
from servelab.errors import ServelabError
from servelab.load import apis
from servelab.metrics.slo import Objective
from servelab.metrics.summary import LevelSummary
from servelab.plan.planner import bench_ceiling
from servelab.server.endpoint import Endpoint
from servelab.plan.quant import QuantFormat
from servelab.values.records import RequestRecord
from servelab.store.results import RecipeInfo
from servelab.values.specs import Hardware, ModelSpec
from servelab.workloads.datasets import DatasetEntry
from servelab.workloads.sessions import ThinkTime
from servelab.workloads.suites import Workload
from servelab.workloads.traces import Trace


class DoesNotFit(ServelabError):
    """A request of the asked size cannot fit the server's context (nothing was sent)."""


def check_fits(endpoint: Endpoint, input_tokens: int, output_tokens: int) -> None:
    """Refuse, before anything is sent, a request that cannot fit the server's context.

    Raises:
        DoesNotFit: ``input_tokens + output_tokens`` exceeds the context per request.
    """
    limit = endpoint.info.max_model_len
    if limit is not None and input_tokens + output_tokens > limit:
        where = engines.get(endpoint.info.engine).context_limit
        raise DoesNotFit(
            f"a request needs {input_tokens} prompt + {output_tokens} output = {input_tokens + output_tokens} tokens, "
            f"but {endpoint.info.model} at {endpoint.root} allows {limit} tokens {where}; "
            "lower --input-tokens/--output-tokens or raise the server's context length"
        )


@dataclass
class BenchOptions:
    """The load resolved for the levels: a :class:`servelab.settings.Load` with its files read (mix,
    dataset, trace), its defaults filled for the target and its levels repeated
    (``servelab.run.measure.bench_options`` builds it; tests build it directly)."""

    concurrency: list[int]
    requests: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    input_tokens: int = 256
    output_tokens: int = 128
    output_spread: float = 0.0  # each request's max_tokens drawn from output_range() (``--output-spread``)
    prefix_cache: Literal["cold", "warm", "shared-prefix"] = "cold"
    shared_prefix_tokens: int = 512
    ignore_eos: bool | None = None
    chat_template_kwargs: dict | None = None
    seed: int = 0
    request_timeout_s: float = 600.0
    client_procs: int | None = None  # client processes (``--client-procs``); None: servelab.load.workers.auto_procs
    ray_address: str | None = None  # client workers on this Ray cluster's nodes (``--ray``)
    tokenizer_path: str | None = None
    ceiling: Ceiling | None = None
    server_log: Path | None = None
    rates: list[float] | None = None
    closed_loop: Literal["stagger", "burst"] = "stagger"  # how a closed-loop level's streams start (scheduler.closed_loop)
    burstiness: float = 1.0
    max_concurrency: int | None = None
    lang: str = "en"
    instruction: str = ""
    question: str = ""
    dataset: list[DatasetEntry] | None = None  # prompts from a file (``--dataset``); override the shape above
    mix: dict[str, float] | None = None  # workload name → weight (``--mix``); overrides the shape above
    workloads: dict[str, Workload] | None = None  # where the mix's names are looked up
    recipe: RecipeInfo | None = None  # the recipe variant that launched the server, stored with the run
    slo: list[Objective] | None = None  # --slo: goodput and pass/fail per level (metrics/slo.py)
    api: apis.ApiName = "chat"  # --endpoint: the API the requests go through (servelab.load.apis)
    turns: int = 1  # --sessions: requests per session (> 1: each level plays sessions, servelab.run.sessions)
    turn_input_tokens: int | None = None  # --turn-input-tokens: text tokens of each later user message
    think_time: ThinkTime = field(default_factory=ThinkTime)  # --think-time: pause before a session's next turn
    sessions: bool = False  # --sessions: the concurrency levels are sessions kept open
    trace: Trace | None = None  # --trace: one open-loop level replaying these requests at their times
    trace_time_scale: float = 1.0  # --time-scale the trace's times were divided by
    settings: dict | None = None  # the servelab.settings.Load these were resolved from, stored with the run

    def __post_init__(self) -> None:
        """Refuse sessions on an API that takes one prompt (completions: a conversation is chat
        messages), wherever the load came from: ``--sessions``, or a multi-turn workload in ``--mix``
        or the suite; and a multi-turn workload in an open loop (``--rate``).

        Raises:
            ServelabError: naming the options and the fix.
        """
        if not apis.get(self.api).conversations and self.session_mode:
            raise ServelabError("--sessions and multi-turn workloads (agentic) resend a conversation of chat messages: use --endpoint chat or responses")
        if self.rates and self.session_mode:
            raise ServelabError("--rate sends single requests at a rate, and a multi-turn workload (agentic) in --mix plays sessions: drop --rate, or the multi-turn workload")

    @property
    def session_mode(self) -> bool:
        """Each level plays sessions (servelab.run.sessions): --sessions, or a multi-turn workload in the mix."""
        return self.sessions or any(shape.multi_turn for shape, _ in self.shapes())

    def shapes(self) -> list[tuple[Workload, float]]:
        """The request shapes with their weights: the mix's workloads, or one shape from the options."""
        if self.mix:
            return [(self.workloads[name], weight) for name, weight in self.mix.items()]
        single = Workload(name="session" if self.sessions else "", input_tokens=self.input_tokens, max_tokens=self.output_tokens, lang=self.lang,
                          instruction=self.instruction, question=self.question, turns=self.turns, turn_input_tokens=self.turn_input_tokens)  # fmt: skip
        return [(single, 1.0)]

    def output_range(self, max_tokens: int) -> tuple[int, int]:
        """Bounds of a request's max_tokens, tokens, under ``--output-spread s`` (0 ≤ s < 1): uniform
        integers in [⌊n·(1−s)⌋, ⌈n·(1+s)⌉], at least 1, the interval ``vllm bench serve
        --random-range-ratio`` draws its output lengths from (vLLM 0.25,
        vllm/benchmarks/datasets/utils.py, get_sampling_params)."""
        s = self.output_spread
        return max(1, math.floor(max_tokens * (1 - s))), max(1, math.ceil(max_tokens * (1 + s)))

    def draw_output(self, max_tokens: int, index: int) -> int:
        """The max_tokens of request ``index`` of a shape of ``max_tokens``: seeded by (seed, index),
        so a rerun or a resume asks for the same lengths (:meth:`output_range`)."""
        lo, hi = self.output_range(max_tokens)
        return lo if lo == hi else random.Random(f"{self.seed}:{index}").randint(lo, hi)

    def requests_at(self, concurrency: int) -> int | None:
        """Measured requests at a level: ``--requests``, or by default 4 per slot, at least 8, and at
        least 8 per slot up to 512. TTFT p50 of a steady closed loop is a median over the level's
        requests: on vLLM 0.25 (H100, 64 streams, 1,024 in / 256 out, three server starts) it spread
        13.7 % over 256 requests and 8.5 % over 512 (validation/RESULTS-waves-h100.md)."""
        if self.duration_s is not None:
            return None
        return self.requests if self.requests is not None else max(8, 4 * concurrency, min(512, 8 * concurrency))

    def requests_at_rate(self, rate: float) -> int | None:
        """Open loop: ``--requests``, or by default 30 s worth of arrivals, at least 8."""
        if self.duration_s is not None:
            return None
        return self.requests if self.requests is not None else max(8, math.ceil(30 * rate))


@dataclass
class Ceiling:
    """The roofline a bench compares against: model, weight format and hardware (``servelab plan``)."""

    spec: ModelSpec
    fmt: QuantFormat
    hardware: Hardware
    tp: int = 1

    def per_stream(self, batch: int, context: int) -> float:
        """Decode ceiling per stream, tok/s."""
        return bench_ceiling(self.spec, self.fmt, self.hardware, batch=batch, context=context, tp=self.tp)


class BenchHooks(Protocol):
    """Progress callbacks (the CLI draws Rich progress bars with them)."""

    def phase_started(self, concurrency: int, phase: str, total: int | None, duration_s: float | None) -> None: ...
    def record_done(self, record: RequestRecord) -> None: ...
    def prompt_built(self, done: int) -> None: ...
    def level_done(self, summary: LevelSummary) -> None: ...
