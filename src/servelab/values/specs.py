"""What a plan is about, as plain data: a model's architecture (:class:`ModelSpec`) and an accelerator (:class:`Hardware`).

Every layer that computes with them uses these types, the engines' own accounting included
(``servelab.engines``: runtime memory, KV-cache layout, batch defaults); reading them from a
``config.json`` or a hardware profile is ``servelab.plan`` (``model_spec``, ``hardware``).
Layer kinds: ``full`` (full attention), ``sliding`` (sliding-window attention), ``mla``,
``linear`` (Gated DeltaNet), ``mamba``, or ``none`` (an FFN-only block, as in Nemotron-H); each
layer's FFN is ``dense``, ``moe`` or ``none``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LayerKind = Literal["full", "sliding", "mla", "linear", "mamba", "none"]
FFNKind = Literal["dense", "moe", "none"]


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its token mixer and its FFN."""

    kind: LayerKind
    ffn: FFNKind


@dataclass
class ModelSpec:
    """Architecture facts needed for memory and roofline planning.

    Parameter counts are raw integers; ``params`` splits them by kind (``embed``, ``lm_head``,
    ``attn``, ``recurrent``, ``mlp``, ``experts``, ``shared``, ``router``, ``norms``, ``mtp``).
    """

    name: str
    model_type: str
    hidden_size: int
    vocab_size: int
    layers: list[Layer]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied_embeddings: bool
    max_position_embeddings: int | None
    sliding_window: int | None = None
    intermediate_size: int = 0  # dense MLP width
    moe_intermediate_size: int = 0  # one routed expert's width
    num_experts: int = 0
    experts_per_token: int = 0
    expert_params: int = 0  # one routed expert of one layer
    expert_matrices: int = 3  # one routed expert's weight matrices: 3 gated (gate, up, down), 2 without a gate (up, down)
    mla_latent: int = 0  # kv_lora_rank + qk_rope_head_dim
    linear_state_bytes: int = 0  # per linear-attention layer per sequence (state + bf16 conv)
    mamba_state_bytes: int = 0  # per Mamba layer per sequence
    mamba_chunk_size: int = 0  # Mamba-2 scan chunk (vLLM aligns the block size to it under prefix caching)
    mtp_layers: int = 0
    params: dict[str, int] = field(default_factory=dict)
    reference: dict = field(default_factory=dict)
    published_sizes: dict = field(default_factory=dict)
    published: dict = field(default_factory=dict)  # format → its published checkpoint: repo, source, quantization_config (catalog models)
    native_quant: dict | None = None  # the config's own quantization_config: a catalog model's published checkpoint format
    family: str = ""  # the model_type servelab read it as, or "generic" (servelab.plan.families)
    family_source: str = ""  # the modeling file the formulas follow, or the generic reading's summary
    assumptions: list[str] = field(default_factory=list)  # what a generic reading assumed
    config_path: str | None = None  # the config.json read (a user's file, or the Hugging Face cache's copy)
    hub_id: str | None = None  # the Hub repository it came from (org/name), with its revision
    revision: str | None = None

    @property
    def total_params(self) -> int:
        """All parameters, MTP modules excluded."""
        return sum(v for k, v in self.params.items() if k != "mtp")

    @property
    def moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.ffn == "moe")

    @property
    def active_params(self) -> int:
        """Parameters touched per token, input embedding excluded (lm_head or the tied embedding included)."""
        routed = self.moe_layers * self.experts_per_token * self.expert_params
        dense = self.total_params - self.params.get("experts", 0) - self.params["embed"]
        lm_head = self.params["embed"] if self.tied_embeddings else 0
        return dense + routed + lm_head

    def count(self, kind: LayerKind) -> int:
        """Number of layers of a kind."""
        return sum(1 for layer in self.layers if layer.kind == kind)

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """KV-cache bytes each token of context adds in the layers whose cache grows with context.

        Full attention: ``2 · nkv · head_dim · dtype`` per layer; MLA: ``(kv_lora + rope) · dtype``
        per layer (the vLLM/SGLang latent cache). Sliding-window layers are capped per sequence and
        counted in :meth:`seq_bytes`, not here (same convention as models.yaml
        ``kv_cache_bytes_per_token_bf16``).
        """
        per_gqa = 2 * self.num_kv_heads * self.head_dim * dtype_bytes
        return self.count("full") * per_gqa + self.count("mla") * self.mla_latent * dtype_bytes

    def state_bytes_per_seq(self) -> int:
        """Constant recurrent state per sequence: Gated DeltaNet and Mamba layers (state in ``mamba_ssm_cache_dtype`` + bf16 conv)."""
        return self.count("linear") * self.linear_state_bytes + self.count("mamba") * self.mamba_state_bytes

    def seq_bytes(self, context: int, dtype_bytes: float) -> float:
        """Cache bytes of one sequence of ``context`` tokens: growing KV, windowed KV, recurrent state."""
        window = min(context, self.sliding_window or context)
        sliding = window * self.count("sliding") * 2 * self.num_kv_heads * self.head_dim * dtype_bytes
        return context * self.kv_bytes_per_token(dtype_bytes) + sliding + self.state_bytes_per_seq()


GIB = 2**30


class Hardware(BaseModel):
    """One accelerator (or unified-memory machine). Strict: a number is a number (``true`` is not 1
    GB/s), a flag a boolean (``"yes"`` is refused)."""

    model_config = ConfigDict(strict=True)

    name: str
    memory_gib: float = Field(gt=0, le=1e6, description="Device memory as the runtime sees it, GiB.")
    unified: bool = False
    compute_capability: str | None = Field(None, description="CUDA compute capability (\"12.1\" for GB10), where the engine's kernels depend on it; None off CUDA.")
    device_name: str | None = Field(None, description="The CUDA device name (torch.cuda.get_device_name), which names an engine's tuned kernel files; None off CUDA.")
    os_reserved_gib: float = Field(0.0, ge=0, description="Memory the OS keeps on a unified machine (GiB).")
    bandwidth_gbs: float = Field(gt=0, le=1e7, description="Memory bandwidth, GB/s.")
    tflops: dict[str, float] = Field(default_factory=dict, description="Dense peak TFLOP/s by dtype (bf16, fp8, fp4).")
    interconnect: str | None = None
    interconnect_gbs: float | None = Field(None, gt=0, description="Per-direction bandwidth between tensor-parallel ranks, GB/s (servelab predict's all-reduce).")
    allreduce_latency_us: float = Field(20.0, ge=0, description="Fixed time of one small all-reduce between the ranks, µs (an estimate, not measured).")
    power_capped_clock: float = Field(
        1.0, gt=0, le=1, description="The SM clock under the board's power limit while dense BF16 prompts prefill step after step, a fraction of "
        "its maximum (servelab predict's bursts); 1 where not measured.")  # fmt: skip
    source: str | None = None

    @property
    def generation(self) -> str:
        """What a calibration fitted on this hardware is tied to (``Calibration.gpu``): its CUDA compute capability, else (off CUDA)
        the hardware's name."""
        return self.compute_capability or self.name

    def safe_utilization(self, os_reserved_gib: float | None = None) -> float:
        """The largest memory share (0.01 steps) that leaves the OS its ``os_reserved_gib`` (the
        profile's when None) on a unified-memory machine; 1.0 on a discrete GPU."""
        reserved = self.os_reserved_gib if os_reserved_gib is None else os_reserved_gib
        return math.floor(100 * (self.memory_gib - reserved) / self.memory_gib) / 100 if self.unified else 1.0

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a compute dtype (falls back to bf16; None when unpublished)."""
        tf = self.tflops.get(dtype) or self.tflops.get("bf16")
        return tf * 1e12 if tf else None
