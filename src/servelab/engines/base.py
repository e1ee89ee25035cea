"""The engine interface: everything servelab knows about one inference server, in one object.

An engine is a subclass of :class:`Engine` whose instance is registered under the entry-point
group ``servelab.engines`` (``servelab.engines.registry``). The base class is the behaviour of
any OpenAI-compatible server that servelab knows nothing special about (``generic``); an engine
overrides what differs. The generic modules ask the engine object and know no engine themselves:

=====================  ==========================================  ===============================
what                   attributes / methods                        asked by
=====================  ==========================================  ===============================
discovery              ``owned_by``, ``recognise``, ``describe``    ``servelab.server.endpoint``
tokenizer              ``tokenize_body``, ``chat_count``            ``servelab.server.tokenizer``
requests and streams   ``request_fields``, ``connector_options``,   ``servelab.load.client``,
                       ``exact_output_length``, ``context_limit``  ``servelab.run.bench``
Prometheus metrics     ``gauges``, ``spec_decode_prefix``,          ``servelab.metrics.server``
                       ``server_counters``
boot log               ``rules``, ``ready``, ``notable``,           ``servelab.metrics.bootlog``
                       ``strip_prefix``
recipes and launch     ``recipe_name``, ``ready_path``,             ``servelab.recipes``,
                       ``ready_timeout_s``, ``default_port``,       ``servelab.launch``
                       ``container_caches``,
                       ``parallel_flags``, ``cluster_backends``,
                       ``cluster_flags``, ``check_recipe``
flag meanings          ``flags`` (:class:`Flags`),                  ``servelab.rules.lint``
                       ``gpu_memory_utilization_default``
lint                   ``lint_rules``                               ``servelab.rules.lint``
plan                   ``batch_defaults``, ``capture_sizes``,       ``servelab.plan``,
                       ``runtime_memory``,
                       ``quant_formats``                            ``servelab.rules.diagnose``
=====================  ==========================================  ===============================

How to add one: docs/architecture.md ("Adding an engine").
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple

from servelab.values.argv import flag_value, has_flag
from servelab.engines.bootfacts import Rule
from servelab.engines.counters import Scrapes, ServerStats
from servelab.values.specs import Hardware, ModelSpec

if TYPE_CHECKING:
    from servelab.engines.kv_layout import HybridLayout

# get(path) → the JSON body of GET root+path, or None on any failure; post(path, body) → JSON, or raises ServelabError
JsonGet = Callable[[str], Awaitable[object | None]]
JsonPost = Callable[[str, dict], Awaitable[dict]]


class Gauges(NamedTuple):
    """Prometheus gauge names whose peaks are kept (each: spellings tried in order, newest first)."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...]


@dataclass(frozen=True)
class RuntimeMemory:
    """Memory per GPU an engine takes at startup before its KV cache, besides the weights (GiB).

    ``runner`` names the engine's code path that decides it (vLLM: its V1 or V2 model runner)."""

    non_torch_gib: float
    activations_gib: float  # the profiling forward pass's peak above the weights
    sampler_gib: float  # the dummy sampler run's logits and sampling buffers
    cuda_graphs_gib: float  # graph memory counted before the KV cache (0 when captured after it)
    runner: str

    @property
    def total_gib(self) -> float:
        return self.non_torch_gib + self.activations_gib + self.sampler_gib + self.cuda_graphs_gib


@dataclass(frozen=True)
class MoeKernel:
    """Which kernel configuration an engine's fused MoE layer runs for one model, format and GPU: ``config`` the tuned file it looks up
    (its name), ``tuned`` whether the engine ships it (False: its default configuration), ``rate``: what its experts' matrix products reach
    against dense GEMMs of the same FLOPs (the rate ``Engine.compute_peak`` × the calibration's η_c stands for), measured; 1 where not measured;
    ``tiles``: (most tokens in the step, M rows a tile or 0, share of an expert) ascending: that share read again from memory per further tile
    of an expert's tokens (``servelab.plan.roofline.expert_reads``); () or M 0 where each expert is taken as read once."""

    config: str
    tuned: bool
    rate: float = 1.0
    tiles: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True)
class LintFinding:
    """One pitfall found in a recipe: rule id, severity, what in this recipe, and why it matters."""

    rule: str
    severity: Literal["info", "warning", "error"]
    message: str
    why: str


@dataclass(frozen=True)
class Flags:
    """What an engine's server flags mean: the flag for each setting servelab reads from a recipe's
    command (None: the engine has no such flag, or servelab does not read it)."""

    max_model_len: str | None = None
    max_num_seqs: str | None = None
    max_num_batched_tokens: str | None = None
    eager: str | None = None  # turns CUDA graphs off
    gpu_memory: str | None = None  # the fraction of GPU memory the server takes
    speculative: str | None = None
    prefix_cache_off: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    tp: tuple[str, ...] = ()  # spellings of the TP-size flag; the first is the one added
    ep: tuple[str, ...] = ()  # spellings of the EP flag; the first is the one added
    ep_takes_size: bool = False  # the EP flag takes the EP size (= TP size) as its value


class Engine:
    """An OpenAI-compatible server with no known quirks; engines subclass it (see the module docstring).

    Every attribute is a class attribute so a subclass states its facts as plain assignments.
    """

    name: ClassVar[str] = "generic"  # the engine field of results (EndpointInfo.engine)
    title: ClassVar[str] = "an OpenAI-compatible server"  # its name in messages ("vLLM")
    recipe_name: ClassVar[str | None] = None  # the engine field of recipes, when it differs from name
    owned_by: ClassVar[tuple[str, ...]] = ()  # /v1/models card owned_by values (lower case) that identify it

    # requests
    exact_output_length: ClassVar[bool] = False  # honours ignore_eos: outputs are exactly max_tokens
    context_limit: ClassVar[str] = "(max_model_len)"  # what limits one request's context, for messages

    # Prometheus metrics (None: servelab reads no metrics of this engine)
    gauges: ClassVar[Gauges | None] = None
    spec_decode_prefix: ClassVar[str | None] = None  # "<prefix>drafts_total", "…draft_tokens_total", "…accepted_tokens_total"

    # boot log
    rules: ClassVar[list[Rule]] = []
    # a kernel compiled while serving (its name the first group): that window was not a measurement (docs/metrics.md, jit_compile)
    jit_warning: ClassVar[re.Pattern[str] | None] = None
    untuned_moe: ClassVar[str | None] = None  # finding untuned_moe_kernels: what "no tuned MoE kernel config" means, how to tune one
    foreign_model_code: ClassVar[str | None] = None  # finding transformers_backend: when it runs another library's model code
    void_routing: ClassVar[str | None] = None  # finding void_routing_simulation: why its simulated MoE routing is void there
    graph_estimate: ClassVar[str | None] = None  # finding graph_memory_overreserved: why it reserved more for graphs, how to avoid it
    ready: ClassVar[re.Pattern | None] = None
    notable: ClassVar[re.Pattern | None] = None

    # recipes and launch
    largest_capture_flag: ClassVar[str | None] = None  # the server flag that sets its largest CUDA-graph capture size (capture_sizes' largest)
    larger_graphs: ClassVar[str | None] = None  # what raising it did to steps that carry prompts, measured (predict's hint, finding prompt_steps_without_graphs)
    # the argument lists that start this engine's server (the program's base name first, "python" for
    # any python3.X): a recipe's placeholders may fill whole arguments of these only (servelab.recipes.trust)
    launchers: ClassVar[tuple[tuple[str, ...], ...]] = ()
    ready_path: ClassVar[str] = "/v1/models"  # polled until it answers 200
    ready_timeout_s: ClassVar[float] = 600.0
    default_port: ClassVar[int] = 8000  # the port it listens on when the command does not say
    container_caches: ClassVar[tuple[tuple[str, str], ...]] = ()  # (host folder under cache_dir, folder under the container's home)
    cluster_backends: ClassVar[tuple[str, ...]] = ()  # "ray", "native": how it runs on several nodes; the first is the default
    flags: ClassVar[Flags] = Flags()
    gpu_memory_utilization_default: ClassVar[float | None] = None  # the value of flags.gpu_memory when not given
    max_num_seqs_floor: ClassVar[int | None] = None  # its smallest max_num_seqs default over devices (lint: unset above it)

    @property
    def recipe_names(self) -> tuple[str, ...]:
        """The names a recipe's ``engine`` field may use for it."""
        return (self.recipe_name,) if self.recipe_name else (self.name,)

    # --- discovery -----------------------------------------------------------------------------
    async def recognise(self, get: JsonGet) -> bool:
        """True when the server is this engine though its model card did not say so (asked only
        when no engine's ``owned_by`` matched)."""
        return False

    async def describe(self, get: JsonGet, card: dict) -> tuple[str | None, int | None]:
        """(engine version, context tokens per request) of a server found to be this engine.

        Args:
            get: GET a path of the server → its JSON, or None.
            card: the served model's ``/v1/models`` card.
        """
        return None, positive_int(card.get("max_model_len"))

    def hidden_size(self, card: dict) -> int | None:
        """The served model's hidden size as the server's ``/v1/models`` card gives it (None: it does
        not say; vLLM's and SGLang's cards do not), to check a ``--model-config`` against."""
        return None

    def tokenize_body(self, text: str) -> dict:
        """The ``POST /tokenize`` body for ``text`` without special tokens (vLLM's shape, which SGLang shares)."""
        return {"prompt": text, "add_special_tokens": False}

    async def chat_count(self, post: JsonPost, model: str, messages: list[dict], extra: dict) -> int | None:
        """Tokens of ``messages`` with the chat template applied, as the server counts them; None
        when the server has no endpoint for it."""
        return None

    # --- requests ------------------------------------------------------------------------------
    def request_fields(self, *, max_tokens: int, ignore_eos: bool, cold: bool) -> dict:
        """Extra fields of a chat request: exact output length and a cold prefix cache, as this engine spells them."""
        return {"ignore_eos": True} if ignore_eos else {}

    def connector_options(self) -> dict:
        """aiohttp ``TCPConnector`` options for its keep-alive behaviour: connections are kept but
        dropped after 2 s idle, before servers drop theirs (uvicorn: 5 s), so a stale one is never used."""
        return {"keepalive_timeout": 2.0}

    # --- metrics -------------------------------------------------------------------------------
    def server_counters(self, s: Scrapes, stats: ServerStats) -> None:
        """Fill ``stats`` with the counter deltas this engine's metrics give (prompt, cached and
        generated tokens, preemptions, histogram means); spec-decode counters and gauge peaks are
        read generically from ``spec_decode_prefix`` and ``gauges``."""

    # --- boot log ------------------------------------------------------------------------------
    def strip_prefix(self, line: str) -> tuple[str, float | None, str] | None:
        """(message, timestamp in s or None, level) of one of its log lines, or None if the line is not its."""
        return None

    # --- recipes and launch --------------------------------------------------------------------
    def parallel_flags(self, argv: list[str], tp: int, expert_parallel: bool, backend: str | None) -> list[str]:
        """Flags to append for tensor/expert parallelism (and the cluster backend) that ``argv`` lacks."""
        f, extra = self.flags, []
        if f.tp and tp > 1 and not has_flag(argv, *f.tp):
            extra += [f.tp[0], str(tp)]
        if f.ep and expert_parallel and not has_flag(argv, *f.ep):
            extra += [f.ep[0], str(tp)] if f.ep_takes_size else [f.ep[0]]
        return extra

    def cluster_flags(self, nodes: int, rank: int, head: str, port: int) -> list[str]:
        """Its own multi-node flags for node ``rank`` of ``nodes`` (``native`` cluster backend)."""
        return []

    def check_recipe(self, tensor_parallel: int, cluster_backend: str | None) -> tuple[str, str] | None:
        """What this engine cannot run of a recipe with ``tensor_parallel`` GPUs and the cluster
        ``cluster_backend`` (None: one node): (the recipe field at fault, a message naming the
        fix), or None when it can run it."""
        if cluster_backend and cluster_backend not in self.cluster_backends:
            return "cluster", f"{self.name} runs several nodes with {' or '.join(self.cluster_backends)} only; use backend: {self.cluster_backends[0]}"
        return None

    # --- lint and plan -------------------------------------------------------------------------
    # the engine's names of weight quantizations (as its boot log prints them) → servelab plan formats
    quant_formats: ClassVar[dict[str, str]] = {}
    # how predict prices the engine's kernels beyond the calibration (compute_peak, eager_extra_s, moe_layer_extra_s), stated with every prediction
    pricing: ClassVar[str | None] = None

    # --- tuning (servelab tune) ----------------------------------------------------------------
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ()  # the values its flags.kv_cache_dtype takes (empty: not checked)

    def known_flags(self) -> set[str]:
        """The flags servelab reads in this engine's commands (``flags``, ``largest_capture_flag``),
        as recipe names: ``--max-num-seqs`` → ``max_num_seqs``."""
        f = self.flags
        named = [f.max_model_len, f.max_num_seqs, f.max_num_batched_tokens, f.eager, f.gpu_memory, f.speculative, f.prefix_cache_off,
                 f.kv_cache_dtype, f.quantization, self.largest_capture_flag, *f.tp, *f.ep]  # fmt: skip
        return {n.lstrip("-").replace("-", "_") for n in named if n and n.startswith("--")}

    def tuned(self, argv: list[str]) -> dict[str, str | None]:
        """The settings ``servelab predict`` prices, as this server's command ``argv`` gives them
        (None: not given, the default): max-num-seqs, max-num-batched-tokens, max-capture-size,
        gpu-memory-utilization, kv-cache-dtype (text, unchecked) and draft-tokens. The weight format
        is read where the plan reads it (``servelab.rules.lint.quant_of``)."""
        f = self.flags

        def value(flag: str | None) -> str | None:
            return flag_value(argv, flag) if flag else None

        return {"max-num-seqs": value(f.max_num_seqs), "max-num-batched-tokens": value(f.max_num_batched_tokens),
                "max-capture-size": value(self.largest_capture_flag), "gpu-memory-utilization": value(f.gpu_memory),
                "kv-cache-dtype": value(f.kv_cache_dtype), "draft-tokens": str(self.draft_tokens(argv))}  # fmt: skip

    def draft_tokens(self, argv: list[str]) -> int:
        """Speculative decoding's draft tokens per step in the command ``argv`` (0: none, or unknown)."""
        return 0

    def refused(self, argv: list[str]) -> str | None:
        """Why this server would refuse a value in ``argv`` whatever the others are, in one phrase
        naming the flag (a max_num_seqs that is not a positive integer, a memory share outside
        (0, 1], a KV-cache dtype it does not have), or None."""
        f = self.flags
        for flag in (f.max_num_seqs, f.max_num_batched_tokens, self.largest_capture_flag):
            raw = flag_value(argv, flag) if flag else None
            if raw is not None and not (raw.isdecimal() and int(raw) >= 1):
                return f"{flag} {raw!r} is not a positive integer"
        raw = flag_value(argv, f.gpu_memory) if f.gpu_memory else None
        if raw is not None:
            try:
                share = float(raw)
            except ValueError:
                share = -1.0
            if not 0 < share <= 1:
                return f"{f.gpu_memory} {raw!r} is not a share of the memory in (0, 1]"
        raw = flag_value(argv, f.kv_cache_dtype) if f.kv_cache_dtype else None
        if raw is not None and self.kv_cache_dtypes and raw not in self.kv_cache_dtypes:
            return f"{f.kv_cache_dtype} {raw!r} is not one of {', '.join(self.kv_cache_dtypes)}"
        return None

    def point_problem(self, argv: list[str], request_tokens: int) -> str | None:
        """Why this server refuses the combination of values in ``argv``, or cannot serve a request
        of ``request_tokens`` prompt and output tokens with them (None: it starts and serves)."""
        return None

    def lint_rules(self, argv: list[str], concurrencies: list[int]) -> list[LintFinding]:
        """Pitfalls only this engine has, for one resolved variant's server command ``argv`` and the
        closed-loop levels its bench plan runs (the shared rules are in ``servelab.rules.lint``)."""
        return []

    def batch_defaults(self, hw: Hardware) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the server picks on ``hw`` when not told.

        Raises:
            NotImplementedError: servelab does not know this engine's defaults.
        """
        raise NotImplementedError(f"{self.name}: no batch defaults known")

    def compute_peak(self, hw: Hardware, dtype: str, moe: bool) -> float | None:
        """The dense FLOP/s (not TFLOPS) its matrix products reach in ``dtype`` on ``hw``, for
        ``servelab predict`` (before the calibration's η_c): the datasheet peak, unless this
        engine's kernels are known to fall short of it; ``moe``: the model's FFN is a MoE."""
        return hw.peak_flops(dtype)

    def sustained_clock(self, hw: Hardware, dtype: str, moe: bool) -> float:
        """The share of its maximum clock ``hw`` keeps while this engine prefills prompts step after step
        in ``dtype`` (a burst's wave), for ``servelab predict``: the board's power-capped clock
        (``Hardware.power_capped_clock``), unless this engine's rates for that case were measured
        with the cap already in them; ``moe``: the model's FFN is a MoE."""
        return hw.power_capped_clock

    def eager_extra_s(self, dtype: str, layers: int) -> float:
        """Time a step without CUDA graphs adds in ``dtype`` beyond what a BF16 one adds (the
        calibration's t_eager), s, for a model of ``layers`` layers; 0 unless measured."""
        return 0.0

    def eager_host_s(self, spec: ModelSpec, fmt: str, hw: Hardware) -> tuple[float, float]:
        """The host's time to launch one step of ``spec`` without CUDA graphs in weight format ``fmt`` (a servelab format name) on
        ``hw``'s machine, s: (its layers' launches, as a host-bound steady state's step with prompts pays them; with its MoE and MLA
        layers' extras, as a burst's does; ``servelab.plan.predict``), however little GPU work it carries; (0, 0) unless measured."""
        return 0.0, 0.0

    def step_host_s(self, hw: Hardware) -> tuple[float, float, float]:
        """The host's time for one engine step with CUDA graphs on ``hw``'s machine (scheduling, inputs, sampling, outputs): (s for
        a step of one sequence, s more for each other sequence, and the host's queue: the one-sequence host steps per running stream
        a request waits before its first token where the host binds); asynchronously a step takes at least that long, however
        little GPU work it carries (``servelab.plan.predict``); (0, 0, 0) unless measured."""
        return 0.0, 0.0, 0.0

    def moe_layer_extra_s(self, dtype: str, hidden: int, width: int) -> float:
        """Time a MoE layer adds to every step in ``dtype`` beyond what it adds in BF16 (the calibration's ``moe_layer_us``), s,
        for a model of ``hidden`` hidden size whose routed experts are ``width`` wide on one GPU; 0 unless measured."""
        return 0.0

    def moe_kernel(self, spec: ModelSpec, fmt: str, hw: Hardware, tp: int = 1) -> MoeKernel | None:
        """The kernel configuration its fused MoE layers of ``spec`` in weight format ``fmt`` (a servelab format name) run on ``hw``
        at ``tp`` GPUs, known before launch (None: no routed experts, a kernel without tuned configurations, or unknown)."""
        return None

    def mla_heads(self, spec: ModelSpec, hw: Hardware, tp: int = 1) -> int:
        """Query heads (all ``tp`` ranks together) its MLA decode kernel computes for a model of
        ``spec.num_heads`` heads (a kernel that tiles heads pads them up), for ``servelab predict``'s
        attention FLOPs."""
        return spec.num_heads

    def runtime_memory(self, spec: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1) -> RuntimeMemory:
        """Memory per GPU the engine takes before its KV cache, besides the weights.

        Raises:
            NotImplementedError: servelab does not know this engine's accounting.
        """
        raise NotImplementedError(f"{self.name}: no runtime memory model")

    def model_capture_size(self, spec: ModelSpec) -> int | None:
        """The largest CUDA-graph capture size the engine sets for this model where it overrides its default
        (:meth:`capture_sizes`' ``largest``), or None."""
        return None

    def capture_sizes(
        self, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, num_spec_tokens: int = 0, sm100: bool = False, largest: int | None = None
    ) -> list[int] | None:
        """The CUDA-graph capture sizes it picks by default (decode batch sizes, ascending; up to
        ``largest`` tokens where given: ``largest_capture_flag``), or None when servelab does not know
        them. The defaults stand for a run whose settings are unknown."""
        return None

    def kv_layout(
        self, spec: ModelSpec, kv_bytes_per_token: float, state_bytes_per_seq: float, max_num_batched_tokens: int, speculative_tokens: int = 0,
        prefix_caching: bool = False, version: str | None = None, compute_capability: str | None = None,
    ) -> HybridLayout | None:  # fmt: skip
        """How the engine (of release ``version``, None: the one servelab plans by default) lays out
        the KV cache of a model with more than one kind of cache layer (per GPU of ``compute_capability``;
        bytes), or None where the dense formula of ``servelab.plan.memory`` holds."""
        return None

    def planned_version(self, version: str | None) -> str:
        """The release whose memory accounting servelab plans for ``version`` (a release string, or
        None: the default one)."""
        return version or "latest"

    def kv_tokens(self, budget_bytes: float, per_token: float, layout: HybridLayout | None, context: int) -> int | None:
        """KV-cache tokens the engine reports for ``budget_bytes`` of KV memory (``per_token`` bytes
        each; None when nothing grows with context).

        Raises:
            NotImplementedError: servelab does not know this engine's accounting.
        """
        raise NotImplementedError(f"{self.name}: no KV-cache accounting known")


def positive_int(value: object) -> int | None:
    """``value`` as a positive int when a server gave one (int, or a float/str holding one), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None
