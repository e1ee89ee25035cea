"""Weight formats: real bits per weight (scales included) and which tensors they cover.

Bits per weight, from ../shared/reference/models.yaml ``quantization_formats`` and models-notes.md:

| format | bpw | layout (source) |
|---|---|---|
| bf16 / fp16 | 16 | |
| fp8 (per-tensor) | 8.0 | e4m3 + one fp32 scale per tensor (ModelOpt FP8) |
| fp8-block | 8.002 | e4m3 + fp32 scale per 128×128 block (Qwen3-FP8, DeepSeek-V3 README_WEIGHTS) |
| mxfp8 | 8.25 | e4m3 + E8M0 per 32 (OCP MX) |
| nvfp4 | 4.5 | e2m1 + FP8 scale per 16 (+ fp32 per tensor) (NVIDIA / Intel NC NVFP4 table) |
| mxfp4 | 4.25 | e2m1 + E8M0 per 32 (OCP MX; gpt-oss card) |
| mxfp4-all | 4.25 | the same on the routed experts, attention (qkv, o) and the LM head: eugr/spark-vllm-docker's ``--exp-mxfp4`` build with ``--mxfp4-layers moe,qkv,o,lm_head`` (its canonical gpt-oss recipe; anchors-serving-ops.md), which quantizes the published checkpoint's BF16 attention and LM head at load |
| gptq-int4 / awq-int4, group g | 4 + 16/g + 4/g | int4 + fp16 scale + packed int4 zero per group (AutoGPTQ layout); g = 128 → 4.156 |
| gguf-q8_0 | 8.5 | 34 B / 32 (llama.cpp ``ggml-common.h``) |
| gguf-q4_k_m | 4.89 | Q4_K (4.5) mixed with Q6_K on attn_v, half of ffn_down, output: ~4.8–4.9 over whole files (Llama-3.1-8B 4.92 GB / 8.03 B params = 4.90; Qwen3-32B 4.83; gemma-3-27b 4.89) |

What stays BF16 (conventions of the published checkpoints): embeddings, lm_head, norms and MoE
routers for every non-GGUF format; ``mxfp4`` quantizes only the routed experts (gpt-oss), and so
does ``nvfp4-experts`` (nvidia's Qwen3.5 NVFP4 exports keep attention, Gated DeltaNet and shared
experts in BF16: models-notes.md), and ``mxfp4-all`` also attention and the LM head (a MoE's MLP and shared experts,
a hybrid's recurrent layers stay BF16: the fork's ``moe,qkv,o,lm_head``); GGUF files quantize every tensor (embeddings and output
included), so the whole-file average is used.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from servelab.errors import ServelabError
from servelab.values.specs import ModelSpec

LINEAR_KINDS = ("attn", "recurrent", "mlp", "experts", "shared")


@dataclass(frozen=True)
class QuantFormat:
    """A weight format: bits per weight of the quantized tensors, and which parameter kinds it quantizes."""

    name: str
    bits: float
    quantized: tuple[str, ...]
    source: str
    kept: dict[str, float] = field(default_factory=dict)  # share of a quantized kind a checkpoint leaves in BF16

    def bits_for(self, kind: str) -> float:
        """Bits per weight of one parameter kind (see ``ModelSpec.params``); 16 when left in BF16,
        blended by ``kept`` where a checkpoint excludes part of a kind (``servelab.plan.checkpoint``)."""
        if kind not in self.quantized:
            return 16.0
        return self.bits + (16.0 - self.bits) * self.kept.get(kind, 0.0)


def _gptq(group: int) -> float:
    return 4 + 16 / group + 4 / group


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("bf16", 16.0, (), "2 bytes per weight"),
        QuantFormat("fp16", 16.0, (), "2 bytes per weight"),
        QuantFormat("fp8", 8.0, LINEAR_KINDS, "e4m3 + fp32 per-tensor scale (ModelOpt FP8)"),
        QuantFormat("fp8-block", 8.0 + 32 / 16384, LINEAR_KINDS, "e4m3 + fp32 per 128x128 block (DeepSeek-V3 README_WEIGHTS)"),
        QuantFormat("mxfp8", 8.25, LINEAR_KINDS, "OCP MX: e4m3 + E8M0 per 32"),
        QuantFormat("nvfp4", 4.5, LINEAR_KINDS, "e2m1 + FP8 E4M3 scale per 16 (+ fp32 per tensor)"),
        QuantFormat("nvfp4-experts", 4.5, ("experts",), "NVFP4 on routed experts only, attention/GDN/shared experts BF16 (nvidia Qwen3.5 NVFP4 exports)"),
        QuantFormat("mxfp4", 4.25, ("experts",), "OCP MX: e2m1 + E8M0 per 32; routed experts only (gpt-oss)"),
        QuantFormat("mxfp4-all", 4.25, ("experts", "attn", "lm_head"),
                    "OCP MX: e2m1 + E8M0 per 32 on the routed experts, attention and LM head (--mxfp4-layers moe,qkv,o,lm_head of the --exp-mxfp4 vLLM build)"),
        QuantFormat("gptq-int4", _gptq(128), LINEAR_KINDS, "int4 + fp16 scale + int4 zero per group of 128 (AutoGPTQ)"),
        QuantFormat("gptq-int4-g32", _gptq(32), LINEAR_KINDS, "int4 + fp16 scale + int4 zero per group of 32 (AutoGPTQ)"),
        QuantFormat("awq-int4", _gptq(128), LINEAR_KINDS, "int4 + fp16 scale + int4 zero per group of 128 (AutoAWQ)"),
        QuantFormat("gguf-q8_0", 8.5, LINEAR_KINDS + ("embed", "lm_head"), "34 B per 32 weights (llama.cpp block_q8_0)"),
        QuantFormat("gguf-q4_k_m", 4.89, LINEAR_KINDS + ("embed", "lm_head"), "whole-file average of published Q4_K_M GGUFs"),
    )
}
KV_DTYPES = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def get_format(name: str, spec: ModelSpec | None = None) -> QuantFormat:
    """A format by name (case-insensitive). ``mxfp4`` and ``mxfp4-all`` on a dense model quantize all its linears (and the latter its LM head).

    Raises:
        ServelabError: unknown format, with the closest names.
    """
    key = name.lower().replace("_", "-") if not name.lower().startswith("gguf") else name.lower()
    fmt = FORMATS.get(key) or FORMATS.get(name.lower())
    if fmt is None:
        close = difflib.get_close_matches(name.lower(), FORMATS, n=3, cutoff=0.3)
        raise ServelabError(f"--quant {name!r} is not a known format; closest: {', '.join(close) or ', '.join(FORMATS)}")
    if fmt.name in ("mxfp4", "mxfp4-all") and spec is not None and not spec.params.get("experts"):
        return QuantFormat(fmt.name, fmt.bits, LINEAR_KINDS + (("lm_head",) if "lm_head" in fmt.quantized else ()), fmt.source + "; all linears on a dense model")
    return fmt


def kv_dtype_bytes(name: str) -> float:
    """Bytes per KV-cache element for vLLM's ``--kv-cache-dtype`` values (``auto`` = the model's BF16).

    Raises:
        ServelabError: unknown dtype.
    """
    if name.lower() not in KV_DTYPES:
        raise ServelabError(f"--kv-dtype {name!r}: use one of {', '.join(KV_DTYPES)}")
    return KV_DTYPES[name.lower()]


def weight_bytes(spec: ModelSpec, fmt: QuantFormat, kinds: tuple[str, ...] | None = None) -> float:
    """Bytes of the weights of ``kinds`` (default all, MTP excluded) in format ``fmt``."""
    return sum(n * fmt.bits_for(k) / 8 for k, n in spec.params.items() if k != "mtp" and (kinds is None or k in kinds))
