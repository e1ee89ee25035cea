"""vLLM 0.25's MoE and MLA kernels as ``servelab predict`` prices them (the engine interface:
``Engine.moe_kernel``, ``Engine.mla_heads``; ``servelab.engines.vllm`` delegates here).

- Fused MoE (vllm/model_executor/layers/fused_moe/fused_moe.py): the Triton kernel looks up a tuned
  configuration file ``E=<routed experts>,N=<expert width per rank>,device_name=<CUDA name>[,dtype=…]
  [,block_shape=[…]].json`` (``get_config_file_name``; an H200-family name is read as ``NVIDIA_H200``)
  in its configs folder, and without one runs ``get_default_config`` and warns "Using default MoE
  config. Performance might be sub-optimal!" (``get_moe_configs``). Whether the file ships is known
  before launch: servelab/data/vllm-0.25-fused-moe-configs.txt lists the folder of vLLM 0.25.0. The
  dtype selector: none for BF16/FP16, ``fp8_w8a8`` for FP8 (per tensor), with ``block_shape=[128,128]``
  for block FP8 (DeepSeek-V3's checkpoints). MXFP4, NVFP4 and the int4 formats run other MoE kernels
  (triton_kernels / CUTLASS / Marlin) that take no such file: no case to name.
- The rate the Triton kernel's expert matrix products reach (``MOE_RATE``), by format, against cuBLAS BF16 GEMMs
  of the same FLOPs at 8,192 tokens (a burst's chunk, where every shape measured is compute-bound), on an H200
  (``python3 validation/moe_kernel_gpu.py --prefill``; validation/moe-kernel/h200-prefill.json): BF16 the median over
  nine expert shapes, tuned and default configs alike (0.53–0.65 on the seven fine-grained ones, 0.71–0.79 on
  Mixtral's 14,336-wide experts; vLLM's tuned files gained 7 and 12 % where it ships one), block FP8 Kimi-K2's
  experts'. Applied on Hopper (sm_90) only, where it was measured; elsewhere 1. The calibration's η_c, fitted on
  dense models' cuBLAS GEMMs, multiplies it.
- MLA decode: vLLM 0.25 on Hopper ranks FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA
  (vllm/platforms/cuda.py ``_get_backend_priorities``); FlashMLA's sm90 decode kernel tiles 64 query
  heads per block (vllm/v1/attention/backends/mla/flashmla.py, FlashMLA's ``get_mla_metadata`` with
  ``num_heads_q``), so a model of fewer heads per GPU (DeepSeek-V2-Lite's 16) computes 64.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from servelab.engines.base import MoeKernel
from servelab.values.specs import Hardware, ModelSpec

CONFIGS_FILE = "vllm-0.25-fused-moe-configs.txt"
DTYPE_SELECTOR = {"bf16": "", "fp16": "", "fp8": ",dtype=fp8_w8a8", "fp8-block": ",dtype=fp8_w8a8,block_shape=[128,128]"}
MLA_HEAD_TILE = 64  # FlashMLA's sm90 decode kernel: query heads per tile (module docstring)
MOE_RATE = {"bf16": 0.57, "fp16": 0.57, "fp8-block": 0.68}  # format → the experts' rate against cuBLAS BF16 at 8,192 tokens (module docstring); FP8 per tensor 1: its MoE layer times were fitted with it (data/calibration.yaml)


@cache
def shipped_configs() -> frozenset[str]:
    """The tuned fused-MoE configuration files vLLM 0.25.0 ships (servelab/data, one name a line)."""
    text = files("servelab.data").joinpath(CONFIGS_FILE).read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def device_file_name(hw: Hardware) -> str | None:
    """``hw``'s CUDA device name as vLLM writes it in file names (spaces as ``_``; any H200 as
    ``NVIDIA_H200``), None for a profile without one."""
    if not hw.device_name:
        return None
    name = hw.device_name.replace(" ", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def moe_kernel(spec: ModelSpec, fmt: str, hw: Hardware, tp: int = 1) -> MoeKernel | None:
    """The fused-MoE configuration case of ``spec``'s routed experts in format ``fmt`` on ``hw`` at
    ``tp`` ranks, with its experts' rate (``MOE_RATE`` on Hopper, else 1; module docstring), or None (no
    experts, another MoE kernel, or a GPU without a CUDA name in its profile)."""
    device = device_file_name(hw)
    if not spec.num_experts or fmt not in DTYPE_SELECTOR or device is None:
        return None
    name = f"E={spec.num_experts},N={spec.moe_intermediate_size // tp},device_name={device}{DTYPE_SELECTOR[fmt]}.json"
    tuned = name in shipped_configs()
    return MoeKernel(name, tuned, MOE_RATE.get(fmt, 1.0) if hw.compute_capability == "9.0" else 1.0)


def mla_heads(spec: ModelSpec, hw: Hardware, tp: int = 1) -> int:
    """Query heads (all ``tp`` ranks together) the MLA decode kernel computes on ``hw`` (module
    docstring): on Hopper (sm_90) at least one 64-head tile per rank; elsewhere the model's heads."""
    return max(spec.num_heads, MLA_HEAD_TILE * tp) if hw.compute_capability == "9.0" else spec.num_heads
