"""``docker`` command lines for a recipe's container: run (GPU access, IPC, caches), exec, stop.

Defaults follow what DGX Spark / vLLM container users run (eugr/spark-vllm-docker
``launch-cluster.sh``, anchors-serving-ops.md §B; vLLM's Docker docs): ``--gpus all --ipc host
--network host``, and the host's caches mounted so weights, compile artefacts and Triton /
FlashInfer kernels survive the container: ``~/.cache/huggingface``, the engine's own caches
(``Engine.container_caches``; vLLM's ``~/.cache/vllm`` holds its ``torch_compile_cache``),
``~/.cache/flashinfer``, ``~/.triton``.
"""

from __future__ import annotations

import os

from servelab.recipes import Container

CONTAINER_HOME = "/root"
# (host folder relative to cache_dir, or "~/…" for the home directory) → folder in the container under CONTAINER_HOME
MODEL_CACHE = ("huggingface", ".cache/huggingface")
KERNEL_CACHES = [("flashinfer", ".cache/flashinfer"), ("~/.triton", ".triton")]


def cache_volumes(container: Container, engine_caches: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """``-v`` values for the caches: the model cache, the engine's, the kernel caches (host paths
    expanded on this machine; cluster nodes are expected to share the user's home layout)."""
    if not container.cache_volumes:
        return []
    root = os.path.expanduser(container.cache_dir)
    mounts = [MODEL_CACHE, *engine_caches, *KERNEL_CACHES]
    return [f"{os.path.expanduser(src) if src.startswith('~') else os.path.join(root, src)}:{CONTAINER_HOME}/{dst}" for src, dst in mounts]


def run_argv(
    container: Container,
    image: str,
    name: str,
    argv: list[str],
    env: dict[str, str],
    pass_env: list[str],
    port: int,
    engine_caches: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """``docker run --rm --name NAME …  IMAGE ARGV``, in the foreground (its exit is the container's).

    Args:
        container: the recipe's container settings.
        image: the image, placeholders filled in.
        name: container name (``docker stop`` uses it).
        argv: the command in the container.
        env: variables set in the container (``-e K=V``).
        pass_env: variables passed through from the caller's environment (``-e K``, value never
            on the command line).
        port: published with ``-p`` when the network is not ``host``.
        engine_caches: the engine's cache folders (``Engine.container_caches``).
    """
    out = ["docker", "run", "--rm", "--name", name]
    if container.gpus:
        out += ["--gpus", container.gpus]
    if container.ipc:
        out += ["--ipc", container.ipc]
    if container.shm_size:
        out += ["--shm-size", container.shm_size]
    out += ["--network", container.network]
    if container.network != "host":
        out += ["-p", f"{port}:{port}"]
    for volume in cache_volumes(container, engine_caches) + container.volumes:
        out += ["-v", volume]
    for key, value in env.items():
        out += ["-e", f"{key}={value}"]
    for key in pass_env:
        out += ["-e", key]
    return [*out, *container.options, image, *argv]


def exec_argv(name: str, argv: list[str]) -> list[str]:
    """``docker exec NAME ARGV``: a process in a running container (with the container's environment)."""
    return ["docker", "exec", name, *argv]


def stop_argv(name: str) -> list[str]:
    """``docker stop NAME`` (SIGTERM to the container, SIGKILL after docker's 10 s)."""
    return ["docker", "stop", name]
