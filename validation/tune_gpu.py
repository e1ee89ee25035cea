#!/usr/bin/env python3
"""``servelab tune`` against a real vLLM (issue 52): an exhaustive grid measured point by point (the
truth) beside ``servelab tune --launches 3`` over the same grid, on the kit's Qwen3-30B-A3B in FP8
(dummy weights, uniform-random expert routing), one server per GPU.

Usage (on a machine with one or more NVIDIA GPUs where the kit's setup.sh unpacked vLLM to /tmp/site,
servelab's needs on PYTHONPATH):

    python3 validation/tune_gpu.py --kit .gpu-vllm --work /tmp/tunework --out OUT --deadline 540

Every grid point is measured once the way tune measures a launch: ``servelab tune`` over that
one point with ``--launches 1`` (launch the recipe with the point's values, ``capacity`` started at
predict's estimate, stop the server), in ``WORK/truth/<point>``. A point the tune launches on the
same machine is not measured twice: its launch (``WORK/tune/<point>``) is its truth, so the truth
takes the max_num_batched_tokens 2048 points first (predicted lowest, the tune's least likely). The tune itself runs in
``WORK/tune`` on one GPU as a user runs it, ``--launches 3``, over as many calls of a lent machine as
it takes: interrupted at the deadline, the same command with the same ``--output`` resumes it (its
finished launches in their order and its finished probes read back; it ran ``--launches`` 1, 2, 3
before, and a tune resumed with a larger budget then chose anew, validation/RESULTS-tune.md); its
wall time is the sum of its invocations'. A job starts while at least ``MIN_START_S`` are left before
``--deadline``; at the deadline every job is interrupted (a tune interrupted keeps its finished
launches and probes and stops its server) and a rerun with the same ``--work`` goes on. WORK is packed
into OUT/tunework.tgz at the end, the per-request records apart into OUT/records.tgz.NN (15 MB pieces).

``validation/tune_replay.py`` replays a tune over the measured grid without a GPU; the tables are in
validation/RESULTS-tune.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "validation" / "recipes" / "vllm-kit-qwen3-30b-a3b.yaml"
GRID = {"max_num_seqs": ["64", "128", "256"], "max_num_batched_tokens": ["2048", "8192"], "max_cudagraph_capture_size": ["128", "512"]}
LOAD = ["--slo", "ttft_p99=1s,tpot_p99=40ms", "--input-tokens", "512", "--output-tokens", "64"]
TUNE_LAUNCHES = 3
MIN_START_S = 200.0  # a job started later would spend its share on the server's start


def labels() -> list[dict[str, str]]:
    return [dict(zip(GRID, combo)) for combo in itertools.product(*GRID.values())]


def point_dir(work: Path, label: str) -> Path:
    """Where a point's measured launch lies: its truth run, else the tune's launch of it."""
    truth = work / "truth" / label / label
    return truth if (truth / "launch.json").exists() else work / "tune" / label


def label_of(values: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


def prepare(kit: Path) -> dict[str, str]:
    """The model folder the recipe serves, a ``vllm`` on PATH, and the environment servelab runs in."""
    model = Path("/tmp/models/qwen3-30b-a3b")
    model.mkdir(parents=True, exist_ok=True)
    for src in [*(kit / "configs" / "qwen3-30b-a3b").iterdir(), *(kit / "tokenizer").iterdir()]:
        shutil.copy(src, model / src.name)
    bindir = Path("/tmp/bin")
    bindir.mkdir(exist_ok=True)
    (bindir / "vllm").write_text('#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n')
    (bindir / "vllm").chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}


def tune_argv(values: dict[str, list[str]], out: Path, launches: int, hardware: tuple[str, ...] = ()) -> list[str]:
    """``hardware``: ("--hardware", NAME) where the GPUs are not the recipe's H100s."""
    vary = [a for k, v in values.items() for a in ("--vary", f"{k}={','.join(v)}")]
    return [sys.executable, "-m", "servelab", "tune", str(RECIPE), *LOAD, *vary, *hardware, "--launches", str(launches), "--output", str(out), "--json"]


def tune_state(out: Path) -> tuple[int, bool]:
    """(launches measured, whether the tune has points left to launch) of the tune in ``out``."""
    try:
        doc = json.loads((out / "tune.json").read_text())
    except (OSError, ValueError):
        return 0, True
    left = doc["status"] != "complete" or any(p["status"] in ("priced", "not priced") for p in doc["points"])
    return sum(1 for launch in doc["launches"] if launch["status"] == "complete"), left


class Runner:
    """Jobs on GPUs until the deadline: the tune's launches on one GPU, truth points on every GPU."""

    def __init__(self, work: Path, env: dict[str, str], deadline: float, gpus: list[str], truth: str | None, tune: bool, hw: tuple[str, ...]) -> None:
        """``truth``: measure the truth points whose label holds this text ("" for all, None for none);
        ``tune``: run the tune's launches too; ``hw``: tune's --hardware for these GPUs (:func:`hardware`)."""
        self.work, self.env, self.deadline, self.gpus, self.hw = work, env, deadline, gpus, hw
        self.lock = threading.Lock()
        picked = [v for v in labels() if truth is not None and truth in label_of(v) and tune_state(work / "truth" / label_of(v))[0] == 0]
        self.truth = sorted(picked, key=lambda v: int(v["max_num_batched_tokens"]))  # stable: grid order within
        self.tune, self.tune_busy = tune, False
        self.procs: list[subprocess.Popen] = []

    def next_job(self) -> tuple[str, list[str], Path] | None:
        with self.lock:
            if self.deadline - time.time() < MIN_START_S:
                return None
            tune_out = self.work / "tune"
            done, left = tune_state(tune_out)
            if self.tune and not self.tune_busy and done < TUNE_LAUNCHES and left:
                self.tune_busy = True
                return "tune", tune_argv({k: v for k, v in GRID.items()}, tune_out, TUNE_LAUNCHES, self.hw), tune_out
            self.truth = [v for v in self.truth if not (tune_out / label_of(v)).exists()]  # the tune's launch is its truth
            if self.truth:
                values = self.truth.pop(0)
                out = self.work / "truth" / label_of(values)
                return label_of(values), tune_argv({k: [v] for k, v in values.items()}, out, 1, self.hw), out
            return None

    def worker(self, gpu: str) -> None:
        while (job := self.next_job()) is not None:
            name, argv, out = job
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            with open(out.parent / f"{out.name}.console.txt", "a") as log:
                proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**self.env, "CUDA_VISIBLE_DEVICES": gpu,
                                        "SERVELAB_DB": str(out.parent / f"{out.name}.runs.db")})  # fmt: skip
                with self.lock:
                    self.procs.append(proc)
                rc = proc.wait()
            took = time.time() - t0
            record = {"job": name, "gpu": gpu, "start": t0, "seconds": round(took, 1), "rc": rc}
            with self.lock, open(self.work / "jobs.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
                if name == "tune":
                    self.tune_busy = False
            print(json.dumps(record), flush=True)

    def run(self) -> None:
        threads = [threading.Thread(target=self.worker, args=(g,)) for g in self.gpus]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and time.time() < self.deadline:
            time.sleep(5)  # the deadline's clock, not synchronisation
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # tune marks itself partial and stops its server
        for t in threads:
            t.join()


def gpus() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, check=True).stdout
    return out.split()


def hardware(gpu_names: str) -> tuple[str, ...]:
    """--hardware h200 on H200s (the recipe prices H100s); ``gpu_names``: nvidia-smi's names, or host.txt."""
    return ("--hardware", "h200") if "H200" in gpu_names else ()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--deadline", type=float, default=540.0, help="Seconds from now at which every job is interrupted.")
    ap.add_argument("--only", help="Measure only the truth points whose label holds this text.")
    ap.add_argument("--no-tune", action="store_true", help="Measure truth points only.")
    ap.add_argument("--tune-only", action="store_true", help="Run the tune only (against a truth measured before, e.g. on another machine).")
    args = ap.parse_args()
    env = prepare(args.kit)
    args.work.mkdir(parents=True, exist_ok=True)
    host = subprocess.run(["bash", "-c", "lscpu | grep -E 'Model name|^CPU\\(s\\)'; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv"],
                          capture_output=True, text=True).stdout  # fmt: skip
    (args.work / "host.txt").write_text(host)
    Runner(args.work, env, time.time() + args.deadline, gpus(), None if args.tune_only else args.only or "", not args.no_tune, hardware(host)).run()
    if args.out:  # one archive: a lent machine hands back a few files only
        args.out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-czf", str(args.out / "tunework.tgz"), "--exclude=*.runs.db*", "--exclude=records.jsonl", "-C", str(args.work), "."], check=True)
        subprocess.run(f"cd {args.work} && find . -name records.jsonl | tar -czf - -T - | split -b 15000000 -d - {args.out / 'records.tgz.'}", shell=True, check=True)


if __name__ == "__main__":
    main()
