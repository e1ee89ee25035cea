"""vLLM's KV-cache layout and capacity (the part of ``servelab.engines.vllm`` that ``servelab
plan`` uses for memory): whole 16-token blocks, and for models with more than one kind of cache layer
(full attention beside sliding-window, Gated DeltaNet or Mamba-2 layers) one page size for every
layer, blocks shared by groups of layers, a sliding-window layer holding its window plus one prefill
chunk. Sources in :func:`hybrid_layout`; checked on the 19 vLLM 0.25 boot logs of tests/fixtures/bootlogs.

Two versions differ for hybrids (:data:`VERSIONS`, ``servelab plan --vllm-version``):

- **0.25** reports "GPU KV cache size" as maximum concurrency × ``max_model_len`` tokens
  (``get_kv_cache_capacity``) and aligns the attention block to 16 tokens;
- **0.19** reports blocks ÷ KV-cache groups × block size (``_report_kv_cache_config`` in
  vllm/v1/core/kv_cache_utils.py of that line: the recurrent groups' blocks counted as if they held
  tokens, so a hybrid's figure is 3–5 × below what the cache holds) and, in the one 0.19 boot
  servelab has (the DGX Spark report, GB10, FlashInfer, Qwen3.5-122B-A10B), aligned the block to 64
  tokens: its 595,584 tokens = 141 × 4,224 and 12.89× = 567 blocks ÷ 44 pin the block at 4,224, the
  first multiple of 64 above the 4,168-token state page (16 would give 4,176). The 64 is read from that
  log, not from source (the source read aligns to 16, 32 on sm_100 with head size 256), so it is planned
  on compute capability 12.x only (``Hardware.compute_capability``), 16 elsewhere. Logs before 0.20
  are planned with 0.19's rules; where between 0.19 and 0.25 the report changed is not known.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servelab.engines.kv_layout import HybridLayout

if TYPE_CHECKING:
    from servelab.values.specs import ModelSpec

BLOCK_TOKENS = 16  # vLLM's default --block-size: KV capacity in whole blocks, and logs that print "# GPU blocks" (≤ 0.7)


@dataclass(frozen=True)
class KVRules:
    """What one vLLM version does differently with a hybrid's KV cache (module docstring)."""

    report: str  # "concurrency": tokens = max concurrency × max_model_len; "blocks": blocks ÷ groups × block size
    alignment_sm12: int = BLOCK_TOKENS  # tokens: the hybrid attention block is a multiple of this on compute capability 12.x (GB10)

    def block_alignment(self, compute_capability: str | None) -> int:
        """Tokens the hybrid attention block is a multiple of on a GPU of ``compute_capability`` (None: unknown, 16)."""
        return self.alignment_sm12 if (compute_capability or "").startswith("12.") else BLOCK_TOKENS


VERSIONS = {"0.25": KVRules("concurrency"), "0.19": KVRules("blocks", alignment_sm12=64)}
DEFAULT_VERSION = "0.25"


def rules_for(version: str | None) -> tuple[str, KVRules]:
    """The rules to plan ``version`` with (a release such as ``0.19.2rc1``, or None: the default):
    0.19's before 0.20, else 0.25's; with the version they stand for."""
    match = re.match(r"0\.(\d+)", version or "")
    key = "0.19" if match and int(match.group(1)) < 20 else DEFAULT_VERSION
    return key, VERSIONS[key]


def kv_tokens(budget_bytes: float, per_token: float, layout: HybridLayout | None, context: int) -> int | None:
    """KV-cache tokens as vLLM reports them for ``budget_bytes`` of KV memory: whole 16-token
    blocks of ``per_token`` bytes; for a hybrid, maximum concurrency × ``context`` (0.25,
    ``get_kv_cache_capacity``) or blocks ÷ groups × block size (0.19; module docstring).
    None when nothing grows with context."""
    if layout is not None and layout.report == "blocks":
        return layout.blocks(budget_bytes) // layout.groups * layout.block_size
    if layout is not None:
        return int(layout.concurrency(budget_bytes, context) * context)
    return int(budget_bytes // (per_token * BLOCK_TOKENS)) * BLOCK_TOKENS if per_token else None


def hybrid_layout(
    spec: ModelSpec, kv_bytes_per_token: float, state_bytes_per_seq: float, max_num_batched_tokens: int, speculative_tokens: int = 0,
    prefix_caching: bool = False, version: str | None = None, compute_capability: str | None = None,
) -> HybridLayout | None:
    """The layout vLLM (0.25, or the ``version`` given: :func:`rules_for`) gives a model whose full-attention layers sit beside sliding-window
    layers (Gemma 3, gpt-oss) and/or recurrent ones (Gated DeltaNet, Mamba-2).

    Sources (vLLM 0.25.0): ``vllm/platforms/interface.py`` ``Platform._align_hybrid_block_size``
    (with recurrent layers: attention block size = 16 · ⌈state page ÷ (16 · attention bytes per
    token)⌉, 16 the FlashAttention kernel alignment; the state page is padded up to the attention
    page; otherwise 16) and ``vllm/v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size``
    (layers of each kind split into groups of ``group_size`` = the smallest kind's layer count, or
    the largest one's when it is below 1.5 × the smallest; the last group of a kind padded),
    ``get_kv_cache_config_from_groups`` (blocks = memory ÷ page ÷ group_size),
    ``get_max_concurrency_for_kv_cache_config`` (blocks ÷ the blocks a request takes in every group,
    ``vllm/v1/kv_cache_interface.py`` ``max_memory_usage_bytes`` of each spec) and
    ``get_kv_cache_capacity`` (tokens = concurrency × ``max_model_len``).

    Args:
        kv_bytes_per_token: KV bytes per token of all full-attention layers on this GPU (a
            sliding-window layer's page is taken to be a full-attention layer's: same KV shape).
        state_bytes_per_seq: recurrent state of all recurrent layers per sequence on this GPU.
        max_num_batched_tokens: the prefill chunk a sliding-window layer holds beside its window.
        speculative_tokens: draft tokens per step; a recurrent layer keeps a state page for each.
        prefix_caching: vLLM's ``--enable-prefix-caching`` (off by default for these models): the
            recurrent state is cached per block, ``mamba_cache_mode`` ``all`` for models whose
            Mamba layers support it (Mamba-2 hybrids: NemotronH, Jamba, Zamba2, GraniteMoeHybrid,
            FalconH1; ``SupportsMambaPrefixCaching``), with the block size a multiple of the scan chunk
            (``lcm(chunk, 16) · ⌈state tokens ÷ that⌉``), else ``align`` (two state pages per request;
            ``vllm/model_executor/models/config.py`` ``MambaModelConfig``, ``vllm/platforms/interface.py``).

        version: the vLLM release planned (its block alignment and KV report, :data:`VERSIONS`).
        compute_capability: the GPU's (``Hardware.compute_capability``): 0.19's block alignment depends on it.

    Returns:
        None for a model with one kind of cache layer, without full-attention layers, or with MLA
        (not modelled: the dense formula applies).
    """
    n_attn, n_sliding = spec.count("full"), spec.count("sliding")
    n_rec = spec.count("linear") + spec.count("mamba")
    counts = [n for n in (n_attn, n_sliding, n_rec) if n]
    if not n_attn or len(counts) < 2 or spec.count("mla") or not kv_bytes_per_token:
        return None
    attn_bytes_per_token = kv_bytes_per_token / n_attn  # one layer
    state_bytes = state_bytes_per_seq / n_rec if n_rec else 0.0
    rules = rules_for(version)[1]
    align = rules.block_alignment(compute_capability) if n_rec else BLOCK_TOKENS
    mode = ("all" if spec.count("mamba") and not spec.count("linear") else "align") if prefix_caching and n_rec else "none"
    if mode == "all":
        chunk = math.lcm(spec.mamba_chunk_size or 2048, align)  # 2048: vLLM's default for a model without a chunk size
        block = chunk * max(1, math.ceil(math.ceil(state_bytes / attn_bytes_per_token) / chunk))
    else:
        block = align * max(1, math.ceil(state_bytes / (align * attn_bytes_per_token)))
    small, large = min(counts), max(counts)
    group = large if large < 1.5 * small else small
    groups = [-(-n // group) for n in (n_attn, n_sliding, n_rec)]
    return HybridLayout(
        block_size=block, page_bytes=int(block * attn_bytes_per_token), state_bytes=int(state_bytes), group_size=group,
        attention_groups=groups[0], sliding_groups=groups[1], recurrent_groups=groups[2],
        padding_layers=sum(g * group for g in groups) - sum(counts),
        sliding_window=(spec.sliding_window or 0) if n_sliding else 0, max_num_batched_tokens=max_num_batched_tokens if n_sliding else 0,
        speculative_blocks=speculative_tokens if n_rec else 0, mamba_cache_mode=mode, report=rules.report,
    )  # fmt: skip
