"""The layers of docs/architecture.md hold: lint-imports keeps every contract, the diagram is the
contract, and an upward import or a cycle added to a copy of the package is caught."""

from __future__ import annotations

import ast
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
        ("metrics.summary", "from servelab.run.bench import Bench  # noqa: F401", "servelab.metrics.summary -> servelab.run.bench"),
        ("load.client", "import servelab.load.workers  # noqa: F401", "No cycles are allowed in servelab.load"),  # a cycle inside a layer
        ("engines.sglang", "from servelab.engines import vllm  # noqa: F401", "servelab.engines.sglang -> servelab.engines.vllm"),
    ],
)
def test_an_upward_import_or_a_cycle_is_caught(tmp_path, module, line, broken):
    res = _lint_imports(_copy_with(tmp_path, module, line))
    assert res.returncode == 1, res.stdout + res.stderr
    assert broken in res.stdout, res.stdout


def _diagram_layers(heading: str) -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split(heading, 1)[1].split("```", 2)[1]
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.strip().splitlines()]


def _contract_layers() -> dict[str, list[str]]:
    """Each layers contract's layers, by its container (``servelab``, ``servelab.run``, …)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {c["containers"][0]: [" | ".join(p.strip() for p in spec.split("|")) for spec in c["layers"]] for c in config["contracts"] if c["type"] == "layers"}


def test_the_diagram_is_the_contract():
    contracts = _contract_layers()
    assert contracts.pop("servelab") == _diagram_layers("## The layers")
    assert contracts, "the packages' own layers"
    for container, layers in contracts.items():
        assert layers == _diagram_layers(f"### `{container}`"), container


def test_each_package_names_its_layer_and_what_it_may_import():
    top = _contract_layers()["servelab"]
    packages = [p.parent for p in (ROOT / "src" / "servelab").glob("*/__init__.py") if p.parent.name not in ("data", "migrations")]
    assert len(packages) >= 15
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
        layer = next(spec for spec in top if package.name in spec.split(" | "))
        assert f"Layer: {layer}." in doc, f"{package.name}'s docstring does not name its layer"
        assert "May import:" in doc, f"{package.name}'s docstring does not say what it may import"


def test_functions_are_short_unless_a_comment_says_why():
    """No function over 60 lines in cli/ nor over 80 elsewhere, unless a comment inside it says why
    ("… lines on purpose: …")."""
    long = []
    for path in (ROOT / "src" / "servelab").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        limit = 60 if path.parent.name == "cli" else 80
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                body = lines[node.lineno - 1 : node.end_lineno]
                if not any("#" in line and "lines on purpose" in line for line in body):
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long
