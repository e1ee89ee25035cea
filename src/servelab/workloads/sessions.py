"""Multi-turn sessions as data: the think time between turns and a session's conversation.

A session (``servelab bench --sessions N --turns T``, or a workload with ``turns`` > 1 such as
``agentic``) is one conversation: its first request holds the system prompt (if any) and the
first user message; each later request resends the whole conversation so far — every earlier
answer included — plus a new user message. How a session is played against a server is
``servelab.run.sessions``; what is measured per turn is ``servelab.metrics.turns``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from servelab.errors import ServelabError

_THINK = re.compile(r"\s*(exp:)?\s*(\d{1,9}(?:\.\d{1,9})?)\s*(ms|s|m)?\s*")
MAX_THINK_S = 3600.0


@dataclass(frozen=True)
class ThinkTime:
    """The pause between an answer and a session's next request, s: a fixed ``mean_s``, or with
    ``exponential`` drawn from an exponential distribution of that mean (a user's reading and typing
    time as a memoryless wait; seeded per session and turn, so a rerun waits the same)."""

    mean_s: float = 0.0
    exponential: bool = False

    def draw(self, seed: int, session: int, turn: int) -> float:
        """The think time before turn ``turn + 1`` of ``session``, s."""
        if not self.exponential or self.mean_s == 0:
            return self.mean_s
        return random.Random(f"{seed}:{session}:{turn}").expovariate(1.0 / self.mean_s)

    def label(self) -> str:
        """As the option is written: ``2s`` or ``exp:2s``."""
        return f"{'exp:' if self.exponential else ''}{self.mean_s:g}s"


def parse_think_time(value: str) -> ThinkTime:
    """``--think-time``: ``0``, ``2s``, ``500ms``, ``1m`` (fixed) or ``exp:2s`` (exponential, that mean).

    Raises:
        ServelabError: another shape, or above an hour.
    """
    m = _THINK.fullmatch(value)
    if not m:
        raise ServelabError(f"--think-time {value!r}: give a duration such as 0, 2s, 500ms, or exp:2s for exponential pauses of that mean")
    seconds = float(m.group(2)) * {None: 1.0, "s": 1.0, "ms": 1e-3, "m": 60.0}[m.group(3)]
    if seconds > MAX_THINK_S:
        raise ServelabError(f"--think-time {value!r}: at most an hour")
    return ThinkTime(seconds, exponential=m.group(1) is not None)


@dataclass
class Conversation:
    """One session's messages, in the OpenAI chat format (``{"role", "content"}`` dicts).

    ``system`` opens it when given; ``ask`` adds a user message, ``answer`` the assistant's reply
    (its content only: reasoning text is not sent back, as chat clients do)."""

    system: str | None = None
    messages: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.system:
            self.messages.append({"role": "system", "content": self.system})

    def ask(self, text: str) -> None:
        """Add the user's next message."""
        self.messages.append({"role": "user", "content": text})

    def answer(self, text: str) -> None:
        """Add the assistant's reply to the last message."""
        self.messages.append({"role": "assistant", "content": text})

    def snapshot(self) -> list[dict]:
        """The messages to send now (a copy: later turns do not change a sent request)."""
        return [dict(m) for m in self.messages]
