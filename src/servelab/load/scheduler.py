"""Load schedules: closed loop (N requests kept in flight) and open loop (requests arrive at a rate).

Closed loop: each of the N workers sends a request, waits for it to finish, and sends the next;
so exactly N requests are in flight except while the last ones drain. The workers start together
(``stagger_s`` 0: a burst, whose waves may stay locked when every request takes as long) or worker
k after k·``stagger_s``/N (a ramp over ``stagger_s``, about one request's duration: the sends stay
spread, a steady state). Requests sent during the ramp (before the last worker's first send) are
marked ``warmup``: kept, not measured, and not counted against ``count``.

Open loop: requests arrive at ``rate`` per second with gamma-distributed gaps of shape
``burstiness`` (1 = Poisson arrivals; below 1 burstier, above 1 more regular; mean gap 1/rate —
as vLLM's benchmark draws them), whether or not earlier ones finished, optionally at most
``max_concurrency`` in flight (the rest wait on the client side). A request's ``queued`` time is
its scheduled arrival, so ``start − queued`` is the time it waited on the client side.

With a duration, requests still in flight at the deadline are cancelled and kept as
``incomplete`` (never dropped), and the throughput window is exactly the duration. With a request
count and a ramp, the window runs from the first to the last measured send, while every worker is
busy (the drain after the last send left out, as the ramp before the first; docs/metrics.md).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from servelab.load.client import StreamClient
from servelab.load.outcome import Texts
from servelab.values.records import RequestRecord

# Failures after which the scheduler asks whether the server is still there.
CONNECTION_ERRORS = frozenset({"connect", "disconnected"})


class ServerGone(Exception):
    """The server stopped answering during a run (its process died or its port closed)."""


@dataclass
class Phase:
    """What one closed-loop phase ran: its records (in completion order) and its window (run seconds)."""

    records: list[RequestRecord] = field(default_factory=list)
    window: tuple[float, float] | None = None


async def _send(
    client: StreamClient,
    record: RequestRecord,
    body: bytes,
    phase: Phase,
    on_record: Callable[[RequestRecord], None],
    alive: Callable[[], Awaitable[bool]],
    sem: asyncio.Semaphore | None = None,
    affinity: object = None,
) -> Texts | None:
    """Send one request (inside ``sem`` if given; ``affinity`` as ``StreamClient.send``); keep its
    record however it ends (done, failed or cancelled); after a connection-level failure ask
    ``alive``. Returns the answer (None when the request failed).

    Raises:
        ServerGone: the request failed to connect and the server no longer answers.
    """
    try:
        if sem is None:
            texts = await client.send(record, body, affinity)
        else:
            async with sem:
                texts = await client.send(record, body, affinity)
    finally:
        phase.records.append(record)
        on_record(record)
    if record.error_kind in CONNECTION_ERRORS and not await alive():
        raise ServerGone(f"the server stopped answering ({record.error_kind}: {record.error})")
    return texts


async def _drive(tasks: list[asyncio.Task], t_begin: float, deadline: float | None) -> None:
    """Wait for a closed loop's workers: all of them, or until ``deadline`` (run seconds; the
    ``t_begin`` it counts from is when the phase began), then cancel what is left.

    Raises:
        ServerGone: a worker's (re-raised).
    """
    try:
        if deadline is None:
            await asyncio.gather(*tasks)
        else:
            done, _ = await asyncio.wait(tasks, timeout=deadline - t_begin, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # re-raise ServerGone
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def closed_loop(
    client: StreamClient,
    make: Callable[[int], tuple[RequestRecord, bytes]],
    *,
    concurrency: int,
    count: int | None = None,
    duration_s: float | None = None,
    stagger_s: float = 0.0,
    on_record: Callable[[RequestRecord], None],
    alive: Callable[[], Awaitable[bool]],
) -> Phase:
    """Run one phase of closed-loop load.

    Args:
        client: an open :class:`StreamClient`.
        make: builds request ``i`` (its record and body); called just before it is sent.
        concurrency: requests kept in flight.
        count: stop after this many requests (exactly one of ``count`` and ``duration_s``).
        duration_s: stop launching and cancel what is in flight after this many seconds (counted
            from the end of the ramp).
        stagger_s: spread the workers' first sends over this many seconds (module docstring).
        on_record: called once per request as it completes, fails or is cancelled.
        alive: asked after a connection-level failure; False ends the phase with ServerGone.

    Returns:
        The phase's records and its window: with a duration, the fixed one; with a count and a ramp,
        first to last measured send; else None (the records' own span).

    Raises:
        ServerGone: the server stopped answering (records so far were passed to ``on_record``).
        asyncio.CancelledError: the caller was cancelled (Ctrl-C); in-flight records are
            marked ``incomplete`` and passed to ``on_record`` first.
    """
    if (count is None) == (duration_s is None):
        raise ValueError("give exactly one of count and duration_s")
    phase = Phase()
    indices = itertools.count()
    measured = itertools.count()
    t_begin = time.perf_counter() - client.origin
    ramp_end = t_begin + stagger_s * (concurrency - 1) / concurrency
    deadline = None if duration_s is None else ramp_end + duration_s

    async def worker(k: int) -> None:
        if stagger_s:
            await asyncio.sleep(k * stagger_s / concurrency)  # a schedule, not synchronisation
        while True:
            in_ramp = time.perf_counter() - client.origin < ramp_end
            if not in_ramp and count is not None and next(measured) >= count:
                return
            record, body = make(next(indices))
            if in_ramp:
                record.phase = "warmup"
            await _send(client, record, body, phase, on_record, alive)

    await _drive([asyncio.create_task(worker(k)) for k in range(concurrency)], t_begin, deadline)
    if deadline is not None:
        phase.window = (ramp_end, deadline)
    else:
        sends = [r.start for r in phase.records if r.phase == "measured" and r.start is not None]
        if stagger_s and len(sends) > 1 and max(sends) > min(sends):
            phase.window = (min(sends), max(sends))
    return phase


# A session's turns: play(j, send) plays session j, sending each turn with send(record, body, affinity).
Send = Callable[[RequestRecord, bytes, object], Awaitable["Texts | None"]]


async def session_loop(
    client: StreamClient,
    play: Callable[[int, Send], Awaitable[None]],
    *,
    concurrency: int,
    count: int | None = None,
    duration_s: float | None = None,
    on_record: Callable[[RequestRecord], None],
    alive: Callable[[], Awaitable[bool]],
) -> Phase:
    """Run one phase of closed-loop sessions: each of ``concurrency`` workers plays a session
    (``play(j, send)``: its turns one after another, each request through ``send``), then the next,
    until ``count`` sessions were started or ``duration_s`` passed (sessions in flight are then
    cancelled: their request in flight is ``incomplete``). So at most ``concurrency`` sessions are
    open, and at most that many requests in flight (fewer while sessions think between turns).

    Returns:
        The phase's records (every turn's) and, with a duration, its window.

    Raises:
        ServerGone, asyncio.CancelledError: as :func:`closed_loop`.
    """
    if (count is None) == (duration_s is None):
        raise ValueError("give exactly one of count and duration_s")
    phase = Phase()
    sessions = itertools.count()
    t_begin = time.perf_counter() - client.origin
    deadline = None if duration_s is None else t_begin + duration_s

    async def send(record: RequestRecord, body: bytes, affinity: object) -> Texts | None:
        return await _send(client, record, body, phase, on_record, alive, affinity=affinity)

    async def worker() -> None:
        for j in sessions:  # shared by the workers: each session number is played once
            if count is not None and j >= count:
                return
            await play(j, send)

    await _drive([asyncio.create_task(worker()) for _ in range(concurrency)], t_begin, deadline)
    if deadline is not None:
        phase.window = (t_begin, deadline)
    return phase


def arrival_gaps(rate: float, burstiness: float, seed: int):
    """Endless gaps (s) between arrivals: gamma(shape=burstiness, scale=1/(rate·burstiness)), mean 1/rate,
    coefficient of variation 1/√burstiness (1 for Poisson arrivals). Source: vLLM
    ``vllm/benchmarks/serve.py`` (``get_request``), which draws request gaps the same way."""
    rng = random.Random(seed)
    while True:
        yield rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


async def open_loop(
    client: StreamClient,
    make: Callable[[int], tuple[RequestRecord, bytes]],
    *,
    rate: float,
    burstiness: float = 1.0,
    count: int | None = None,
    duration_s: float | None = None,
    max_concurrency: int | None = None,
    seed: int = 0,
    arrivals: Iterable[float] | None = None,
    on_record: Callable[[RequestRecord], None],
    alive: Callable[[], Awaitable[bool]],
) -> Phase:
    """Run one phase of open-loop load (see the module docstring).

    Args:
        rate: mean arrivals per second (> 0).
        burstiness: gamma shape of the inter-arrival gaps (> 0); 1 is a Poisson process.
        count / duration_s: exactly one: how many requests arrive, or for how long they arrive.
        max_concurrency: cap on requests in flight; arrivals beyond it wait on the client side.
        seed: seeds the arrival times, so a run's schedule is reproducible.
        arrivals: the arrival times themselves instead (s after the phase begins, non-decreasing; a
            trace replay): ``rate``, ``burstiness`` and ``seed`` are then unused, and the phase ends
            with them (or at ``count``). A request's ``queued`` is its scheduled time, so
            ``start − queued`` is its send lag.

    Raises:
        ServerGone, asyncio.CancelledError: as :func:`closed_loop`.
    """
    if (count is None) == (duration_s is None):
        raise ValueError("give exactly one of count and duration_s")
    times = iter(arrivals) if arrivals is not None else itertools.accumulate(arrival_gaps(rate, burstiness, seed))
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    phase = Phase()
    t_begin = time.perf_counter() - client.origin
    deadline = None if duration_s is None else t_begin + duration_s
    gone: list[ServerGone] = []
    tasks: set[asyncio.Task] = set()

    async def one(record: RequestRecord, body: bytes) -> None:
        try:
            await _send(client, record, body, phase, on_record, alive, sem)
        except ServerGone as exc:
            gone.append(exc)

    try:
        for i, offset in enumerate(times):
            if (count is not None and i >= count) or gone:
                break
            arrival = t_begin + offset
            if deadline is not None and arrival >= deadline:
                break
            delay = arrival - (time.perf_counter() - client.origin)
            if delay > 0:
                await asyncio.sleep(delay)
            record, body = make(i)
            record.queued = arrival
            task = asyncio.create_task(one(record, body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if deadline is not None:
            remaining = deadline - (time.perf_counter() - client.origin)
            if tasks and remaining > 0:
                await asyncio.wait(set(tasks), timeout=remaining)
            phase.window = (t_begin, deadline)
        elif tasks:
            await asyncio.gather(*tasks)
        if gone:
            raise gone[0]
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return phase
