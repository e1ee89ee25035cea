"""Playing multi-turn sessions against a server: each turn built, counted exactly, sent and answered.

A session (servelab.workloads.sessions) is played turn by turn on one stream of a
:func:`servelab.load.scheduler.session_loop`:

1. its first request holds the run's shared system prompt (if the workload has one: the same text
   for every session of the run, so a prefix cache may serve it; unique to the run, so no other
   run's cache can) and a first user message opened by the session's nonce;
2. before each request the whole conversation is counted as the server will count it (its chat
   template applied: ``Tokenizer.count_messages``, llama.cpp and vLLM), and that count is the
   request's ``expected_prompt_tokens``, checked against the server's usage like any prompt;
3. a request whose prompt plus ``max_tokens`` would pass the server's context ends the session
   with the reason ``context_limit`` (nothing is sent: no HTTP 400s); a failed turn ends it with
   ``failed`` (the conversation cannot go on without its answer);
4. the answer's content is appended, then, after the think time, the next user message of
   ``turn_input_tokens`` text tokens (opened by the workload's ``turn_instruction``).

Sessions let the server cache what they resend (each earlier turn, and the shared system prompt):
that reuse is what they measure. Every request of a session goes to one client worker
(``affinity``). A single-turn workload drawn in a mix is sent as bench sends it (one token-exact
templated prompt, prefix cache cold).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from servelab.load.client import StreamClient
from servelab.load.scheduler import Phase, Send, session_loop
from servelab.metrics.summary import summarize
from servelab.metrics.turns import session_stats
from servelab.run.levels import Levels
from servelab.run.mode import LoadMode
from servelab.run.options import BenchOptions
from servelab.server.endpoint import Endpoint
from servelab.server.tokenizer import Tokenizer
from servelab.values.records import RequestRecord
from servelab.values.prompt import Prompt
from servelab.workloads.corpus import PromptBuilder
from servelab.workloads.sessions import Conversation
from servelab.workloads.suites import Workload

@dataclass
class SessionPlayer:
    """Plays sessions (module docstring) for one run.

    Args:
        endpoint: the server (its ``max_model_len`` bounds a session's growth).
        options: the run's load (chat template kwargs, think time, seed, output lengths).
        tokenizer: counts whole conversations (``count_messages``).
        plain: prompt builders per corpus language that count bare text (no chat template).
        tag: the run's unique tag: it opens the shared system prompt and every session's nonce.
        new_record: makes the next record (concurrency level, phase, expected prompt tokens, max_tokens).
        single: builds a single-turn workload's prompt (templated, token-exact, with this nonce).
        body: a request's body under the run's options (prompt or conversation, max_tokens, cold or
            None for ``--prefix-cache``: ``Levels.body``).

    ``ended`` counts why sessions ended: every turn answered (``completed``), the next prompt would
    not fit the server's context (``context_limit``), a turn failed (``failed``), or the phase ended
    mid-session (``cut_off``: its duration, Ctrl-C).
    """

    endpoint: Endpoint
    options: BenchOptions
    tokenizer: Tokenizer
    plain: dict[str, PromptBuilder]
    tag: str
    new_record: Callable[[int, str, int | None, int], RequestRecord]
    single: Callable[[Workload, str], Awaitable[Prompt]]
    body: Callable[[Prompt | list[dict], int, bool | None], bytes]
    ended: Counter = field(default_factory=Counter)
    _systems: dict[str, str] = field(default_factory=dict)

    def draw(self, shapes: list[tuple[Workload, float]], session: int) -> Workload:
        """The workload of session ``session``, drawn by the mix's weights (seeded by the session number)."""
        rng = random.Random(f"{self.options.seed}:session:{session}")
        return rng.choices([s for s, _ in shapes], weights=[w for _, w in shapes])[0]

    async def _system(self, shape: Workload) -> str:
        """The run's system prompt of ``shape``: built once, shared by its sessions."""
        if shape.name not in self._systems:
            built = await self.plain[shape.lang].build(shape.system_tokens, f"[{self.tag}-system]", instruction=shape.system)
            self._systems[shape.name] = built.text
        return self._systems[shape.name]

    async def play(self, shape: Workload, session: int, send: Send, level: int, phase: str) -> None:
        """Play one session of ``shape`` (module docstring); its end reason is counted in ``ended``.

        Raises:
            ServerGone, asyncio.CancelledError: from ``send`` (a cancelled session counts as ``cut_off``).
        """
        o = self.options
        nonce = f"[{self.tag}-s{level}.{phase[0]}{session}]"
        if not shape.multi_turn:
            prompt = await self.single(shape, nonce)
            record = self.new_record(level, phase, prompt.tokens, o.draw_output(shape.max_tokens, session))
            record.workload = shape.name or None
            self.ended["completed" if await send(record, self.body(prompt, record.max_tokens, None), (level, phase, session)) is not None else "failed"] += 1
            return
        builder = self.plain[shape.lang]
        conv = Conversation(await self._system(shape) if shape.system_tokens else None)
        conv.ask((await builder.build(shape.input_tokens, nonce, instruction=shape.instruction, suffix=shape.question)).text)
        limit = self.endpoint.info.max_model_len
        last: RequestRecord | None = None
        reason = "completed"
        try:
            for turn in range(shape.turns):
                if turn:
                    await asyncio.sleep(o.think_time.draw(o.seed, session, turn))  # a schedule: the user's pause
                    asked = await builder.build(shape.turn_input_tokens or shape.input_tokens, instruction=shape.turn_instruction)
                    conv.ask(asked.text)
                messages = conv.snapshot()
                expected = await self.tokenizer.count_messages(messages, o.chat_template_kwargs)
                max_tokens = o.draw_output(shape.max_tokens, session * 1000 + turn)
                # without the server's count (a bare tokenizer file): a lower bound from the last turn's usage
                known = expected if expected is not None or last is None else (last.prompt_tokens or 0) + (last.output_tokens or 0) + asked.tokens
                if limit is not None and (known or 0) + max_tokens > limit:
                    reason = "context_limit"
                    break
                record = self.new_record(level, phase, expected, max_tokens)
                record.workload, record.session, record.turn = shape.name or None, session, turn
                texts = await send(record, self.body(messages, max_tokens, False), (level, phase, session))
                if texts is None:
                    reason = "failed"
                    break
                conv.answer(texts.content)
                last = record
        except asyncio.CancelledError:
            reason = "cut_off"
            raise
        finally:
            self.ended[reason] += 1


class Sessions(LoadMode):
    """Levels of sessions kept open (``--sessions``, or a multi-turn workload in the mix): each
    stream plays one session after another (:class:`SessionPlayer`); a level is warm-up sessions
    (default one per stream), then the measured ones (``--requests`` sessions, default one per
    stream, or ``--duration``)."""

    def __init__(self) -> None:
        self.player: SessionPlayer | None = None

    @classmethod
    def applies(cls, options: BenchOptions) -> bool:
        return options.session_mode

    async def prepare(self, levels: Levels, tokenizer: Tokenizer) -> None:
        """The session player, with bare-text builders per corpus language."""
        plain = {}
        for lang in {shape.lang for shape, _ in levels.shapes}:
            plain[lang] = PromptBuilder(tokenizer, seed=levels.opts.seed + 2, lang=lang)
            await plain[lang].prepare()
        self.player = SessionPlayer(levels.endpoint, levels.opts, tokenizer, plain, levels.tag, levels.record, levels.build, levels.body)

    async def _phase(self, levels: Levels, client: StreamClient, level: int, phase: str, count: int | None, duration_s: float | None) -> Phase:
        """One phase of ``level`` sessions kept open; their end reasons in ``player.ended``."""
        assert self.player is not None
        player = self.player
        player.ended.clear()
        turns = {shape.turns for shape, _ in levels.shapes}
        levels.hooks.phase_started(level, phase, count * turns.pop() if count is not None and len(turns) == 1 else None, duration_s)  # requests

        async def play(session: int, send: Send) -> None:
            await player.play(player.draw(levels.shapes, session), session, send, level, phase)

        load = session_loop(client, play, concurrency=level, count=count, duration_s=duration_s, on_record=levels.on_record, alive=levels.alive)
        return await levels.sampled(level, phase, None, load)

    async def run(self, levels: Levels, client: StreamClient, rate: float | None, concurrency: int) -> None:
        o = levels.opts
        levels.begin()
        n_warm = o.warmup if o.warmup is not None else concurrency
        if n_warm:
            await self._phase(levels, client, concurrency, "warmup", n_warm, None)
        count = None if o.duration_s is not None else (o.requests or concurrency)
        measured = await self._phase(levels, client, concurrency, "measured", count, o.duration_s)
        summary = summarize(concurrency, measured.records, measured.window)
        assert self.player is not None
        summary.sessions = session_stats(measured.records, self.player.ended)
        levels.conclude(summary, measured, concurrency)
