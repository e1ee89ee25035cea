"""The calibrations of ``servelab predict`` (``servelab.plan.predict``): efficiencies and times per
layer and step of one engine × hardware × format family, fitted on real runs (``servelab.plan.fit``),
the shipped ones (``servelab/data/calibration.yaml``, with their measured errors) and which one a
model gets.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from servelab.errors import ServelabError, first_problem
from servelab.plan.quant import QuantFormat
from servelab.values.specs import ModelSpec
from servelab.guards.yamlfile import read_yaml

DEFAULT_CALIBRATION = "vllm-0.25-h100-bf16"  # dense and MoE models (data/calibration.yaml)
HYBRID_CALIBRATION = "vllm-0.25-h100-hybrid-fp8"  # hybrid (Mamba-2 / Gated DeltaNet) models in FP8
SHIPPED_GPU = "9.0"  # the compute capability the two above were measured on (H100 SXM; held out on H200s): Hopper, any sm_90 profile
BW_RANGE = (0.2, 1.0)  # the grid of η_bw in fit (steps of 0.01); the datasheet bandwidth is the ceiling
COMPUTE_RANGE = (0.1, 1.2)  # … of η_c
HOST_SCALE_RANGE = (0.25, 4.0)  # Calibration.host_scale's range, the grid of its fit (fit.HOST_SCALES)
MIXED_FLOOR_RANGE = (0.0, 1.4)  # … mixed_floor's (fit.MIXED_FLOORS)
MIXED_FLOOR = 0.0  # Calibration.mixed_floor in the shipped calibrations: none (0.7 put 183 of the fourteen kept-back sets' 204 steady-state levels beyond one stream within 20 % on tok/s held out, 172 at 0, but moves the MLA layer times fitted with the floor off and the cold tables: validation/mixed_steps.py, validation/RESULTS-predict.md)


class Calibration(BaseModel):
    """Efficiencies of one engine × hardware × format family, with where they came from."""

    name: str
    bw_efficiency: float = Field(gt=0, le=1.5, description="Achieved share of the datasheet memory bandwidth in decode.")
    compute_efficiency: float = Field(gt=0, le=1.5, description="Achieved share of the datasheet dense peak in prefill.")
    layer_overhead_us: float = Field(
        ge=0, description="Fixed time per layer per step (a layer's kernels beyond its matrix products and their gaps, with the step's scheduling and sampling spread over its layers), µs; a step pays it for every layer it runs."
    )
    moe_layer_us: float = Field(
        0.0, ge=0, description="Time a MoE layer adds per step beyond t_ℓ, with CUDA graphs (its router and expert-dispatch kernels: top-k, moe_align_block_size, the second grouped GEMM, the weighted sum), µs; 0 where no MoE run was fitted."
    )
    moe_eager_layer_ms: float = Field(
        0.0, ge=0, description="Time a MoE layer adds to a step without CUDA graphs (its kernels launched one by one from Python), ms; 0 where no MoE run was fitted."
    )
    eager_step_ms: float = Field(
        0.0, ge=0, description="Time a step adds when it runs without CUDA graphs (more tokens than the largest capture size: vLLM's piecewise-compiled or eager forward), ms; 0 in calibrations fitted before it existed."
    )
    mla_layer_us: float = Field(
        0.0, ge=0, description="Time an MLA attention layer adds per step beyond t_ℓ (its latent projections, norms and absorbed up-projections: ~2 × the kernels of a GQA layer), µs; 0 where no MLA run was fitted."
    )
    mla_eager_layer_ms: float = Field(
        0.0, ge=0, description="Time an MLA attention layer adds to a step without CUDA graphs (its kernels launched one by one, the prefill's non-absorbed path), ms; 0 where no MLA run was fitted."
    )
    untuned_moe_layer_us: float = Field(
        0.0, ge=0, description="Time a MoE layer adds per step when the engine ships no tuned fused-MoE config for its experts on this GPU (Engine.moe_kernel: its default kernel config), µs; 0 where no such run was fitted."
    )
    draft_overhead_ms: float = Field(
        0.0, ge=0, description="Time a speculative step adds for drafting (n-gram: CPU matching and the host sync it needs), ms; 0 when no speculative run was fitted."
    )
    host_scale: float = Field(
        1.0, ge=HOST_SCALE_RANGE[0], le=HOST_SCALE_RANGE[1], description="This machine's host time over the machines measured (Engine.eager_host_s, step_host_s): scales the host's floor, time per step and queue; servelab calibrate fits it where the host binds a level (tune's refit too, about its starting calibration's), 1 in the shipped calibrations."
    )
    mixed_floor: float = Field(
        MIXED_FLOOR, ge=MIXED_FLOOR_RANGE[0], le=MIXED_FLOOR_RANGE[1], description="The share of the host's floor for a step without CUDA graphs (Engine.eager_host_s: its layers', MoE and MLA layers' launches) that a steady-state step with prompts beyond one stream takes at least, whatever the host's share (servelab.plan.predict; docs/metrics.md, \"host's floor\"). MIXED_FLOOR in the shipped calibrations; servelab calibrate fits it on the server's levels."
    )
    mixed_share: float | None = Field(
        None, gt=0, le=1, description="This server's s in the steady state's cohorts m₀ = k ÷ min(k, s) prompts a step with prompts (servelab.plan.cohorts.cohorts, in place of MIXED_SHARE 0.25: once k ≥ s prompts arrive a decode step, a share s of the steps carry them) where the host does not bind; not used by bursts or speculative levels. servelab calibrate measures it from its levels' prompts a step (tune's refit from its probes', else keeps its starting calibration's); None (the shipped calibrations): MIXED_SHARE."
    )
    gpu: str | None = Field(
        None, description="The generation it was fitted on (Hardware.generation: the CUDA compute capability, off CUDA the hardware's name; servelab calibrate's --hardware, tune's refit the GPU tuned): a fit with it as the prior holds its efficiencies narrowly on that generation (servelab.plan.fit.prior_widths). None: SHIPPED_GPU, the shipped calibrations' (vllm-dgx-spark's efficiencies, from published figures and no run of ours, are held wide on a Spark as on any GPU but Hopper)."
    )
    source: str = Field(description="The runs it was fitted on.")
    error: str = Field("", description="Measured error (leave-one-run-out), in words.")
    uncertainty: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="A fit with a prior (servelab calibrate): each fitted parameter's interval, (low, high) in its own unit, "
        "where the fit's objective rises by 1 (one standard deviation; servelab.plan.fit).")  # fmt: skip


def calibrations() -> dict[str, Calibration]:
    """The shipped calibrations (``servelab/data/calibration.yaml``) by name."""
    data = yaml.safe_load(files("servelab.data").joinpath("calibration.yaml").read_text(encoding="utf-8"))
    return {name: Calibration(name=name, **value) for name, value in data.items()}


def calibration(name: str | None, spec: ModelSpec | None = None, fmt: QuantFormat | None = None) -> Calibration:
    """A shipped calibration by name, or the first of a YAML file (``servelab calibrate --out``);
    without a name, the shipped one that was fitted on such models: the hybrid one for a model with
    recurrent layers in FP8, the dense one otherwise, MoE models included (its MoE layer times were
    fitted on Qwen3-30B-A3B; held out on Mixtral-8x7B and Qwen2-57B-A14B: validation/RESULTS-predict.md).

    Raises:
        ServelabError: neither a known name (the known ones listed) nor a valid calibration file.
    """
    if name is None:
        fp8 = spec is not None and fmt is not None and fmt.name == "fp8"
        name = HYBRID_CALIBRATION if fp8 and spec.state_bytes_per_seq() else DEFAULT_CALIBRATION
    known = calibrations()
    if name in known:
        return known[name]
    path = Path(name)
    if path.is_file():
        data = read_yaml(path, "--calibration")
        try:
            (key, value), *_ = data.items()
            if "step_overhead_ms" in value and "layer_overhead_us" not in value:
                raise ServelabError(f"--calibration {name}: written before servelab timed a step per layer (it has step_overhead_ms, not "
                                    "layer_overhead_us); run servelab calibrate --out on its runs again")  # fmt: skip
            return Calibration(name=key, **value)
        except ValidationError as exc:
            raise ServelabError(f"--calibration {name}: not a calibration file ({first_problem(exc, 'the file')}); write one with servelab calibrate --out") from None
        except (AttributeError, ValueError, TypeError) as exc:
            raise ServelabError(f"--calibration {name}: not a calibration file ({exc}); write one with servelab calibrate --out") from None
    raise ServelabError(f"--calibration {name!r} is not known; use one of {', '.join(known)}, or a file from servelab calibrate --out")
