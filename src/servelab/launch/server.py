"""Launch one variant of a recipe: local process, container, or a cluster; wait until ready; stop.

What runs where (``RecipeServer.plan``):

- one node: the server command on this machine, as a process or in ``docker run``;
- Ray cluster: a Ray head and workers (processes or containers, one per host), then the server
  on the head once Ray counts every node (inside the head's container with ``docker exec``);
- native cluster: the server command on every host with the engine's multi-node flags.

Readiness is the recipe's ready URL answering 200; any process exiting first is a failed start
whose error carries the last lines of that process's log. Every log stays in the run directory
(``server.log`` is the head server's, read for boot-log facts). Stopping goes in reverse order:
servers, then workers, then the head, each with its graceful stop command (``docker stop``,
``ray stop``) before signals.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from pathlib import Path

from servelab import engines
from servelab.errors import ServelabError
from servelab.launch import cluster, docker
from servelab.server.process import POLL_S, Proc, wait_ready
from servelab.recipes import Recipe, Resolved, redact, secret_values
from servelab.guards.redaction import MASK, remember, secret_name
from servelab.store.results import RecipeInfo

PROBE_TIMEOUT_S = 20.0  # one `ray.nodes()` call; a probe stuck while the head comes up is retried


class RecipeServer:
    """A recipe variant's server(s); use as a context manager (started on enter, stopped on exit).

    Args:
        recipe: the validated recipe.
        resolved: the variant (``Recipe.resolve``).
        log_dir: where the logs go (the variant's run directory).

    Raises:
        ServelabError: from ``start()``: a program is missing, a process exited while starting
            (with its last log lines), the Ray cluster did not form, or the server was not ready
            within the recipe's timeout.
    """

    def __init__(self, recipe: Recipe, resolved: Resolved, log_dir: Path) -> None:
        self.recipe = recipe
        self.resolved = resolved
        self.log_dir = log_dir
        for name in recipe.pass_env:  # their values may come back in logs and error bodies
            remember(os.environ.get(name))
        for value in secret_values(resolved.argv, resolved.env):  # --api-key X, DB_PASSWORD=…: a server may print them
            remember(value)
        slug = re.sub(r"[^a-z0-9]+", "-", recipe.name.lower()).strip("-")[:30] or "server"
        self.container_prefix = f"servelab-{slug}-{secrets.token_hex(3)}"
        self.cluster_procs, self.server_procs = self.plan()

    @property
    def url(self) -> str:
        """Root URL of the server (the head's)."""
        return self.resolved.url

    @property
    def log_path(self) -> Path:
        """The head server's log (boot-log facts come from it)."""
        return self.server_procs[0].log_path

    def _wrap(self, host: str, rank: int, argv: list[str], name: str, log: str, ray_node: bool = False) -> Proc:
        """A process running ``argv`` on ``host`` (in this rank's container when the recipe has one).
        A Ray node on a remote host without a container is stopped with ``ray stop`` there."""
        r, ssh = self.recipe, self.recipe.cluster.ssh if self.recipe.cluster else []
        local = cluster.is_local(host)
        if r.container is None:
            stop = cluster.on_host(host, ["ray", "stop", "--force"], ssh, tty=False) if ray_node and not local else None
            argv = cluster.on_host(host, argv, ssh, env=None if local else self.resolved.env)
            return Proc(name, argv, self.log_dir / log, env=self.resolved.env if local else None, stop_argv=stop)
        cname = f"{self.container_prefix}-{rank}"
        run = docker.run_argv(r.container, self.resolved.image, cname, argv, self.resolved.env, r.pass_env, self.resolved.port,
                                 engines.get(r.engine).container_caches)  # fmt: skip
        stop = cluster.on_host(host, docker.stop_argv(cname), ssh, tty=False)
        return Proc(name, cluster.on_host(host, run, ssh), self.log_dir / log, stop_argv=stop)

    def plan(self) -> tuple[list[Proc], list[Proc]]:
        """The processes to start: (cluster nodes, servers), not started yet."""
        r, v = self.recipe, self.resolved
        what = f"{r.engine} server"
        if r.cluster is None:
            return [], [self._wrap("127.0.0.1", 0, v.argv, what, "server.log")]
        hosts, c = r.cluster.hosts, r.cluster
        head = hosts[0]
        if r.backend() == "native":
            servers = []
            for rank, host in enumerate(hosts):
                argv = v.argv + engines.get(r.engine).cluster_flags(len(hosts), rank, head, c.dist_port)
                servers.append(self._wrap(host, rank, argv, f"{what} on {host}", "server.log" if rank == 0 else f"server-node{rank}.log"))
            return [], servers
        nodes = [
            self._wrap(host, rank, cluster.ray_head_argv(c.ray_port, c.ray_args) if rank == 0 else cluster.ray_worker_argv(head, c.ray_port, c.ray_args),
                       f"ray {'head' if rank == 0 else 'worker'} on {host}", "ray-head.log" if rank == 0 else f"ray-node{rank}.log", ray_node=True)
            for rank, host in enumerate(hosts)
        ]  # fmt: skip
        if r.container is None:
            return nodes, [self._wrap(head, 0, v.argv, what, "server.log")]
        # the server joins the head's Ray inside the head's container
        return nodes, [Proc(what, cluster.on_host(head, docker.exec_argv(f"{self.container_prefix}-0", v.argv), c.ssh), self.log_dir / "server.log")]

    def _ray_probe(self) -> list[str]:
        c = self.recipe.cluster
        probe = cluster.ray_nodes_argv(c.hosts[0], c.ray_port)
        if self.recipe.container is not None:
            probe = docker.exec_argv(f"{self.container_prefix}-0", probe)
        return cluster.on_host(c.hosts[0], probe, c.ssh, tty=False)

    def commands(self) -> list[list[str]]:
        """Every command line in start order, secrets redacted (``--dry-run``)."""
        return [redact(p.argv) for p in self.cluster_procs + self.server_procs]

    def start(self) -> RecipeServer:
        """Start everything and wait until the server is ready (see the class's Raises)."""
        v = self.resolved
        try:
            for p in self.cluster_procs:
                p.start()
            if self.cluster_procs:
                self._wait_ray()
            for p in self.server_procs:
                p.start()
            what = f"{self.recipe.engine} server (recipe {self.recipe.name!r}, variant {v.label})"
            wait_ready(v.ready_url, v.ready_timeout_s, [*self.server_procs, *self.cluster_procs], what)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ray(self) -> None:
        """Wait until Ray counts every host as a live node."""
        c = self.recipe.cluster
        deadline = time.monotonic() + c.ready_timeout_s
        seen = "no answer"
        while True:
            for p in self.cluster_procs:
                if not p.alive():
                    raise ServelabError(f"the Ray cluster did not form: {p.exited()}")
            try:
                out = subprocess.run(self._ray_probe(), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
                lines = out.stdout.strip().splitlines()
                if out.returncode == 0 and lines and lines[-1].isdecimal():
                    seen = f"{lines[-1]} of {len(c.hosts)} nodes"
                    if int(lines[-1]) >= len(c.hosts):
                        return
            except (OSError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline:
                raise ServelabError(f"the Ray cluster did not show all {len(c.hosts)} nodes within {c.ready_timeout_s:.0f} s ({seen}); see {self.log_dir}")
            time.sleep(POLL_S * 5)

    def alive(self) -> bool:
        """True while every process runs."""
        return all(p.alive() for p in self.cluster_procs + self.server_procs)

    def stop(self) -> None:
        """Stop servers, then workers, then the head (each: graceful command, SIGTERM, SIGKILL)."""
        for p in reversed(self.cluster_procs + self.server_procs):
            p.stop()

    def info(self) -> RecipeInfo:
        """What was launched, for the run document (secrets redacted)."""
        r, v = self.recipe, self.resolved
        return RecipeInfo(
            name=r.name, engine=r.engine, path=str(r._path) if r._path else None, sha256=r.sha256(), variant=v.label,
            values={k: MASK if secret_name(k) else x for k, x in v.values.items()}, command=redact(v.argv), image=v.image, hosts=r.cluster.hosts if r.cluster else [],
        )  # fmt: skip

    def __enter__(self) -> RecipeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
