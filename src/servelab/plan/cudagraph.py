"""CUDA-graph capture sizes and the padding of decode batches to them (vLLM).

vLLM 0.33 (``vllm/config/vllm.py`` ``_set_cudagraph_sizes``; server-facts.md §2.4): with no user
list, ``max = min(max_num_seqs · (1 + num_spec_tokens) · 2, 512)`` (1024 on data-center Blackwell,
sm_100), capped at ``max_num_batched_tokens``; the sizes are ``[1, 2, 4] + range(8, min(max+1, 256),
8) + range(256, max+1, 16)``, plus ``max_num_batched_tokens`` itself when it is the cap; with
speculative decoding, the multiples ``n · (1 + num_spec_tokens)`` of those sizes up to
``max_num_batched_tokens`` are added. A decode batch of N tokens runs the graph of the smallest
size ≥ N (``vllm/v1/cudagraph_dispatcher.py``), so N − size slots are padding; above the largest
size the step runs without a graph.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def default_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, num_spec_tokens: int = 0, sm100: bool = False) -> list[int]:
    """vLLM 0.33's default ``cudagraph_capture_sizes`` (see the module docstring)."""
    query_len = 1 + num_spec_tokens
    largest = min(max_num_seqs * query_len * 2, 1024 if sm100 else 512)
    largest = min(max_num_batched_tokens, largest)
    sizes = [s for s in [1, 2, 4] if s <= largest] + list(range(8, min(largest + 1, 256), 8)) + list(range(256, largest + 1, 16))
    if largest == max_num_batched_tokens:
        sizes.append(max_num_batched_tokens)
    if num_spec_tokens:
        sizes += [n * query_len for n in list(sizes) if n * query_len <= max_num_batched_tokens]
    return sorted(set(sizes))


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
