"""A recipe variant resolved: every placeholder filled in, the engine's parallelism flags added.

A value for a name the command does not use as a placeholder becomes a flag appended to the
command (``max_num_seqs=64`` → ``--max-num-seqs 64``; ``true`` → the bare flag; ``false`` → nothing).
The port, readiness path and timeout default to the engine's (``servelab.engines``).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servelab import engines
from servelab.errors import ServelabError
from servelab.launch.process import free_port
from servelab.recipes.flags import flag_args, parse_port

if TYPE_CHECKING:
    from servelab.recipes.format import Recipe


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


def resolve(recipe: Recipe, values: Mapping[str, str] | None = None, label: str = "default") -> Resolved:
    """The exact server command for one variant: defaults, then ``values``, filled in.

    Args:
        values: placeholder values of this variant (``--set``/``--vary``/``variants``).
        label: the variant's name, for messages and run directories.

    Raises:
        ServelabError: a placeholder has no value (naming the file, line and fix), or a
            value is malformed.
    """
    engine = engines.get(recipe.engine)
    values = dict(values or {})
    used = recipe.placeholders()
    merged: dict[str, str] = {"tensor_parallel": str(recipe.tensor_parallel), **recipe.defaults, **values}
    if recipe.model is not None:
        merged.setdefault("model", recipe.model)
    if "port" not in merged:
        merged["port"] = str(free_port() if "port" in used else engine.default_port)
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
                    f"{recipe.where(*loc)}: placeholder {{{name}}} has no value; add it to defaults or pass --set {name}=VALUE"
                )
            out.append(merged[name])
        return "".join(out)

    argv = [fill(arg, "command", i) for i, arg in enumerate(recipe.command)]
    env = {k: fill(v, "env", k) for k, v in recipe.env.items()}
    image = fill(recipe.container.image, "container", "image") if recipe.container else None
    ready_url = fill(recipe.ready.url, "ready", "url") if recipe.ready.url else None
    for name, value in values.items():
        if name not in used and name not in ("port", "tensor_parallel", "model"):
            argv += flag_args(name, value)
    tp = merged["tensor_parallel"]
    if not tp.isdigit() or int(tp) < 1:
        raise ServelabError(f"tensor_parallel {tp!r} is not a positive integer")
    argv += engine.parallel_flags(argv, int(tp), recipe.expert_parallel, recipe.backend())
    head = recipe.cluster.hosts[0] if recipe.cluster else "127.0.0.1"
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
        ready_timeout_s=recipe.ready.timeout_s or engine.ready_timeout_s,
        tensor_parallel=int(tp),
    )


