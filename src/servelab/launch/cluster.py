"""Command lines for several nodes: ssh to each host, Ray head and workers.

Every remote command is an argument list quoted with ``shlex.join`` for the remote shell (ssh
hands one string to it), run with ``ssh -tt`` so that stopping the local ssh hangs up the remote
process. Hosts named ``localhost`` or ``127.0.0.1`` run locally, without ssh.

- Ray (vLLM ``--distributed-executor-backend ray``): ``ray start --head --port P --block`` on the
  head, ``ray start --address HEAD:P --block`` on each worker, the server on the head once Ray
  counts every node (``ray.nodes()``); as eugr/spark-vllm-docker and sparkrun do
  (anchors-serving-ops.md §A "Multi-node").
- Native: the same server command on every node with the engine's own multi-node flags
  (``Engine.cluster_flags``, ``servelab.engines``).
"""

from __future__ import annotations

import shlex

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
# Prints the number of live nodes of the Ray cluster at {address} (explicit: 'auto' may find a stale session).
RAY_NODES = "import ray; ray.init(address='{address}', logging_level='ERROR'); print(sum(1 for n in ray.nodes() if n['Alive']))"


def is_local(host: str) -> bool:
    """True for loopback host names (run without ssh)."""
    return host in LOCAL_HOSTS


def on_host(host: str, argv: list[str], ssh: list[str], env: dict[str, str] | None = None, tty: bool = True) -> list[str]:
    """``argv`` as run on ``host``: itself when local, else through ssh (``env`` as an ``env K=V`` prefix).

    Args:
        host: ssh destination.
        argv: the command on the host.
        ssh: more ssh arguments.
        env: variables for the remote command (local commands get them from :class:`Proc`).
        tty: ``-tt``, so that killing the local ssh stops the remote command (long-running ones).
    """
    if is_local(host):
        return argv
    remote = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else argv
    return ["ssh", *(["-tt"] if tty else []), "-o", "BatchMode=yes", *ssh, host, "--", shlex.join(remote)]


def ray_head_argv(port: int, extra: list[str]) -> list[str]:
    """Start a Ray head and stay in the foreground."""
    return ["ray", "start", "--head", f"--port={port}", "--block", *extra]


def ray_worker_argv(head: str, port: int, extra: list[str]) -> list[str]:
    """Join the head's Ray cluster and stay in the foreground."""
    return ["ray", "start", f"--address={head}:{port}", "--block", *extra]


def ray_nodes_argv(head: str, port: int) -> list[str]:
    """Print the number of live nodes of the Ray cluster at ``head:port`` (run on the head)."""
    return ["python3", "-c", RAY_NODES.format(address=f"{head}:{port}")]
