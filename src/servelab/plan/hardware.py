"""Hardware profiles: memory, whether it is unified with the CPU, bandwidth, dense peak FLOP/s per dtype.

Bundled profiles live in ``servelab/data/hardware.yaml`` with their sources; a user profile is a
YAML file with the same fields (``name``, ``memory_gib``, ``bandwidth_gbs``, ``tflops``, and
optionally ``unified``, ``os_reserved_gib``, ``interconnect``, ``source``).
"""

from __future__ import annotations

import difflib
from importlib.resources import files
from pathlib import Path

import yaml
from pydantic import ValidationError

from servelab.errors import ServelabError, first_problem
from servelab.values.specs import Hardware
from servelab.guards.yamlfile import read_yaml


def _bundled() -> dict[str, dict]:
    return yaml.safe_load(files("servelab.data").joinpath("hardware.yaml").read_text(encoding="utf-8"))


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
            return Hardware.model_validate(data)
        except ValidationError as exc:
            raise ServelabError(f"--hardware {ref}: {first_problem(exc, 'the file')}") from None
    known = profiles()
    key = ref.lower()
    if key in known:
        return known[key]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.3)
    raise ServelabError(f"--hardware {ref!r} is neither a profile nor a YAML file; closest: {', '.join(close) or ', '.join(known)}")
