"""The recipe format: a server described in YAML, validated, each error naming its file and line.

A recipe names the engine and model, how to run the server (``command``: an argument list, or a
string split once with ``shlex`` *before* any value is filled in, so a value can never become
extra arguments or shell code), optionally a container image, ``defaults`` for its
``{placeholders}``, environment variables, tensor/expert parallelism, the cluster hosts, readiness
(URL and timeout) and the benchmark plan to run once the server is ready. ``variants`` (or
``servelab sweep --vary``) give placeholder values to try one after the other. Placeholders follow
Python's ``str.format`` (as spark-vllm-docker recipes do): ``{{`` and ``}}`` are literal braces,
e.g. in a JSON argument. :meth:`Recipe.resolve` fills them in for one variant: a value for a name
the command does not use as a placeholder becomes a flag appended to the command
(``max_num_seqs=64`` → ``--max-num-seqs 64``; ``true`` → the bare flag; ``false`` → nothing), and
the port, readiness path and timeout default to the engine's (``servelab.engines``).

The community's DGX Spark format (``servelab.recipes.spark_vllm_docker``) is read too and converted on load.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PositiveFloat, PositiveInt, PrivateAttr, ValidationError, field_validator

from servelab import engines
from servelab.errors import ServelabError
from servelab.server.process import free_port
from servelab.recipes.flags import flag_args, parse_port
from servelab.recipes.spark_vllm_docker import from_spark_vllm_docker
from servelab.recipes.trust import template_problem, values_problem
from servelab.settings import Load
from servelab.guards.yamlfile import Lines, line_of, read_yaml_lines

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a placeholder or variant name
SHELL_TOKENS = {"&&", "||", ";", "|", ">", ">>", "<", "&", "$(", "`"}


def _scalar(value: Any) -> str:
    """YAML scalars as the text they stand for (true → "true"); anything else is an error."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError("give a string, number or boolean")


Scalar = Annotated[str, BeforeValidator(_scalar)]


def _engine(value: Any) -> Any:
    """A registered engine's recipe name (``servelab.engines``)."""
    known = [name for e in engines.all_engines() for name in e.recipe_names]
    if value not in known:
        raise ValueError(f"Input should be {', '.join(repr(k) for k in known[:-1])} or {known[-1]!r}")
    return value


EngineName = Annotated[str, BeforeValidator(_engine)]


class Container(BaseModel):
    """Run the server in a container (``docker run``)."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(description="Image, e.g. vllm/vllm-openai:v0.11.0 (placeholders allowed).")
    gpus: str | None = Field("all", description="docker run --gpus; null for none.")
    ipc: str | None = Field("host", description="docker run --ipc (host: PyTorch shared memory without a size limit).")
    shm_size: str | None = Field(None, description="docker run --shm-size, when ipc is not host.")
    network: str = Field("host", description="docker run --network; with anything but host the port is published.")
    cache_dir: str = Field("~/.cache", description="Host folder holding the huggingface/, flashinfer/ and engine caches (and ~/.triton).")
    cache_volumes: bool = Field(True, description="Mount model-weight, torch.compile, FlashInfer and Triton caches from the host.")
    volumes: list[str] = Field(default_factory=list, description="More -v HOST:CONTAINER mounts.")
    options: list[str] = Field(default_factory=list, description="More docker run arguments.")


HOST_RE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9_\[][A-Za-z0-9_.:%\]-]*")


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

    @field_validator("hosts")
    @classmethod
    def _ssh_destinations(cls, hosts: list[str]) -> list[str]:
        """A host is an ssh destination (``[user@]name``), never an ssh option: no leading ``-``."""
        for host in hosts:
            if not HOST_RE.fullmatch(host):
                raise ValueError(f"{host!r} is not a host name ([user@]host, letters, digits, '.', '-', '_'; not starting with '-')")
        return hosts


class Ready(BaseModel):
    """When the server counts as started."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, description="URL polled until 200; default the engine's health path on the head.")
    timeout_s: PositiveFloat | None = Field(None, description="Seconds to wait; default per engine (vLLM 900).")


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


class Recipe(BaseModel):
    """A server recipe (YAML). See the module docstring and README "Recipes"."""

    model_config = ConfigDict(extra="forbid")
    name: str
    engine: EngineName
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
    bench: Load = Field(default_factory=Load, description="What `servelab sweep` measures once the server is ready: bench's load settings, same names and units (servelab.settings.Load).")
    variants: list[dict[str, Scalar]] = Field(default_factory=list)
    _path: Path | None = PrivateAttr(None)
    _lines: Lines = PrivateAttr(default_factory=dict)
    _notes: list[str] = PrivateAttr(default_factory=list)
    _trusted: bool = PrivateAttr(False)
    _trust_notes: list[str] = PrivateAttr(default_factory=list)

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
    def trust_notes(self) -> list[str]:
        """What ``--trust-recipe`` let through that the allowlist refuses (``servelab.recipes.trust``), one line each, for the CLI to show."""
        return self._trust_notes

    def distrust(self, problem: str) -> None:
        """Refuse ``problem`` (outside the allowlist) unless the recipe is trusted; then note it once.

        Raises:
            ServelabError: ``problem``, naming the recipe, when it is not trusted.
        """
        if not self._trusted:
            raise ServelabError(problem)
        if problem not in self._trust_notes:
            self._trust_notes.append(problem)

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
        """How the nodes of a cluster work together: ``cluster.backend``, else the engine's first (``cluster_backends``)."""
        if self.cluster is None:
            return None
        return self.cluster.backend or engines.get(self.engine).cluster_backends[0]

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
            ServelabError: a placeholder has no value (naming the file, line and fix), a value is
                malformed, or values would go outside the allowlist (``servelab.recipes.trust``)
                and the recipe is not trusted.
        """
        engine = engines.get(self.engine)
        values = dict(values or {})
        used = self.placeholders()
        merged: dict[str, str] = {"tensor_parallel": str(self.tensor_parallel), **self.defaults, **values}
        if self.model is not None:
            merged.setdefault("model", self.model)
        if "port" not in merged:
            merged["port"] = str(free_port() if "port" in used else engine.default_port)
        if used & {"embedded_llama_server", "embedded_model", "embedded_chat_template"}:
            from servelab.server.local import chat_template_path, model_path, server_program

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
        appended = [flag_args(name, value) for name, value in values.items() if name not in used and name not in ("port", "tensor_parallel", "model")]
        argv += [a for added in appended for a in added]
        if problem := values_problem(argv, self.command, merged, appended, image, engine.launchers):
            self.distrust(f"{self.source}: {problem}")
        tp = merged["tensor_parallel"]
        if not tp.isdecimal() or int(tp) < 1:
            raise ServelabError(f"tensor_parallel {tp!r} is not a positive integer")
        argv += engine.parallel_flags(argv, int(tp), self.expert_parallel, self.backend())
        head = self.cluster.hosts[0] if self.cluster else "127.0.0.1"
        url = f"http://{head}:{merged['port']}"
        return Resolved(
            label=label,
            values=values,
            argv=argv,
            env=env,
            image=image,
            port=parse_port(merged["port"]),
            url=url,
            ready_url=ready_url or url + engine.ready_path,
            ready_timeout_s=self.ready.timeout_s or engine.ready_timeout_s,
            tensor_parallel=int(tp),
        )


_SECTIONS = {(): Recipe, ("container",): Container, ("cluster",): Cluster, ("ready",): Ready, ("bench",): Load}


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


def parse_recipe(data: Any, lines: Lines, path: Path | None, trusted: bool = False) -> Recipe:
    """Validate a parsed recipe document (servelab format, or spark-vllm-docker v1 converted).

    ``trusted`` (``--trust-recipe``) lets placeholders go outside the allowlist
    (``servelab.recipes.trust``); what it let through is in ``Recipe.trust_notes``.

    Raises:
        ServelabError: one line naming the file, line and field (unknown field, missing field,
            wrong type, a placeholder that is not a plain name, unbalanced braces, a placeholder
            outside the allowlist unless ``trusted``).
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
    recipe._path, recipe._lines, recipe._notes, recipe._trusted = path, lines, notes, trusted
    _check_engine(recipe)
    _check_templates(recipe)
    for i, values in enumerate(recipe.variants):
        bad = [k for k in values if not NAME_RE.fullmatch(k)]
        if bad:
            raise ServelabError(f"{recipe.where('variants', i)}: variant name {bad[0]!r} is not a plain name like max_num_seqs")
    return recipe


def _check_templates(recipe: Recipe) -> None:
    """Every ``{placeholder}`` is a plain name, braces are balanced (``{{``/``}}`` for literal ones),
    and each is where the allowlist lets a value go (``servelab.recipes.trust``)."""
    for loc, text in recipe.templates():
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:  # "Single '}' encountered in format string" and the like
            raise ServelabError(f"{recipe.where(*loc)}: bad placeholder syntax ({exc}); write {{{{ and }}}} for literal braces") from None
        for _, name, spec, conv in fields:
            if name is not None and (not NAME_RE.fullmatch(name) or spec or conv):
                raise ServelabError(f"{recipe.where(*loc)}: {{{name}}} is not a placeholder name; write {{{{ and }}}} for literal braces (JSON)")
    if problem := template_problem(recipe.command, recipe.env, engines.get(recipe.engine).launchers):
        loc, phrase = problem
        recipe.distrust(f"{recipe.where(*loc)}: {phrase}")


def _check_engine(recipe: Recipe) -> None:
    """What the recipe's engine cannot run: several nodes without a cluster backend, then the engine's own checks."""
    engine = engines.get(recipe.engine)
    if recipe.cluster and not engine.cluster_backends:
        able = " and ".join(f"{e.name} ({' or '.join(e.cluster_backends)})" for e in engines.all_engines() if e.cluster_backends)
        raise ServelabError(f"{recipe.where('cluster')}: clusters are supported for {able}, not {recipe.engine}")
    if problem := engine.check_recipe(recipe.tensor_parallel, recipe.cluster.backend if recipe.cluster else None):
        field, message = problem
        raise ServelabError(f"{recipe.where(field)}: {message}")


def with_hosts(recipe: Recipe, hosts: str) -> Recipe:
    """``recipe`` on the cluster ``hosts`` (``"head,worker1,…"``, the ``--hosts`` option).

    Raises:
        ServelabError: fewer than two hosts, a host that is not a host name, or an engine servelab
            cannot run on several nodes.
    """
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if len(names) < 2:
        raise ServelabError(f"--hosts {hosts!r}: give at least two hosts, head first (--hosts spark-1,spark-2)")
    try:
        recipe.cluster = Cluster.model_validate({**(recipe.cluster.model_dump() if recipe.cluster else {}), "hosts": names})
    except ValidationError as exc:
        raise ServelabError(f"--hosts {hosts!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    _check_engine(recipe)
    return recipe


def load_recipe(path: Path, trusted: bool = False) -> Recipe:
    """Read and validate a recipe file. A placeholder without a default is not an error here:
    ``--set``, ``--vary`` or a variant may give it; :meth:`Recipe.resolve` names any left unfilled.

    Raises:
        ServelabError: unreadable or invalid file (see :func:`parse_recipe`; ``trusted`` as there).
    """
    data, lines = read_yaml_lines(path, "recipe")
    return parse_recipe(data, lines, path, trusted)
