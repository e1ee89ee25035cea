"""The interface of a load mode (:class:`LoadMode`): which levels a run has, what it sets up once
the chat template is known, and how one level is sent.

The modes, each in its own module: ``run.closed_loop`` (``--closed-loop stagger|burst``),
``run.open_loop`` (``--rate``), ``run.sessions`` (``--sessions``, multi-turn workloads) and
``run.replay`` (``--trace``); ``run.bench`` picks one (``MODES``) and runs its levels on a
:class:`~servelab.run.levels.Levels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.load.client import StreamClient
from servelab.run.options import BenchOptions
from servelab.server.tokenizer import Tokenizer
from servelab.store.results import TraceInfo

if TYPE_CHECKING:
    from servelab.run.levels import Levels


class LoadMode:
    """How a run sends its load: which levels it has, what it sets up once the chat template is
    known, and how one level runs (module docstring). A mode is one module and one entry in
    ``run.bench.MODES``; the first whose :meth:`applies` says yes runs the run.

    ``trace_info`` is what the run stores of a replayed trace (None for the other modes).
    """

    trace_info: TraceInfo | None = None

    @classmethod
    def applies(cls, options: BenchOptions) -> bool:
        """Whether this mode sends the load ``options`` asks for."""
        raise NotImplementedError

    def asked(self, options: BenchOptions) -> list[tuple[float | None, int]]:
        """The levels in order: (rate in requests/s or None, streams or the open loop's cap)."""
        return [(None, c) for c in options.concurrency]

    def fit(self, levels: Levels) -> None:
        """Check the load against the server's context before anything is sent (the request shapes).

        Raises:
            DoesNotFit: nothing of the load fits.
        """
        levels.fit_shapes()

    async def prepare(self, levels: Levels, tokenizer: Tokenizer) -> None:
        """Set up what every level needs, once the template is calibrated (before the first level)."""

    async def run(self, levels: Levels, client: StreamClient, rate: float | None, concurrency: int) -> None:
        """Run one level and conclude it (``levels.conclude``).

        Raises:
            ServerGone: the server went away (the run ends as partial).
        """
        raise NotImplementedError
