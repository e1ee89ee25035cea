"""Hardware profiles: memory, whether it is unified with the CPU, bandwidth, dense peak FLOP/s per dtype.

Bundled profiles live in ``servelab/data/hardware.yaml`` with their sources; a user profile is a
YAML file with the same fields (``name``, ``memory_gib``, ``bandwidth_gbs``, ``tflops``, and
optionally ``unified``, ``os_reserved_gib``, ``interconnect``, ``source``).
"""

from __future__ import annotations

import difflib
import math
from importlib.resources import files
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from servelab.errors import ServelabError
from servelab.yamlfile import read_yaml

GIB = 2**30


class Hardware(BaseModel):
    """One accelerator (or unified-memory machine)."""

    name: str
    memory_gib: float = Field(gt=0, description="Device memory as the runtime sees it, GiB.")
    unified: bool = False
    os_reserved_gib: float = Field(0.0, ge=0, description="Memory the OS keeps on a unified machine (GiB).")
    bandwidth_gbs: float = Field(gt=0, description="Memory bandwidth, GB/s.")
    tflops: dict[str, float] = Field(default_factory=dict, description="Dense peak TFLOP/s by dtype (bf16, fp8, fp4).")
    interconnect: str | None = None
    interconnect_gbs: float | None = Field(None, gt=0, description="Per-direction bandwidth between tensor-parallel ranks, GB/s (servelab predict's all-reduce).")
    allreduce_latency_us: float = Field(20.0, ge=0, description="Fixed time of one small all-reduce between the ranks, µs (an estimate, not measured).")
    source: str | None = None

    def safe_utilization(self, os_reserved_gib: float | None = None) -> float:
        """The largest memory share (0.01 steps) that leaves the OS its ``os_reserved_gib`` (the
        profile's when None) on a unified-memory machine; 1.0 on a discrete GPU."""
        reserved = self.os_reserved_gib if os_reserved_gib is None else os_reserved_gib
        return math.floor(100 * (self.memory_gib - reserved) / self.memory_gib) / 100 if self.unified else 1.0

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a compute dtype (falls back to bf16; None when unpublished)."""
        tf = self.tflops.get(dtype) or self.tflops.get("bf16")
        return tf * 1e12 if tf else None


def _bundled() -> dict[str, dict]:
    return yaml.safe_load(files("servelab.data").joinpath("hardware.yaml").read_text())


def profiles() -> dict[str, Hardware]:
    """All bundled profiles by short name."""
    return {key: Hardware(**value) for key, value in _bundled().items()}


def load_hardware(ref: str) -> Hardware:
    """A bundled profile by name (``h100-sxm``, ``dgx-spark`` …) or a YAML file.

    Raises:
        ServelabError: unknown name (with the closest ones) or an invalid file (naming the field).
    """
    path = Path(ref)
    if path.is_file():
        data = read_yaml(path, "--hardware")
        try:
            return Hardware(**data)
        except (TypeError, ValidationError) as exc:
            first = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": ("?",), "msg": str(exc)}
            raise ServelabError(f"--hardware {ref}: field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    known = profiles()
    key = ref.lower()
    if key in known:
        return known[key]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.3)
    raise ServelabError(f"--hardware {ref!r} is neither a profile nor a YAML file; closest: {', '.join(close) or ', '.join(known)}")
