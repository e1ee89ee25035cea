"""predict's honest band (issue 53): a model's family class, and the interval its predictions carry,
from the held-out error of that class (docs/metrics.md, "predict's band").

The classes: ``dense``; ``moe`` (routed experts with grouped-query attention: Mixtral, Qwen2/Qwen3
MoE); ``mla`` (multi-head latent attention, the DeepSeek-V3 architecture: fine-grained routed experts
and a shared one); ``hybrid`` (Gated DeltaNet or Mamba layers beside attention). The numbers are
``servelab/data/bands.yaml``: for dense, MoE and MLA, validation/bands.py over every held-out point of the class
(≥ 90 % of them predicted within ± the band of the truth, each model held out in turn); a class without held-out evidence across models
gets a wide band that says so. A *host-bound* point (``servelab.plan.predict.HOST_SHARE``: the host's time per step at least
half its decode step's GPU time, where the small models' steady state runs in waves) carries the wider of its class's band
and the host's (:func:`point_band`), from the held-out error of such points whatever their class (validation/bands.py).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import yaml
from pydantic import BaseModel, Field

from servelab.plan.cohorts import HOST_SHARE
from servelab.values.specs import ModelSpec


class Band(BaseModel):
    """One family class's interval: for ≥ 90 % of the class's held-out points, held out by model (pooled: validation/bands.py), the
    predicted tok/s was within ± ``tok_s`` of the measured, the TTFT within ± ``ttft``; so the truth lies within
    [predicted ÷ (1 + b), predicted ÷ (1 − b)], and a step time (the tok/s's inverse) within × (1 ± ``tok_s``)."""

    family_class: str
    tok_s: float = Field(gt=0, lt=1, description="Relative half-width for tok/s, TPOT and step times (fraction).")
    ttft: float = Field(gt=0, lt=1, description="Relative half-width for TTFT (fraction).")
    points: int = Field(ge=0, description="Held-out points behind it (0: no evidence, a wide band).")
    evidence: str


def family_class(spec: ModelSpec) -> str:
    """``hybrid``, ``mla``, ``moe`` or ``dense`` (module docstring), in that order of precedence."""
    if spec.count("linear") or spec.count("mamba"):
        return "hybrid"
    if spec.count("mla"):
        return "mla"
    return "moe" if spec.moe_layers else "dense"


@cache
def _bands() -> dict[str, dict]:
    return yaml.safe_load(files("servelab.data").joinpath("bands.yaml").read_text(encoding="utf-8"))


def point_band(band: Band, host_share: float) -> Band:
    """The band one predicted point carries: ``band`` (its model's class, :func:`band_for`), widened to the host's
    (servelab/data/bands.yaml ``host``) where ``host_share`` (``Point.host_share``: the host's time per step ÷ the decode
    step's GPU time) is at least ``HOST_SHARE``."""
    host = _bands()["host"]
    if host_share < HOST_SHARE or (band.tok_s >= host["tok_s"] and band.ttft >= host["ttft"]):
        return band
    return Band(family_class=f"{band.family_class}, host-bound", tok_s=max(band.tok_s, host["tok_s"]), ttft=max(band.ttft, host["ttft"]),
                points=host["points"], evidence=host["evidence"])  # fmt: skip


def band_for(spec: ModelSpec, fmt: str) -> Band:
    """The band of ``spec``'s family class in weight format ``fmt`` (a servelab format name;
    servelab/data/bands.yaml): the class's own where ``fmt`` is among its held-out formats, else the
    wide ``unseen`` band, saying so."""
    name, data = family_class(spec), _bands()
    entry = data[name]
    if fmt in entry["formats"]:
        return Band(family_class=name, tok_s=entry["tok_s"], ttft=entry["ttft"], points=entry["points"], evidence=entry["evidence"])
    wide = data["unseen"]
    evidence = entry["evidence"] if not entry["formats"] else f"no held-out evidence for {fmt} weights ({name} held out in {', '.join(entry['formats'])} only): wide"
    return Band(family_class=name, tok_s=wide["tok_s"], ttft=wide["ttft"], points=0, evidence=evidence)
