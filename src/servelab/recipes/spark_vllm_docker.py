"""The community's DGX Spark recipe format (eugr/spark-vllm-docker ``recipe_version: "1"``), read as a servelab recipe.

See ../shared/reference/anchors-serving-ops.md §B.
"""

from __future__ import annotations

import shlex

from servelab.errors import ServelabError


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
