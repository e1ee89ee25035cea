#!/usr/bin/env python3
"""Replay ``servelab tune`` on a measured grid, without a GPU (issue 52).

``validation/tune_gpu.py`` measured every point of a grid once by launching it (the truth, in
``TRUTH/truth/<point>/<point>``, or the tune's own launch of it in ``TRUTH/tune/<point>``: the
launch's ``launch.json`` and capacity's probes). A tune whose
``--output`` holds a point's directory with its ``launch.json`` reads that launch back instead of
starting a server (a resumed tune), so a tune run over a folder holding every truth point makes the
choices the same code would make on the GPU, and its refits read the same probes: which points it
launches, in what order, and what it names the winner.

    python3 validation/tune_replay.py validation/tune-h100 [--launches 3] [--orders]

Prints the truth (every point's measured capacity), the tune's launches and its winner against the
best measured; exits 1 when the winner is more than 5 % below the best. With ``--orders``, the same
for each of the 8 orders of the --vary values (each key's list as given or reversed: where the
predictions tie, the order decides), and the mean and worst share of the best.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_gpu import GRID, LOAD, ROOT, hardware, labels, label_of, point_dir, tune_argv  # noqa: E402


def truth(folder: Path) -> dict[str, float | None]:
    """Every grid point's measured capacity (streams; None: no load met the SLO)."""
    found = {}
    for values in labels():
        label = label_of(values)
        launch = json.loads((point_dir(folder, label) / "launch.json").read_text())
        found[label] = launch["capacity"]
    return found


def replay(folder: Path, launches: int, grid: dict[str, list[str]] = GRID) -> dict:
    """The tune's document after a run over every truth point (no server started), the --vary values
    in ``grid``'s order."""
    with tempfile.TemporaryDirectory(prefix="tune-replay-") as tmp:
        work = Path(tmp)
        for values in labels():
            label = label_of(values)
            shutil.copytree(point_dir(folder, label), work / label)
        hw = hardware((folder / "host.txt").read_text())  # priced as the machine that measured it
        proc = subprocess.run(tune_argv(grid, work, launches, hw), capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "SERVELAB_DB": str(work / "runs.db")})  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"tune failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def orders(folder: Path, launches: int, measured: dict[str, float | None]) -> None:
    """The replay over the 8 orders of the grid's values; exits 1 when the worst is below 60 % of the best."""
    best = max(v or 0 for v in measured.values())
    shares = []
    print("| order (reversed keys) | launched, measured streams | winner's share of the best |")
    print("|---|---|---|")
    for reverse in itertools.product([False, True], repeat=len(GRID)):
        grid = {k: list(reversed(v)) if r else v for (k, v), r in zip(GRID.items(), reverse)}
        doc = replay(folder, launches, grid)
        shares.append((measured[doc["winner"]] or 0) / best)
        names = ", ".join(k for k, r in zip(GRID, reverse) if r) or "none"
        got = ", ".join(f"{measured[x['label']]:g}" for x in doc["launches"])
        print(f"| {names} | {got} | {shares[-1]:.0%} |")
    print(f"\nmean {sum(shares) / len(shares):.0%}, worst {min(shares):.0%}, the best named in {sum(s >= 0.95 for s in shares)} of {len(shares)}")
    sys.exit(0 if min(shares) >= 0.6 else 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--orders", action="store_true", help="Replay each of the 8 orders of the --vary values.")
    args = ap.parse_args()
    measured = truth(args.folder)
    if args.orders:
        orders(args.folder, args.launches, measured)
    best = max(measured, key=lambda k: measured[k] or 0)
    doc = replay(args.folder, args.launches)
    print(f"load: {' '.join(LOAD)}")
    print("| point | measured (truth) | predicted after the tune (its last calibration and value effects) | launched as |")
    print("|---|---|---|---|")
    order = {x["label"]: x["iteration"] for x in doc["launches"]}
    first = {p["label"]: p for p in doc["points"]}
    for label, cap in sorted(measured.items(), key=lambda kv: -(kv[1] or 0)):
        print(f"| {label} | {cap:g} | {first[label]['predicted']} | {order.get(label, '–')} |")
    winner = doc["winner"]
    share = (measured[winner] or 0) / (measured[best] or 1)
    print(f"\ntune --launches {args.launches}: launched {[x['label'] for x in doc['launches']]}")
    print(f"winner {winner}: {measured[winner]:g} streams measured, {share:.0%} of the best ({best}, {measured[best]:g})")
    sys.exit(0 if share >= 0.95 else 1)


if __name__ == "__main__":
    main()
