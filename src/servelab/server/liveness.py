"""Is the server still there? A cheap probe, apart from the request path, that does not misfire under load.

The scheduler asks after a request fails at the connection level (``connect``, ``disconnected``).
At 1,000 streams a live server may drop a few of them and answer slowly; a full discovery with a
short timeout then called it dead and ended the run. So the probe is:

- **cheap**: one GET of the engine's ready path on its own one-connection session (never queued
  behind the run's streams); any HTTP answer, whatever its status, means a process holds the port;
- **rate-limited**: callers share the probe in flight, and an "up" answer holds for ``hold_s``;
- **tolerant**: the server is gone only when its port refuses connections twice ``retry_s`` apart
  (nothing listens there), or when probes have failed otherwise (timeouts, resets) for ``grace_s``
  in a row. A server that merely answers slowly stays up; its requests fail by their own timeout.

(A server servelab started itself is asked directly instead: whether its process still runs.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

HOLD_S = 2.0
RETRY_S = 1.0
GRACE_S = 30.0
PROBE_TIMEOUT_S = 5.0


class Liveness:
    """``await liveness()`` → False once the server at ``url`` is gone (see the module docstring).

    Args:
        url: the server root (``http://host:port``); ``ready_path`` is appended.
        ready_path: a cheap GET the engine answers (``Engine.ready_path``).
        hold_s / retry_s / grace_s / probe_timeout_s: seconds, as in the module docstring.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self,
        url: str,
        ready_path: str,
        *,
        hold_s: float = HOLD_S,
        retry_s: float = RETRY_S,
        grace_s: float = GRACE_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/") + ready_path
        self.hold_s, self.retry_s, self.grace_s, self.probe_timeout_s = hold_s, retry_s, grace_s, probe_timeout_s
        self.clock = clock
        self.probes = 0  # probes sent, for tests and the curious
        self._up_at: float | None = None
        self._failing_since: float | None = None
        self._probe: asyncio.Future[bool] | None = None

    async def __call__(self) -> bool:
        if self._up_at is not None and self.clock() - self._up_at < self.hold_s:
            return True
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._decide())
        return await asyncio.shield(self._probe)

    async def _decide(self) -> bool:
        answer = await self._once()
        if answer == "refused":
            await asyncio.sleep(self.retry_s)  # a schedule: the second look, retry_s later
            answer = await self._once()
            if answer == "refused":
                return False
        now = self.clock()
        if answer == "up":
            self._up_at, self._failing_since = now, None
            return True
        self._failing_since = self._failing_since if self._failing_since is not None else now
        return now - self._failing_since < self.grace_s

    async def _once(self) -> str:
        """One GET: ``up`` (any HTTP answer), ``refused`` (nothing listens) or ``unknown``."""
        self.probes += 1
        timeout = aiohttp.ClientTimeout(total=self.probe_timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=1, force_close=True)) as session:
                async with session.get(self.url) as resp:
                    await resp.read()
                    return "up"
        except aiohttp.ClientConnectorError as exc:
            return "refused" if isinstance(exc.os_error, ConnectionRefusedError) else "unknown"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return "unknown"
