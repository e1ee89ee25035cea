"""Recipes: a server described in YAML, and its variants resolved to exact argument lists.

A recipe names the engine and model, how to run the server (``command``: an argument list, or a
string split once with ``shlex`` *before* any value is filled in, so a value can never become
extra arguments or shell code), optionally a container image, ``defaults`` for its
``{placeholders}``, environment variables, tensor/expert parallelism, the cluster hosts, readiness
(URL and timeout) and the benchmark plan to run once the server is ready. ``variants`` (or
``servelab sweep --vary``) give placeholder values to try one after the other.

A value for a name that the command does not use as a placeholder becomes a flag appended to the
command: ``max_num_seqs=64`` → ``--max-num-seqs 64``; ``enforce_eager=true`` → ``--enforce-eager``;
``false`` leaves it out. Placeholders follow Python's ``str.format`` (as spark-vllm-docker recipes
do): ``{{`` and ``}}`` are literal braces, e.g. in a JSON argument.

The community's DGX Spark format (eugr/spark-vllm-docker ``recipe_version: "1"``; see
../shared/reference/anchors-serving-ops.md §B) is read too and converted on load.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PositiveFloat, PositiveInt, PrivateAttr, ValidationError, field_validator

from servelab.errors import ServelabError
from servelab.launch.process import free_port
from servelab.yamlfile import Lines, line_of, read_yaml_lines

Engine = Literal["vllm", "sglang", "llama.cpp", "trtllm", "custom"]

# Readiness per engine: the path polled until it answers 200, and the default timeout (s).
# vLLM: /health is refused until the engine is built (server-facts.md §2.2); weight loading,
# torch.compile and CUDA-graph capture take 5-15 minutes on big models, hence 900 s at least.
# SGLang: /health is 503 until its warm-up request has run (server-facts.md, SGLang endpoints).
# llama.cpp: /health is 503 "Loading model", then 200 (server-facts.md, llama.cpp endpoints).
# TensorRT-LLM may build its engine at start: 1800 s. A custom server: /v1/models.
READY_PATH = {"vllm": "/health", "sglang": "/health", "llama.cpp": "/health", "trtllm": "/health", "custom": "/v1/models"}
READY_TIMEOUT_S = {"vllm": 900.0, "sglang": 900.0, "llama.cpp": 300.0, "trtllm": 1800.0, "custom": 600.0}
# The port each engine listens on when the command does not say (their --port defaults).
DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "llama.cpp": 8080, "trtllm": 8000, "custom": 8000}


@dataclass(frozen=True)
class EngineFlags:
    """The flags servelab adds for ``tensor_parallel`` / ``expert_parallel`` when the command lacks them."""

    tp: tuple[str, ...] = ()  # spellings of the TP-size flag; the first is the one added
    ep: tuple[str, ...] = ()  # spellings of the EP flag; the first is the one added
    ep_takes_size: bool = False  # the EP flag takes the EP size (= TP size) as its value


# vLLM: vllm/engine/arg_utils.py (-tp/--tensor-parallel-size, --enable-expert-parallel/-ep);
# SGLang: sglang/srt/server_args.py (--tp-size/--tp, --ep-size/--expert-parallel-size);
# TensorRT-LLM: trtllm-serve --tp_size/--ep_size.
ENGINE_FLAGS = {
    "vllm": EngineFlags(tp=("--tensor-parallel-size", "-tp"), ep=("--enable-expert-parallel", "-ep")),
    "sglang": EngineFlags(tp=("--tp-size", "--tp", "--tensor-parallel-size"), ep=("--ep-size", "--expert-parallel-size"), ep_takes_size=True),
    "trtllm": EngineFlags(tp=("--tp_size",), ep=("--ep_size",), ep_takes_size=True),
}
SHELL_TOKENS = {"&&", "||", ";", "|", ">", ">>", "<", "&", "$(", "`"}
SECRET_WORDS = ("key", "token", "secret", "password")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _scalar(value: Any) -> str:
    """YAML scalars as the text they stand for (true → "true"); anything else is an error."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError("give a string, number or boolean")


Scalar = Annotated[str, BeforeValidator(_scalar)]


class Container(BaseModel):
    """Run the server in a container (``docker run``)."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(description="Image, e.g. vllm/vllm-openai:v0.11.0 (placeholders allowed).")
    gpus: str | None = Field("all", description="docker run --gpus; null for none.")
    ipc: str | None = Field("host", description="docker run --ipc (host: PyTorch shared memory without a size limit).")
    shm_size: str | None = Field(None, description="docker run --shm-size, when ipc is not host.")
    network: str = Field("host", description="docker run --network; with anything but host the port is published.")
    cache_dir: str = Field("~/.cache", description="Host folder holding huggingface/, vllm/, flashinfer/ caches (and ~/.triton).")
    cache_volumes: bool = Field(True, description="Mount model-weight, torch.compile, FlashInfer and Triton caches from the host.")
    volumes: list[str] = Field(default_factory=list, description="More -v HOST:CONTAINER mounts.")
    options: list[str] = Field(default_factory=list, description="More docker run arguments.")


class Cluster(BaseModel):
    """Several nodes: the head (first host) and workers, reached over ssh (loopback runs locally)."""

    model_config = ConfigDict(extra="forbid")
    hosts: list[str] = Field(min_length=2, description="Head first, then workers (ssh destinations).")
    backend: Literal["ray", "native"] | None = Field(None, description="ray (vLLM default) or native (--nnodes/--node-rank; SGLang).")
    ray_port: PositiveInt = 6379
    dist_port: PositiveInt = Field(29501, description="native: the rendezvous port on the head.")
    ray_args: list[str] = Field(default_factory=list, description="More `ray start` arguments, e.g. --num-gpus=1.")
    ssh: list[str] = Field(default_factory=list, description="More ssh arguments, e.g. [-i, ~/.ssh/spark].")
    ready_timeout_s: PositiveFloat = Field(300.0, description="How long the Ray cluster may take to show every node.")


class Ready(BaseModel):
    """When the server counts as started."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, description="URL polled until 200; default the engine's health path on the head.")
    timeout_s: PositiveFloat | None = Field(None, description="Seconds to wait; default per engine (vLLM 900).")


class BenchPlan(BaseModel):
    """What ``servelab bench`` runs once the server is ready (its options, same names and units)."""

    model_config = ConfigDict(extra="forbid")
    concurrency: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4], min_length=1)
    rates: list[PositiveFloat] | None = None
    burstiness: PositiveFloat = 1.0
    max_concurrency: PositiveInt | None = None
    requests: PositiveInt | None = None
    duration_s: PositiveFloat | None = None
    warmup: Annotated[int, Field(ge=0)] | None = None
    input_tokens: PositiveInt = 256
    output_tokens: PositiveInt = 128
    prefix_cache: Literal["cold", "warm", "shared-prefix"] = "cold"
    shared_prefix_tokens: PositiveInt = 512
    ignore_eos: bool | None = None
    chat_template_kwargs: dict | None = None
    seed: int = 0
    request_timeout_s: PositiveFloat = 600.0
    api_key_env: str = Field("SERVELAB_API_KEY", description="Environment variable holding the API key (never stored).")

    def max_in_flight(self) -> int:
        """The most requests the plan keeps in flight (open loop: its cap, or 0 when uncapped)."""
        return (self.max_concurrency or 0) if self.rates else max(self.concurrency)


class Recipe(BaseModel):
    """A server recipe (YAML). See the module docstring and README "Recipes"."""

    model_config = ConfigDict(extra="forbid")
    name: str
    engine: Engine
    model: str | None = Field(None, description="Model id or path; the {model} placeholder.")
    description: str | None = None
    command: list[str] = Field(min_length=1, description="The server's argument list (a string is split with shlex).")
    container: Container | None = None
    defaults: dict[str, Scalar] = Field(default_factory=dict)
    env: dict[str, Scalar] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list, description="Variables passed through from servelab's environment (secrets: HF_TOKEN).")
    tensor_parallel: PositiveInt = 1
    expert_parallel: bool = False
    cluster: Cluster | None = None
    ready: Ready = Field(default_factory=Ready)
    hardware: str | None = Field(None, description="Hardware profile for `servelab lint` (see servelab plan).")
    bench: BenchPlan = Field(default_factory=BenchPlan)
    variants: list[dict[str, Scalar]] = Field(default_factory=list)
    _path: Path | None = PrivateAttr(None)
    _lines: Lines = PrivateAttr(default_factory=dict)
    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = shlex.split(value.replace("\\\n", " "))
            except ValueError as exc:
                raise ValueError(f"cannot split the command: {exc}") from None
        if isinstance(value, list):
            value = [_scalar(v) if isinstance(v, (int, float, bool)) else v for v in value]
            bad = [v for v in value if v in SHELL_TOKENS or (isinstance(v, str) and v.startswith(("$(", "`")))]
            if bad:
                raise ValueError(f"uses shell syntax ({bad[0]!r}); servelab runs one program with an argument list, no shell")
        return value

    @property
    def notes(self) -> list[str]:
        """What the import of a foreign format left out (e.g. spark-vllm-docker mods)."""
        return self._notes

    @property
    def source(self) -> str:
        """Where the recipe came from, for messages."""
        return str(self._path) if self._path else f"recipe {self.name!r}"

    def where(self, *loc: str | int) -> str:
        """``FILE, line N`` for a key path, for error messages."""
        line = line_of(self._lines, loc)
        return f"{self.source}, line {line}" if line else self.source

    def sha256(self) -> str:
        """Hash of the recipe's content (stored with every run it launched)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def backend(self) -> Literal["ray", "native"] | None:
        """How the nodes of a cluster work together: ``cluster.backend``, else ray for vLLM, native otherwise."""
        if self.cluster is None:
            return None
        return self.cluster.backend or ("ray" if self.engine == "vllm" else "native")

    def templates(self) -> list[tuple[tuple, str]]:
        """Every text that may hold ``{placeholders}``, with its key path: command items, env
        values, the ready URL and the container image."""
        out: list[tuple[tuple, str]] = [(("command", i), arg) for i, arg in enumerate(self.command)]
        out += [(("env", k), v) for k, v in self.env.items()]
        out += [(("ready", "url"), self.ready.url)] if self.ready.url else []
        return out + ([(("container", "image"), self.container.image)] if self.container else [])

    def placeholders(self) -> set[str]:
        """Names used as ``{placeholders}`` anywhere they are allowed."""
        return {name for _, text in self.templates() for _, name, _, _ in string.Formatter().parse(text) if name}

    def resolve(self, values: Mapping[str, str] | None = None, label: str = "default") -> Resolved:
        """The exact server command for one variant: defaults, then ``values``, filled in.

        Args:
            values: placeholder values of this variant (``--set``/``--vary``/``variants``).
            label: the variant's name, for messages and run directories.

        Raises:
            ServelabError: a placeholder has no value (naming the file, line and fix), or a
                value is malformed.
        """
        values = dict(values or {})
        used = self.placeholders()
        merged: dict[str, str] = {"tensor_parallel": str(self.tensor_parallel), **self.defaults, **values}
        if self.model is not None:
            merged.setdefault("model", self.model)
        if "port" not in merged:
            merged["port"] = str(free_port() if "port" in used else DEFAULT_PORT[self.engine])
        if used & {"embedded_llama_server", "embedded_model", "embedded_chat_template"}:
            from servelab.local import chat_template_path, model_path, server_program

            merged.setdefault("embedded_llama_server", str(server_program()))
            merged.setdefault("embedded_model", str(model_path()))
            merged.setdefault("embedded_chat_template", str(chat_template_path()))

        def fill(text: str, *loc: str | int) -> str:  # the syntax was checked when the recipe was parsed
            out = []
            for literal, name, _, _ in string.Formatter().parse(text):
                out.append(literal)
                if name is None:
                    continue
                if name not in merged:
                    raise ServelabError(
                        f"{self.where(*loc)}: placeholder {{{name}}} has no value; add it to defaults or pass --set {name}=VALUE"
                    )
                out.append(merged[name])
            return "".join(out)

        argv = [fill(arg, "command", i) for i, arg in enumerate(self.command)]
        env = {k: fill(v, "env", k) for k, v in self.env.items()}
        image = fill(self.container.image, "container", "image") if self.container else None
        ready_url = fill(self.ready.url, "ready", "url") if self.ready.url else None
        for name, value in values.items():
            if name not in used and name not in ("port", "tensor_parallel", "model"):
                argv += _flag(name, value)
        tp = merged["tensor_parallel"]
        if not tp.isdigit() or int(tp) < 1:
            raise ServelabError(f"tensor_parallel {tp!r} is not a positive integer")
        argv += self._parallel_flags(argv, int(tp))
        head = self.cluster.hosts[0] if self.cluster else "127.0.0.1"
        url = f"http://{head}:{merged['port']}"
        return Resolved(
            label=label,
            values=values,
            argv=argv,
            env=env,
            image=image,
            port=_port(merged["port"]),
            url=url,
            ready_url=ready_url or url + READY_PATH[self.engine],
            ready_timeout_s=self.ready.timeout_s or READY_TIMEOUT_S[self.engine],
            tensor_parallel=int(tp),
        )

    def _parallel_flags(self, argv: list[str], tp: int) -> list[str]:
        """TP/EP (and Ray) flags the engine needs and the command does not give."""
        flags = ENGINE_FLAGS.get(self.engine)
        extra: list[str] = []
        if flags and tp > 1 and not has_flag(argv, *flags.tp):
            extra += [flags.tp[0], str(tp)]
        if flags and self.expert_parallel and not has_flag(argv, *flags.ep):
            extra += [flags.ep[0], str(tp)] if flags.ep_takes_size else [flags.ep[0]]
        if self.engine == "vllm" and self.backend() == "ray" and not has_flag(argv, "--distributed-executor-backend"):
            extra += ["--distributed-executor-backend", "ray"]
        return extra


@dataclass
class Resolved:
    """One variant of a recipe, ready to launch: every placeholder filled in."""

    label: str
    values: dict[str, str]
    argv: list[str]  # the server's argument list (inside the container, on the head)
    env: dict[str, str]
    image: str | None
    port: int
    url: str  # server root, http://HEAD:PORT
    ready_url: str
    ready_timeout_s: float
    tensor_parallel: int


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ServelabError(f"port {value!r} is not a TCP port; pass --set port=8000")
    return int(value)


def _flag(name: str, value: str) -> list[str]:
    """``max_num_seqs``, ``64`` → ``["--max-num-seqs", "64"]``; true → the bare flag; false → nothing."""
    flag = "--" + name.replace("_", "-")
    if value.lower() == "true":
        return [flag]
    if value.lower() == "false":
        return []
    return [flag, value]


def _flag_names(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0].replace("_", "-") if a.startswith("--") else a for a in argv]


def has_flag(argv: list[str], *names: str) -> bool:
    """True when ``argv`` gives any of ``names`` (``--x v``, ``--x=v``; ``_`` and ``-`` alike)."""
    wanted = {n.replace("_", "-") for n in names}
    return any(a in wanted for a in _flag_names(argv))


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``--x v`` or ``--x=v``), or None."""
    wanted = {n.replace("_", "-") for n in names}
    found = None
    for i, a in enumerate(argv):
        name = a.split("=", 1)[0].replace("_", "-") if a.startswith("--") else a
        if name in wanted:
            found = a.split("=", 1)[1] if "=" in a and a.startswith("--") else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def is_secret(name: str) -> bool:
    """True for names like ``--api-key``, ``--hf-token``, ``HF_TOKEN`` (word match: ``--max-num-batched-tokens`` is not)."""
    return any(w in SECRET_WORDS for w in re.split(r"[-_]+", name.lower()))


def redact(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking flags and variables (``--api-key X``,
    ``--hf-token=X``, ``HF_TOKEN=X``) replaced by ``***``; for anything stored or printed."""
    out: list[str] = []
    hide = False
    for a in argv:
        name, eq, _ = a.partition("=")
        if hide:
            out.append("***")
            hide = False
        elif is_secret(name) and eq:
            out.append(name + "=***")
        else:
            hide = a.startswith("-") and is_secret(name)
            out.append(a)
    return out


def parse_assignments(items: list[str], option: str) -> dict[str, list[str]]:
    """``["max_num_seqs=64,256", "kv_cache_dtype=fp8"]`` → ``{"max_num_seqs": ["64", "256"], …}``.

    Raises:
        ServelabError: an item is not ``NAME=V1[,V2…]`` (naming ``option``).
    """
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not NAME_RE.fullmatch(name) or not values.strip():
            raise ServelabError(f"{option} {item!r}: give NAME=VALUE (e.g. {option} max_num_seqs=64{',256' if option == '--vary' else ''})")
        out[name] = [v.strip() for v in values.split(",")] if option == "--vary" else [values]
    return out


def expand(recipe: Recipe, vary: dict[str, list[str]], fixed: dict[str, str]) -> list[dict[str, str]]:
    """The variants to run: every combination of ``vary`` (``--vary``), else the recipe's
    ``variants``, else the defaults alone; each with ``fixed`` (``--set``) applied."""
    if vary:
        combos = [dict(zip(vary, combo, strict=True)) for combo in itertools.product(*vary.values())]
    else:
        combos = [dict(v) for v in recipe.variants] or [{}]
    return [{**c, **fixed} for c in combos]


def variant_label(values: Mapping[str, str], fixed: Mapping[str, str] | None = None) -> str:
    """A variant's name: its own values as ``a=1,b=2`` (``--set`` values left out), or "default"."""
    own = {k: v for k, v in values.items() if k not in (fixed or {})}
    return ",".join(f"{k}={v}" for k, v in own.items()) or "default"


def variant_dir(label: str) -> str:
    """A directory name for a variant label."""
    return re.sub(r"[^A-Za-z0-9._=,-]+", "_", label)[:120]


_SECTIONS = {(): Recipe, ("container",): Container, ("cluster",): Cluster, ("ready",): Ready, ("bench",): BenchPlan}


def _describe(error: dict) -> tuple[tuple, str]:
    """A pydantic error as (location, one phrase)."""
    loc = tuple(error["loc"])
    dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    if error["type"] == "extra_forbidden":
        model = _SECTIONS.get(loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else (f"; known fields: {', '.join(known)}" if known else "")
        return loc, f"unknown field '{dotted}'{hint}"
    if error["type"] == "missing":
        return loc, f"missing field '{dotted}'"
    msg = error["msg"].removeprefix("Value error, ")
    return loc, f"{dotted}: {msg} (got {error.get('input')!r})" if error["type"] != "value_error" else f"{dotted}: {msg}"


def parse_recipe(data: Any, lines: Lines, path: Path | None) -> Recipe:
    """Validate a parsed recipe document (servelab format, or spark-vllm-docker v1 converted).

    Raises:
        ServelabError: one line naming the file, line and field (unknown field, missing field,
            wrong type, a placeholder that is not a plain name, unbalanced braces).
    """
    where = str(path) if path else "recipe"
    if not isinstance(data, dict):
        raise ServelabError(f"{where}: a recipe is a mapping of fields (name, engine, command, …)")
    notes: list[str] = []
    if str(data.get("recipe_version", "")) == "1":
        data, notes = from_spark_vllm_docker(data, where)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        loc, phrase = _describe(exc.errors()[0])
        line = line_of(lines, loc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ServelabError(f"{where}{f', line {line}' if line else ''}: {phrase}{more}") from None
    recipe._path, recipe._lines, recipe._notes = path, lines, notes
    _check_cluster(recipe)
    _check_templates(recipe)
    if recipe.engine == "llama.cpp" and recipe.tensor_parallel > 1:
        raise ServelabError(f"{recipe.where('tensor_parallel')}: llama.cpp has no tensor parallelism; give --split-mode in the command instead")
    for i, values in enumerate(recipe.variants):
        bad = [k for k in values if not NAME_RE.fullmatch(k)]
        if bad:
            raise ServelabError(f"{recipe.where('variants', i)}: variant name {bad[0]!r} is not a plain name like max_num_seqs")
    return recipe


def _check_templates(recipe: Recipe) -> None:
    """Every ``{placeholder}`` is a plain name, and braces are balanced (``{{``/``}}`` for literal ones)."""
    for loc, text in recipe.templates():
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:  # "Single '}' encountered in format string" and the like
            raise ServelabError(f"{recipe.where(*loc)}: bad placeholder syntax ({exc}); write {{{{ and }}}} for literal braces") from None
        for _, name, spec, conv in fields:
            if name is not None and (not NAME_RE.fullmatch(name) or spec or conv):
                raise ServelabError(f"{recipe.where(*loc)}: {{{name}}} is not a placeholder name; write {{{{ and }}}} for literal braces (JSON)")


def _check_cluster(recipe: Recipe) -> None:
    if recipe.cluster and recipe.engine not in ("vllm", "sglang"):
        raise ServelabError(f"{recipe.where('cluster')}: clusters are supported for vllm (ray or native) and sglang (native), not {recipe.engine}")
    if recipe.cluster and recipe.engine == "sglang" and recipe.cluster.backend == "ray":
        raise ServelabError(f"{recipe.where('cluster')}: SGLang runs several nodes natively (--nnodes); use backend: native")


def with_hosts(recipe: Recipe, hosts: str) -> Recipe:
    """``recipe`` on the cluster ``hosts`` (``"head,worker1,…"``, the ``--hosts`` option).

    Raises:
        ServelabError: fewer than two hosts, or an engine servelab cannot run on several nodes.
    """
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if len(names) < 2:
        raise ServelabError(f"--hosts {hosts!r}: give at least two hosts, head first (--hosts spark-1,spark-2)")
    recipe.cluster = recipe.cluster.model_copy(update={"hosts": names}) if recipe.cluster else Cluster(hosts=names)
    _check_cluster(recipe)
    return recipe


def load_recipe(path: Path) -> Recipe:
    """Read and validate a recipe file. A placeholder without a default is not an error here:
    ``--set``, ``--vary`` or a variant may give it; :meth:`Recipe.resolve` names any left unfilled.

    Raises:
        ServelabError: unreadable or invalid file (see :func:`parse_recipe`).
    """
    data, lines = read_yaml_lines(path, "recipe")
    return parse_recipe(data, lines, path)


def from_spark_vllm_docker(data: dict, where: str) -> tuple[dict, list[str]]:
    """Convert an eugr/spark-vllm-docker ``recipe_version: "1"`` recipe to servelab's form.

    Mapping (anchors-serving-ops.md §B): ``container`` → ``container.image``; ``command`` (a bash
    body, ``\\``-continued) → split into one argument list; ``defaults``, ``env``, ``model``,
    ``name``, ``description`` kept; ``defaults.tensor_parallel`` → ``tensor_parallel``. As in
    their solo mode, ``--distributed-executor-backend X`` is dropped (servelab adds it back for a
    Ray cluster). ``mods`` and ``build_args`` cannot be applied by servelab: they are returned as
    notes (``servelab lint`` shows them). Their container defaults (``--ipc=host --network host
    --gpus all``, HF/vLLM/FlashInfer/Triton caches mounted) are servelab's defaults too.

    Raises:
        ServelabError: a required v1 field is missing.
    """
    for key in ("name", "container", "command"):
        if key not in data:
            raise ServelabError(f"{where}: spark-vllm-docker recipe without '{key}'")
    known = {"name", "recipe_version", "container", "command", "description", "model", "mods", "defaults", "env",
             "build_args", "cluster_only", "solo_only"}  # fmt: skip
    unknown = sorted(set(data) - known)
    if unknown:
        raise ServelabError(f"{where}: unknown spark-vllm-docker v1 field '{unknown[0]}'")
    command = data["command"]
    if isinstance(command, str):
        try:
            command = shlex.split(command.replace("\\\n", " "))
        except ValueError as exc:
            raise ServelabError(f"{where}: cannot split the command: {exc}") from None
        command = _drop_flag(command, "--distributed-executor-backend")
    defaults = dict(data.get("defaults") or {})
    out = {
        "name": data["name"],
        "engine": "vllm",
        "command": command,
        "container": {"image": data["container"]},
        "defaults": defaults,
        "env": dict(data.get("env") or {}),
        "tensor_parallel": defaults.get("tensor_parallel", 1),
    }
    for key in ("model", "description"):
        if data.get(key) is not None:
            out[key] = data[key]
    notes = []
    if data.get("mods"):
        notes.append(f"spark-vllm-docker mods {data['mods']} are not applied: build them into the image")
    if data.get("build_args"):
        notes.append(f"spark-vllm-docker build_args {data['build_args']} are not applied: build the image with build-and-copy.sh")
    if data.get("cluster_only"):
        notes.append("cluster_only: pass the hosts with --hosts HEAD,WORKER")
    return out, notes


def _drop_flag(argv: list[str], name: str) -> list[str]:
    """``argv`` without ``name`` and its value."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out
