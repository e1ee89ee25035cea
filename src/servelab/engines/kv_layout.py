"""A paged KV cache shared by groups of layers, as plain data: the layout an engine gives a hybrid
model (``Engine.kv_layout``), read by ``servelab.plan`` and its report without knowing the engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HybridLayout:
    """The KV-cache layout of a model with more than one kind of cache layer (full attention with
    sliding-window attention and/or recurrent layers), per GPU (sizes in bytes, block size and window
    in tokens): one page size for every layer, blocks shared by groups of layers. The formulas are
    vLLM 0.25's (cited on each method), the one engine servelab plans; an engine computes its layout
    in its own module (vLLM: ``servelab.engines.vllm_kv.hybrid_layout``)."""

    block_size: int
    page_bytes: int
    state_bytes: int  # one recurrent layer's state, padded up to page_bytes (0: no recurrent layers)
    group_size: int
    attention_groups: int  # full-attention groups
    recurrent_groups: int
    padding_layers: int
    sliding_groups: int = 0
    sliding_window: int = 0
    max_num_batched_tokens: int = 0
    speculative_blocks: int = 0  # extra state pages per recurrent group and request with speculative decoding
    mamba_cache_mode: str = "none"  # vLLM's: none (prefix caching off), align (on; GDN), all (on; Mamba-2 hybrids)
    report: str = "concurrency"  # how the version reports its KV tokens (KVRules.report)

    @property
    def groups(self) -> int:
        """KV-cache groups (full attention, sliding window, recurrent), each a block table."""
        return self.attention_groups + self.sliding_groups + self.recurrent_groups

    def blocks(self, budget_bytes: float) -> int:
        """Blocks the budget holds: every group shares one pool of ``group_size`` pages per block."""
        return int(budget_bytes // self.page_bytes // self.group_size)

    def sliding_blocks(self, context: int) -> int:
        """Blocks one request holds at most in a sliding-window group: its window plus one chunk of
        prefill, ⌈min(window − 1 + max_num_batched_tokens, context) ÷ block⌉ + 1 (vLLM 0.25
        ``SlidingWindowSpec.max_admission_blocks_per_request``: the +1 for a window that does not
        start on a block boundary)."""
        window = self.sliding_window or context
        return -(-min(window - 1 + self.max_num_batched_tokens, context) // self.block_size) + 1

    def blocks_per_request(self, context: int) -> int:
        """Blocks one request of ``context`` tokens takes: its attention blocks in each full-attention
        group, :meth:`sliding_blocks` in each sliding-window group, and in each recurrent group
        ``speculative_blocks`` state pages plus 1 (prefix caching off: ``mamba_cache_mode`` none), 2
        (``align``) or one per block of context (``all``) (vLLM 0.25 ``MambaSpec.max_memory_usage_bytes``,
        ``num_speculative_blocks`` = the speculative tokens)."""
        full = -(-context // self.block_size) * self.attention_groups
        sliding = self.sliding_blocks(context) * self.sliding_groups if self.sliding_groups else 0
        state = {"none": 1, "align": 2, "all": -(-context // self.block_size)}[self.mamba_cache_mode]
        return full + sliding + self.recurrent_groups * (state + self.speculative_blocks)

    def request_bytes(self, context: int) -> int:
        """Bytes of KV memory one request of ``context`` tokens takes (its blocks × a block's pages)."""
        return self.blocks_per_request(context) * self.page_bytes * self.group_size

    def concurrency(self, budget_bytes: float, context: int) -> float:
        """Requests of ``context`` tokens the budget holds at once (vLLM's "Maximum concurrency")."""
        return self.blocks(budget_bytes) / self.blocks_per_request(context)
