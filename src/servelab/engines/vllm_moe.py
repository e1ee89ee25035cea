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
- Without a tuned file, ``get_default_config`` picks the tile (BLOCK_SIZE_M × BLOCK_SIZE_N) by the step's tokens M: BF16/FP16 and
  FP8 per tensor M rows 16 up to 32 tokens, 32 up to 96, 64 up to 512, then 128, N columns 64 up to 64 tokens, then 128, and
  GROUP_SIZE_M 1 unless M ÷ E > 128 (then 16); block FP8 16 × 64 up to 8 tokens, 16 × 128 up to 64, then 64 × 128, GROUP_SIZE_M 32
  above 16 tokens (``GENERAL_TILES``, ``DEFAULT_TILES``). An expert's tokens take ceil(n ÷ M) row tiles; with GROUP_SIZE_M 1 the grid
  runs every column tile of one row tile before the next, so a further row tile reads the up-projection (gate and up: N = 2 × the
  expert width, two of a gated expert's three matrices; one of two without a gate) again. ``reread_tiles`` prices that read from HBM
  where the column tiles number more than ``HOPPER_CTAS``, 264 (132 SMs × 2), else none (from L2, or grouped rows): a boundary
  between the two cases measured, not derived from the GPU's occupancy. FlexOlmo's 7 experts of 11,008 (344 column tiles of 64)
  at 32 and 64 streams, 23 and 46 tokens an expert, took ~8–10 ms more a step than at 16 (validation/kept-back12-h100, its decode
  step 14 → 22 ms); Mixtral-8x22B's 16,384-wide experts (256 tiles of 128) in its steps with a prompt, ~130 tokens an expert,
  showed no such cost (kept-back10-h100: priced so, its steady state went 12–15 % slow). Hopper only (an H100 PCIe's 114 SMs
  taken as the SXM's 132: not measured); a tuned file's tiles are not carried (its experts read once); a tier whose every M
  groups its rows (M ÷ E > 128 from its lowest M) reads once, one that groups only part of its range is priced ungrouped.
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
GENERAL_TILES = ((32, 16, 64), (64, 32, 64), (96, 32, 128), (512, 64, 128), (1 << 30, 128, 128))  # (most tokens, BLOCK_SIZE_M, BLOCK_SIZE_N): get_default_config's BF16/FP16/FP8 per tensor
DEFAULT_TILES = {"fp8-block": ((8, 16, 64), (1 << 30, 0, 128))}  # … block FP8: up to 16 tokens no expert has a second 16-row tile, above them GROUP_SIZE_M 32 (0: none read again)
GROUPED_TOKENS_PER_EXPERT = 128  # get_default_config groups 16 row tiles (L2 reuse) where M ÷ E exceeds this
HOPPER_CTAS = 264  # column tiles above which a further row tile reads from HBM (module docstring): the boundary between two measured cases
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
    ``tp`` ranks, with its experts' rate (``MOE_RATE`` on Hopper, else 1) and, untuned, its default tiles (module
    docstring), or None (no experts, another MoE kernel, or a GPU without a CUDA name in its profile)."""
    device = device_file_name(hw)
    if not spec.num_experts or fmt not in DTYPE_SELECTOR or device is None:
        return None
    name = f"E={spec.num_experts},N={spec.moe_intermediate_size // tp},device_name={device}{DTYPE_SELECTOR[fmt]}.json"
    tuned, hopper = name in shipped_configs(), hw.compute_capability == "9.0"
    return MoeKernel(name, tuned, MOE_RATE.get(fmt, 1.0) if hopper else 1.0, () if tuned or not hopper else reread_tiles(spec, fmt, tp))


def reread_tiles(spec: ModelSpec, fmt: str, tp: int = 1) -> tuple[tuple[int, int, float], ...]:
    """``MoeKernel.tiles`` of the default configuration for ``spec``'s experts in ``fmt`` at ``tp`` ranks on Hopper: (most tokens,
    BLOCK_SIZE_M where a further row tile reads the up-projection again from HBM else 0, its share of the expert) a tier (module
    docstring); the share from the expert's matrices (``ModelSpec.expert_matrices``: 3 gated, 2 without a gate)."""
    matrices = spec.expert_matrices
    width, share, lowest, out = (matrices - 1) * spec.moe_intermediate_size // tp, (matrices - 1) / matrices, 1, []
    for most, m, n in DEFAULT_TILES.get(fmt, GENERAL_TILES):
        grouped = lowest // spec.num_experts > GROUPED_TOKENS_PER_EXPERT
        out.append((most, m if m and not grouped and width / n > HOPPER_CTAS else 0, share))
        lowest = most + 1
    return tuple(out)


def mla_heads(spec: ModelSpec, hw: Hardware, tp: int = 1) -> int:
    """Query heads (all ``tp`` ranks together) the MLA decode kernel computes on ``hw`` (module
    docstring): on Hopper (sm_90) at least one 64-head tile per rank; elsewhere the model's heads."""
    return max(spec.num_heads, MLA_HEAD_TILE * tp) if hw.compute_capability == "9.0" else spec.num_heads
