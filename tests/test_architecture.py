"""The layers of docs/architecture.md hold: lint-imports keeps every contract, the diagram is the
contract, and an upward import or a cycle added to a copy of the package is caught."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(src: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the project's contracts over the ``servelab`` package found in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=src, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of src/servelab with ``line`` added after the ``from __future__`` import of ``module``."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "servelab", src / "servelab", ignore=shutil.ignore_patterns("__pycache__"))
    path = src / "servelab" / (module.replace(".", "/") + ".py")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("from __future__ import annotations\n", f"from __future__ import annotations\n\n{line}\n", 1), encoding="utf-8")
    return src


def test_every_contract_is_kept():
    res = _lint_imports(ROOT / "src")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout, res.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("engines.base", "from servelab import cli  # noqa: F401", "servelab.engines.base -> servelab.cli"),  # the bottom importing the top
        ("metrics.summary", "from servelab.bench import Bench  # noqa: F401", "servelab.metrics.summary -> servelab.bench"),
        ("load.client", "import servelab.load.workers  # noqa: F401", "No cycles are allowed in servelab.load"),  # a cycle inside a layer
        ("engines.sglang", "from servelab.engines import vllm  # noqa: F401", "servelab.engines.sglang -> servelab.engines.vllm"),
    ],
)
def test_an_upward_import_or_a_cycle_is_caught(tmp_path, module, line, broken):
    res = _lint_imports(_copy_with(tmp_path, module, line))
    assert res.returncode == 1, res.stdout + res.stderr
    assert broken in res.stdout, res.stdout


def _diagram_layers() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## The layers", 1)[1].split("```", 2)[1]
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.strip().splitlines()]


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return layers


def test_the_diagram_is_the_contract():
    assert [" | ".join(p.strip() for p in spec.split("|")) for spec in _contract_layers()] == _diagram_layers()
