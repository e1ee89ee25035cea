"""Multi-turn sessions measured: how each turn fares as the context grows (docs/metrics.md "Sessions").

From a level's records that carry a ``session`` and ``turn`` (servelab.run.sessions), per turn index:
the requests, their mean context (prompt tokens, the server's count when it sent one), TTFT, and
the prefix-cache hit rate of that turn as the server reported it per request
(``usage.prompt_tokens_details.cached_tokens`` ÷ prompt tokens, summed over the turn's requests).
And per level: sessions started and how they ended (``SessionPlayer.ended``, servelab.run.sessions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from servelab.metrics.request import Distribution, ttft_ms
from servelab.values.records import RequestRecord


class TurnStats(BaseModel):
    """One turn index of a level's sessions (successful measured requests)."""

    turn: int = Field(description="Turn index, from 0.")
    requests: int
    context_tokens_mean: float | None = Field(None, description="Mean prompt tokens: the whole conversation so far, chat template included.")
    ttft_ms: Distribution = Field(default_factory=Distribution)
    prefix_hit_rate: float | None = Field(None, description="Σ usage cached_tokens ÷ Σ prompt tokens over the turn's requests; None where the server reported no cached_tokens.")


class SessionStats(BaseModel):
    """A level's sessions: how many were started, how they ended, and each turn's figures."""

    started: int
    ended: dict[str, int] = Field(default_factory=dict, description="Sessions per end reason: completed, context_limit, failed, cut_off.")
    turns: list[TurnStats] = Field(default_factory=list)


def session_stats(records: Iterable[RequestRecord], ended: Mapping[str, int]) -> SessionStats | None:
    """Per-turn figures of the measured session requests among ``records`` (None: no such request),
    with the sessions' end reasons ``ended`` (counts)."""
    by_turn: dict[int, list[RequestRecord]] = {}
    started: set[int] = set()
    for r in records:
        if r.phase == "measured" and r.turn is not None and r.session is not None:
            started.add(r.session)
            if r.status == "ok":
                by_turn.setdefault(r.turn, []).append(r)
    if not started:
        return None
    turns = []
    for turn, rs in sorted(by_turn.items()):
        prompts = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        reported = [r for r in rs if r.cached_prompt_tokens is not None and r.prompt_tokens]
        turns.append(TurnStats(
            turn=turn,
            requests=len(rs),
            context_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
            ttft_ms=Distribution.of(v for r in rs if (v := ttft_ms(r)) is not None),
            prefix_hit_rate=sum(r.cached_prompt_tokens for r in reported) / sum(r.prompt_tokens for r in reported) if reported else None,
        ))  # fmt: skip
    return SessionStats(started=max(len(started), sum(ended.values())), ended={k: v for k, v in ended.items() if v}, turns=turns)
