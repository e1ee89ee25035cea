"""A burst, step by step: what vLLM V1's scheduler does with C streams that start together (``servelab
bench --closed-loop burst``; ``vllm bench serve --max-concurrency C --num-prompts R·C --request-rate
inf``), for ``servelab predict --closed-loop burst``.

The engine, as vLLM 0.25 runs it (docs/metrics.md, "predict: bursts"):

- **scheduler order** (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``): each step first gives
  every running request its token (a decode token, or the next chunk of a prompt still prefilling),
  then admits waiting requests first come, first served, each with as much of its prompt as the
  step's token budget (``max_num_batched_tokens``) has left, up to ``max_num_seqs`` running;
- **asynchronous scheduling** (on by default, "Asynchronous scheduling is enabled" in the boot log;
  vllm/v1/engine/core.py, ``step_with_batch_queue``): the scheduler decides step n + 1 while step n
  runs, so a request that arrives while step n − 1 is running waits for step n + 1; an idle engine
  schedules an arrival at once;
- a request's first token comes at the end of the step that holds the last chunk of its prompt, one
  token per step after that; when its last token is out its stream sends the next request (closed loop);
- a step's time is the caller's ``step_s(decode_tokens, prompt_tokens, sustained)``: the roofline with the
  calibration, CUDA graphs at or below the largest capture size and without them above it, and
  ``sustained`` when the step before it carried prompts too (a wave's prefill, step after step, which
  ``servelab.plan.predict`` prices at the power-capped clock).

So a wave's prompts are prefilled in chunks of ``max_num_batched_tokens`` (a step of 8,192 prompt
tokens, the decodes of the already-prefilled ones inside it), then the wave decodes at full batch
with CUDA graphs; the second wave's requests arrive as the first wave's finish, in the order their
prompts were prefilled, and ride the steps of the first wave's tail. TTFT is bimodal (the first
wave waits for the prefill of everything before it): compare its mean and p99, not its p50.

- **launch spread**: the API server takes each request in turn (chat template, tokenization), so
  requests sent together reach the engine ``admit_s`` apart.

Assumptions: every request has the same prompt and output length; no preemption (the KV cache holds the running
requests: ``servelab.plan.predict`` caps the batch); no prefix-cache hits.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class _Request:
    stream: int
    sent: float
    arrives: float  # at the engine
    prefilled: int = 0
    generated: int = 0
    first: float = 0.0


@dataclass(frozen=True)
class Burst:
    """Per request (in completion order) TTFT and E2E latency, s; ``span_s`` from the first send to the
    last token, s; ``steps`` run; ``first_token_s`` from the first send to the first token of any request, s."""

    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    span_s: float = 0.0
    steps: int = 0
    first_token_s: float = 0.0

    def tg_total_tok_s(self, output_tokens: int) -> float:
        """Decode throughput of the burst, tok/s: Σ (O − 1) over its requests ÷ (last token − first
        first-token), servelab grid's and llama-benchy's "tg t/s (total)" (docs/metrics.md, "Grid")."""
        window = self.span_s - self.first_token_s
        return len(self.e2e_s) * (output_tokens - 1) / window if window > 0 else 0.0  # one output token: no decode window

    def ttft(self, stat: str) -> float:
        """TTFT ``mean``, ``p50`` or ``p99``, s."""
        return float(np.mean(self.ttft_s) if stat == "mean" else np.percentile(self.ttft_s, 50 if stat == "p50" else 99))

    def tpot_s(self, output_tokens: int) -> float:
        """Mean TPOT, (E2E − TTFT) ÷ (O − 1), s (vLLM bench serve's mean TPOT)."""
        return float(np.mean([(e - t) / max(1, output_tokens - 1) for t, e in zip(self.ttft_s, self.e2e_s, strict=True)]))


def simulate(
    step_s: Callable[[int, int, bool], float], *, streams: int, requests_per_stream: int, input_tokens: int, output_tokens: int,
    max_num_seqs: int, max_num_batched_tokens: int, admit_s: float = 0.0, wait_s: float = 0.0,
) -> Burst:  # fmt: skip
    """Run a burst of ``streams`` closed-loop streams, each sending ``requests_per_stream`` requests of
    ``input_tokens`` prompt and ``output_tokens`` output tokens one after another, through the
    scheduler of the module docstring. ``step_s(decode_tokens, prompt_tokens, sustained)``: a step's time, s
    (``sustained``: the step before it carried prompts too);
    ``admit_s``: the API server's time per request, s, one request after another (requests sent
    together reach the engine ``admit_s`` apart: the launch spread); ``wait_s``: what each request waits at the host besides,
    s (``servelab.plan.predict``'s host's queue).

    Raises:
        ValueError: a length, stream count or limit below 1.
    """
    # One loop, one scheduler step a turn, over 80 lines on purpose: every phase of a step (arrivals,
    # admission under the token budget, the step's time, finishes and re-sends) reads and writes the
    # same state, which split functions would only pass back and forth.
    if min(streams, requests_per_stream, input_tokens, output_tokens, max_num_seqs, max_num_batched_tokens) < 1:
        raise ValueError("streams, requests, token counts and limits must be at least 1")
    left = {s: requests_per_stream - 1 for s in range(streams)}
    api_free = 0.0  # when the API server has handed the last request on

    def send(stream: int, at: float) -> _Request:
        nonlocal api_free
        start = max(at, api_free)
        api_free = start + admit_s
        return _Request(stream, at, arrives=start + wait_s)

    arrivals: deque[_Request] = deque(send(s, 0.0) for s in range(streams))  # in arrival order
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    ttft, e2e = [], []
    now, steps, prompted, first_token = 0.0, 0, False, math.inf  # prompted: the last step carried prompts
    scheduled_at = [0.0, 0.0]  # when the scheduler decided the previous step and this one (asynchronous scheduling)
    while arrivals or waiting or running:
        if not running and not waiting and arrivals[0].arrives > now:  # idle engine: the next arrival is scheduled at once
            now, prompted = arrivals[0].arrives, False  # an idle GPU: its clock recovers
            scheduled_at = [now, now]
        if running and not arrivals and (not waiting or len(running) >= max_num_seqs) and all(r.generated for r in running):
            skip = min(output_tokens - r.generated for r in running) - 1  # plain decode steps until the next finish: taken at once
            if skip > 0:
                step = step_s(len(running), 0, False)
                for r in running:
                    r.generated += skip
                now, steps, prompted = now + skip * step, steps + skip, False
                scheduled_at = [now - step, now]
        cutoff = scheduled_at[0]  # this step was decided when the one before it started
        while arrivals and arrivals[0].arrives <= cutoff:
            waiting.append(arrivals.popleft())
        budget, prompt, done_prefill, decoding = max_num_batched_tokens, 0, set(), set()
        for r in running:  # running requests first: a decode token, or the next chunk of their prompt
            if r.prefilled < input_tokens:
                chunk = min(input_tokens - r.prefilled, budget)
                r.prefilled += chunk
                prompt, budget = prompt + chunk, budget - chunk
                if r.prefilled == input_tokens:
                    done_prefill.add(r)
            elif budget > 0:
                decoding.add(r)
                budget -= 1
        decode = len(decoding)
        while waiting and budget > 0 and len(running) < max_num_seqs:  # then new requests, first come first served
            r = waiting.popleft()
            chunk = min(input_tokens, budget)
            r.prefilled, prompt, budget = chunk, prompt + chunk, budget - chunk
            running.append(r)
            if chunk == input_tokens:
                done_prefill.add(r)
        if not decode and not prompt:  # nothing eligible yet: wait for the next arrival
            now, prompted = max(now, arrivals[0].arrives), False
            scheduled_at = [now, now]
            continue
        start, now = now, now + step_s(decode, prompt, prompted)
        steps, prompted = steps + 1, prompt > 0
        scheduled_at = [start, now]
        finished = []
        for r in running:
            if r in done_prefill:
                r.first, r.generated = now, 1
                first_token = min(first_token, now)
            elif r in decoding:
                r.generated += 1
            if r.generated >= output_tokens:
                finished.append(r)
        for r in finished:
            running.remove(r)
            ttft.append(r.first - r.sent)
            e2e.append(now - r.sent)
            if left[r.stream]:
                left[r.stream] -= 1
                arrivals.append(send(r.stream, now))
    return Burst(ttft, e2e, now, steps, first_token)
