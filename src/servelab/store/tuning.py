"""What ``servelab tune`` leaves on disk: ``tune.json`` at the top of its ``--output`` (every grid
point priced, each launch, the winner), and ``launch.json`` in each launched point's directory (how
that launch ended), from which a rerun with the same ``--output`` resumes.

Capacities are closed-loop streams within the SLO (docs/metrics.md, "capacity").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

PointStatus = Literal["priced", "not priced", "unfit", "launched", "failed", "pruned"]


class TunePoint(BaseModel):
    """One grid point: its values, the settings predict priced, whether it fits (or why not), its
    predicted capacity with band and bottleneck (as the last calibration prices it), and what was
    measured where it was launched."""

    label: str
    values: dict[str, str]
    settings: dict[str, str | None] = Field(description="The settings predict prices, as the point's command gives them (None: the default).")
    status: PointStatus
    why: str | None = Field(None, description="Why it does not fit, why it failed to launch, or why it was pruned.")
    predicted: float | None = Field(None, description="Predicted capacity within the SLO, streams (the latest calibration's).")
    band: tuple[float, float] | None = Field(None, description="The predicted capacity's band, streams.")
    bottleneck: str | None = None
    predicted_at_launch: float | None = Field(None, description="The prediction that chose it, streams.")
    measured: float | None = Field(None, description="Measured capacity (servelab capacity), streams; None: not launched, or no load met the SLO.")
    capped: bool = Field(False, description="The measured capacity is a lower bound: no probe missed before the search's bound.")


class TuneLaunch(BaseModel):
    """``launch.json`` in a launched point's directory, and one entry of the ledger."""

    iteration: int = Field(description="1-based, counting failed launches too.")
    label: str
    directory: str
    status: Literal["complete", "failed"]
    error: str | None = Field(None, description="A failed launch: the server's own reason (its last log lines).")
    capacity: float | None = None
    capped: bool = False
    predicted: float | None = None
    change: str | None = Field(None, description="What differs from the best point measured before it.")
    delta_pct: float | None = Field(None, description="Capacity Δ% against the best measured before it.")
    binding: str | None = Field(None, description="The objective the smallest missing probe missed, with its measured value.")
    start: float | None = Field(None, description="The load capacity's search started at, streams.")
    wall_s: float = 0.0


class TuneDocument(BaseModel):
    """``tune.json``: the whole tune (``servelab tune --json`` prints the same)."""

    recipe: str
    sha256: str
    slo: dict[str, float]
    input_tokens: int
    output_tokens: int
    grid: list[str] = Field(description="Every grid point's label, in grid order.")
    status: Literal["running", "complete", "partial"]
    priced: bool = Field(description="Whether predict priced the grid (a model and hardware profile known).")
    assumptions: str | None = None
    calibration: dict | None = Field(None, description="The calibration the points are priced with, after the last launch.")
    factors: dict[str, float] = Field(default_factory=dict, description="Each objective's measured percentile ÷ the calibrated prediction at the same probe (median over the probes): its target is divided by it when pricing.")
    band: float = Field(description="The band's half width: each predicted time × (1 ± band).")
    effects: dict[str, float] = Field(default_factory=dict, description="Each grid value's share (KEY=VALUE → log capacity) of what the launches measured beyond their calibrated predictions; a candidate's prediction and band are × e^(its values' sum) (servelab.plan.pricing.value_effects).")
    launches_budget: int
    points: list[TunePoint]
    launches: list[TuneLaunch] = Field(default_factory=list)
    winner: str | None = None
    why: list[str] = Field(default_factory=list, description="Why the winner wins: the binding objective and what each changed flag moved.")
    best_recipe: str | None = Field(None, description="The winning recipe's file, relative to the tune's directory.")
    wall_s: float = Field(0.0, description="The tune's wall time, s, summed over the runs that resumed it.")
