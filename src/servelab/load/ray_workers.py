"""Client workers on the nodes of a Ray cluster (``servelab bench --ray auto|HOST:PORT``): load beyond
one host, with the same records and timing honesty as worker processes (``servelab.load.workers``).

Each worker is a Ray actor (:class:`StreamActor`, async, one :class:`~servelab.load.workers.Streamer`)
pinned to a node, round robin over the cluster's live nodes (one per node by default). Clocks:
every node times with its own ``time.perf_counter``, which is monotonic but not shared between
hosts, so before the run the coordinator measures each actor's offset with ``CLOCK_PROBES``
round trips (NTP's estimate: offset = remote − (sent + received) ÷ 2 on the probe with the
shortest round trip, uncertainty ± half that round trip) and gives the actor its origin on its own
clock (the coordinator's origin + offset); its record times then come back on the coordinator's
clock. Each actor's node, offset and uncertainty are noted in the run. An actor that dies (its
node lost, the network cut) fails its requests in flight as ``client_worker``, as a process would.

servelab must be installed on every node (the actors import it). The coordinator joins the
cluster as a driver (``ray.init(address=...)``); a cluster it did not join before is left after.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from servelab.errors import ServelabError
from servelab.load.workers import Backend, Streamer, Worker, WorkerPool
from servelab.values.records import RequestRecord

CLOCK_PROBES = 16
ACTOR_CONCURRENCY = 100_000  # requests one async actor may have in flight (Ray's default is 1,000)


class StreamActor:
    """The actor's class (made a Ray actor at run time, so that importing servelab needs no Ray)."""

    def __init__(self) -> None:
        self.streamer: Streamer | None = None

    def clock(self) -> float:
        """This node's ``time.perf_counter()``, for the coordinator's offset probes."""
        return time.perf_counter()

    async def start(self, settings: dict) -> str:
        """Open the streamer with ``settings`` (origin already on this node's clock); its host name."""
        import socket

        self.streamer = await Streamer(settings).__aenter__()
        return socket.gethostname()

    async def stream(self, rid: int, record: dict, body: str) -> dict:
        """Stream one request; its answer as a worker process would send it."""
        assert self.streamer is not None
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.streamer.begin(rid, record, body, done.set_result)
        return await done

    def cancel(self, rid: int) -> None:
        """Cut request ``rid`` short."""
        assert self.streamer is not None
        self.streamer.cancel(rid)

    async def stop(self) -> None:
        """Cancel what is in flight and close the connections."""
        if self.streamer is not None:
            await self.streamer.__aexit__(None, None, None)


class RayWorker(Worker):
    """One :class:`StreamActor` as the pool sees it."""

    def __init__(self, label: str, actor: Any, pool: WorkerPool) -> None:
        super().__init__(label)
        self.actor, self.pool = actor, pool
        self.calls: set[asyncio.Task] = set()

    def submit(self, rid: int, record: RequestRecord, body: bytes) -> None:
        task = asyncio.create_task(self._call(rid, record.model_dump(mode="json"), body.decode()))
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    async def _call(self, rid: int, record: dict, body: str) -> None:
        import ray

        try:
            self.pool.answer(self, await self.actor.stream.remote(rid, record, body))
        except ray.exceptions.RayError as exc:  # the actor died, its node was lost, the network cut
            self.pool.lost(self, f"failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")

    def cancel(self, rid: int) -> None:
        self.actor.cancel.remote(rid)

    async def stop(self) -> None:
        import ray

        if self.alive:
            try:
                await asyncio.wait_for(self.actor.stop.remote(), 10)
            except (asyncio.TimeoutError, ray.exceptions.RayError):
                pass
        for task in list(self.calls):
            task.cancel()
        ray.kill(self.actor)


async def clock_offset(actor: Any) -> tuple[float, float]:
    """(offset, uncertainty) in s of ``actor``'s clock against ours: the probe with the shortest
    round trip of ``CLOCK_PROBES`` (NTP, RFC 5905 §8: offset = remote − midpoint of the round trip)."""
    best = None
    for _ in range(CLOCK_PROBES):
        sent = time.perf_counter()
        remote = await actor.clock.remote()
        received = time.perf_counter()
        if best is None or received - sent < best[1]:
            best = (remote - (sent + received) / 2, received - sent)
    assert best is not None
    return best[0], best[1] / 2


class RayBackend(Backend):
    """The pool's workers as actors on the Ray cluster at ``address`` (``auto`` or ``HOST:PORT``)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.joined = False  # this run joined the cluster (and leaves it after)

    async def start(self, pool: WorkerPool) -> None:
        """Join the cluster and start ``pool.procs`` actors (None: one per live node) round robin
        over its nodes, each with its clock offset measured and noted.

        Raises:
            ServelabError: Ray is not installed, the cluster cannot be joined, or it has no live node.
        """
        try:
            import ray
        except ImportError:
            raise ServelabError("--ray needs Ray: pip install 'ray>=2.9' (on every node, with servelab)") from None
        joined = not ray.is_initialized()
        if joined:
            try:
                ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ServelabError(f"--ray {self.address}: cannot join the Ray cluster ({exc}); start it with `ray start --head` or give its HOST:PORT") from None
        try:
            pool.workers.extend(await _place(pool, self.address))
        except BaseException:
            if joined:
                ray.shutdown()
            raise
        pool.procs, self.joined = len(pool.workers), joined

    def close(self) -> None:
        """Leave the cluster :meth:`start` joined."""
        if self.joined:
            import ray

            ray.shutdown()


async def _place(pool: WorkerPool, address: str) -> list[Worker]:
    """The actors of :meth:`RayBackend.start`, round robin over the live nodes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])
    if not nodes:
        raise ServelabError(f"--ray {address}: the cluster has no live node")
    count = pool.procs or len(nodes)
    remote_class = ray.remote(StreamActor)
    workers: list[Worker] = []
    for n in range(count):
        node = nodes[n % len(nodes)]
        actor = remote_class.options(
            num_cpus=0, max_concurrency=ACTOR_CONCURRENCY, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote()
        offset, uncertainty = await clock_offset(actor)
        host = await actor.start.remote(pool.settings(pool.origin + offset, count))
        label = f"client worker {n} (Ray node {node['NodeID'][:8]} at {node['NodeManagerAddress']}, {host})"
        pool.on_note(f"{label}: clock offset {offset * 1e3:+.3f} ms ± {uncertainty * 1e3:.3f} ms")
        workers.append(RayWorker(label, actor, pool))
    return workers
