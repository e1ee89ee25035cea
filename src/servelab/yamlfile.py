"""Reading a user's YAML file (workloads, mixes, hardware profiles) with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from servelab.errors import ServelabError


def read_yaml(path: Path, option: str) -> Any:
    """The parsed YAML document at ``path`` (None for an empty file), given with ``option``.

    Raises:
        ServelabError: unreadable file, or invalid YAML (naming ``option``, the file and the line).
    """
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServelabError(f"{option} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ServelabError(f"{option} {path}: not valid YAML{where}") from None
