"""The README's Quickstart is what CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quickstart, flags=re.S)
    assert len(commands) == 2, "the Quickstart has exactly two commands"
    install_and_bench, tests = commands
    assert install_and_bench.rstrip().endswith("servelab bench")
    assert "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests.strip() in [line.strip() for line in ci]
