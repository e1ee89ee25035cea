"""CUDA-graph padding: which captured graph a decode batch runs, and what it wastes; the largest size
that puts a step carrying prompts inside a graph.

A decode batch of N tokens runs the graph of the smallest captured size ≥ N (vLLM:
``vllm/v1/cudagraph_dispatcher.py``), so N − size slots are padding; above the largest size the
step runs without a graph (SGLang's dispatch is the same: the smallest captured ``bs`` ≥ the batch).
The sizes an engine captures by default are the engine's (``Engine.capture_sizes``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Padding:
    """How one concurrency level runs: tokens per decode step, the graph size used, wasted fraction."""

    concurrency: int
    tokens: int
    graph_size: int | None  # None: above every capture size, runs eagerly
    waste: float  # (graph_size − tokens) / graph_size; 0 without a graph


def padding(sizes: list[int], concurrency: list[int], num_spec_tokens: int = 0) -> list[Padding]:
    """The padded graph size and waste for each concurrency (decode steps of ``c · (1 + k)`` tokens)."""
    ordered = sorted(sizes)
    rows = []
    for c in concurrency:
        tokens = c * (1 + num_spec_tokens)
        i = bisect.bisect_left(ordered, tokens)
        size = ordered[i] if i < len(ordered) else None
        rows.append(Padding(c, tokens, size, (size - tokens) / size if size else 0.0))
    return rows


def recommend(sizes: list[int], concurrency: list[int], num_spec_tokens: int = 0) -> list[int]:
    """A capture list that runs every target concurrency without padding: ``sizes`` plus their token counts."""
    return sorted(set(sizes) | {c * (1 + num_spec_tokens) for c in concurrency})


PROMPT_GRAPH_MAX = 2048  # the largest capture size suggested: the largest measured (validation/capture-h100*/); each size costs boot time and memory


def prompt_step_graph(prompt_tokens: int, streams: int) -> int | None:
    """The largest capture size to compare for steps that carry prompts: the next power of two ≥ two
    prompts beside the running batch (2 · P + B tokens; a loaded steady state's steps carry one or two,
    validation/mixed_steps.py), at most ``PROMPT_GRAPH_MAX``; None where one prompt beside the batch
    (P + B) does not fit that (a long prompt's step is long enough to hide its launches)."""
    if prompt_tokens + streams > PROMPT_GRAPH_MAX:
        return None
    return min(PROMPT_GRAPH_MAX, 2 ** math.ceil(math.log2(2 * prompt_tokens + streams)))
