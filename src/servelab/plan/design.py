"""``servelab calibrate --url``'s design: the few steady-state levels that pin each of predict's
calibrated parameters on one server in about two minutes (docs/metrics.md, "calibrate's design").

Three closed-loop levels, steady state (stagger), every prompt unique (cold), of the user's lengths:

- **one stream**: the engine idle between one sequence's steps, the decode step memory-bound on a
  batch of one: its time is the weights ÷ (bandwidth · η_bw) plus the layers' t_ℓ; its TTFT is one
  prompt's prefill (η_c), which the fit does not use but the error reports;
- **the high level**, ``HIGH`` streams or the most the server runs at once (max_num_seqs, its KV
  cache: ``servelab.plan.limits.limits_for``), whichever is fewer: prompts ride most steps and the
  steps that carry them exceed the largest CUDA-graph size, so the compute efficiency η_c and the
  step without graphs (t_eager) weigh there;
- **a middle level**, a quarter of the high one (at least 2): the decode batch reads the KV cache of
  many sequences beside the weights, separating η_bw from t_ℓ, which one stream alone cannot.

Each parameter's interval (``Calibration.uncertainty``) says whether the design pinned it on this server.
"""

from __future__ import annotations

from servelab.plan.model_spec import load_model
from servelab.plan.checkpoint import weight_format
from servelab.plan.hardware import load_hardware
from servelab.plan.limits import limits_for

HIGH = 64  # streams: the MoE steady state's level of issue 53's truth rules, within most servers' max_num_seqs


def design_levels(model: str, quant: str | None, hardware: str, tp: int, input_tokens: int, output_tokens: int, most: int | None = None) -> list[int]:
    """The design's levels (module docstring), ascending and distinct, for ``model`` (catalog name,
    config.json or Hub id) in ``quant`` (default its checkpoint's format) on ``hardware`` at ``tp``
    GPUs, with requests of ``input_tokens`` + ``output_tokens`` tokens; ``most``: the server's own
    cap on sequences at once where it is below the engine's default (``--max-streams``).

    Raises:
        ServelabError: the model cannot be read, or does not fit.
    """
    spec = load_model(model)
    fmt, hw = weight_format(quant, spec), load_hardware(hardware)
    limits = limits_for(spec, fmt, hw, tp=tp, input_tokens=input_tokens, output_tokens=output_tokens)
    high = max(1, min(HIGH, limits.max_num_seqs, int(limits.kv_requests), most or HIGH))
    return sorted({1, max(2, high // 4) if high >= 4 else high, high})
