"""servelab tune against a fake vLLM whose speed depends on its flags: every grid point's capacity
measured (the truth), then ``servelab tune --launches 3``; prints both tables and how close tune came.

The fake is tests/batchserver.py as ``vllm serve`` (a ``vllm`` script on PATH), priced as
gemma-3-270m on tests/fixtures/tune/toy.yaml; its physics (step = A + B·n + PREFILL per prompt
token admitted, EAGER more when a step has more tokens than the capture size, at most max_num_seqs
requests a step, the rest queued) are the constants below, which tests/test_tune.py uses too.

    python benchmarks/tune_fake.py            # ~20 min on 2 cores: 12 capacity searches, then tune
    python benchmarks/tune_fake.py --json T   # also write the truth table (tests/fixtures/tune/truth.json)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "batchserver.py"
RECIPE = ROOT / "tests" / "fixtures" / "tune" / "recipe.yaml"
PHYSICS = ["--a", "0.0025", "--b", "0.00014", "--prefill", "0.0002", "--eager", "0.001"]
SLO = "ttft_p99=400ms,tpot_p99=25ms"
LOAD = ["--input-tokens", "64", "--output-tokens", "16", "--requests", "64"]
GRID = {"max_num_seqs": ["8", "16", "24", "32", "64", "256"], "max_cudagraph_capture_size": ["64", "512"]}


def shim(directory: Path) -> Path:
    """A ``vllm`` program on a PATH folder that runs the fake with the physics."""
    path = directory / "vllm"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {SERVER} {' '.join(PHYSICS)} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return directory


def truth(work: Path) -> dict[str, float | None]:
    """Each grid point's capacity, measured by servelab capacity against the fake with its flags."""
    out = {}
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values))
        label = ",".join(f"{k}={v}" for k, v in point.items())
        flags = [a for k, v in point.items() for a in (f"--{k.replace('_', '-')}", v)]
        proc = subprocess.Popen([sys.executable, str(SERVER), *PHYSICS, *flags], stdout=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"
            t0 = time.monotonic()
            res = subprocess.run(["servelab", "capacity", "--url", url, "--slo", SLO, *LOAD, "--start", "16", "--repeats", "0", "--json", "--output", str(work / label)],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            out[label] = json.loads(res.stdout)["max_concurrency"]
            print(f"{label}: {out[label]} streams ({time.monotonic() - t0:.0f} s)", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the truth table here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "PATH": f"{shim(work)}{os.pathsep}{os.environ['PATH']}", "SERVELAB_DB": str(work / "runs.db")}
        t0 = time.monotonic()
        table = truth(work)
        exhaustive_s = time.monotonic() - t0
        vary = [a for k, v in GRID.items() for a in ("--vary", f"{k}={','.join(v)}")]
        t0 = time.monotonic()
        res = subprocess.run(["servelab", "tune", str(RECIPE), *vary, "--slo", SLO, *LOAD, "--launches", "3", "--json", "--output", str(work / "tune")],
                             capture_output=True, text=True, env=env)  # fmt: skip
        tune_s = time.monotonic() - t0
        if res.returncode:
            sys.exit(res.stderr)
        doc = json.loads(res.stdout)
    best = max(table, key=lambda k: table[k] or 0)
    print(f"\n{'point':<45} {'measured':>9} {'tune predicted':>15} {'tune measured':>14}")
    by_label = {p["label"]: p for p in doc["points"]}
    for label, cap in table.items():
        p = by_label[label]
        print(f"{label:<45} {cap!s:>9} {p['predicted']!s:>15} {p['measured']!s:>14}" + ("  ← best" if label == best else "") + ("  ← tune" if label == doc["winner"] else ""))
    won = table[doc["winner"]] or 0
    measured = sum(x["status"] == "complete" for x in doc["launches"])
    print(f"\nbest {best}: {table[best]} streams; tune's winner {doc['winner']}: {won} streams ({100 * (won / table[best] - 1):+.1f} %), "
          f"its own measurement {by_label[doc['winner']]['measured']} ({100 * (by_label[doc['winner']]['measured'] / won - 1):+.1f} %)")  # fmt: skip
    print(f"exhaustive: {len(table)} launches, {exhaustive_s:.0f} s; tune: {measured} launches, {tune_s:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"slo": SLO, "load": LOAD, "physics": PHYSICS, "capacity": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
