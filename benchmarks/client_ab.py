"""Client CPU per streamed chunk of two servelab source trees, measured in one run against the same
emitter: the current tree and a baseline (a git worktree of an earlier commit), alternated round
by round so that drift on the machine falls on both alike.

The emitter is ``benchmarks/client_overhead.py``'s (one process pinned to CPU 1, TTFT 0, ITL 0:
as fast as it can). Each round runs, for each tree, one client process pinned to CPU 0 with that
tree's ``src`` on ``PYTHONPATH``: its own ``StreamClient`` and closed-loop scheduler keep
``--concurrency`` streams busy for ``--seconds`` after a warm-up round, and report the chunks read
and their user + system CPU time. The driver builds its request bodies itself, so it runs on trees
whose modules moved (``servelab.endpoint`` → ``servelab.server.endpoint``, …).

Usage: ``git worktree add /tmp/base <commit>`` then ``python benchmarks/client_ab.py --baseline
/tmp/base [--rounds 5] [--seconds 4] [--concurrency 64]``; prints one row per round and the medians
(issue 50: the current tree's CPU per 1,000 chunks within 5 % of the baseline's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from client_overhead import start_emitters  # noqa: E402

DRIVER = r"""
import asyncio, json, resource, sys, time
import orjson, uvloop
from servelab.load.client import StreamClient
from servelab.load.scheduler import closed_loop
try:
    from servelab.server.endpoint import Endpoint
    from servelab.store.results import EndpointInfo
    from servelab.values.records import RequestRecord
except ImportError:  # a tree from before the packages (issue 50)
    from servelab.endpoint import Endpoint
    from servelab.results import EndpointInfo
    from servelab.records import RequestRecord

url, concurrency, tokens, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

async def main():
    endpoint = Endpoint(root=url, info=EndpointInfo(url=url, engine="generic", model="emitter"))
    origin = time.perf_counter()
    counter = iter(range(10**9))

    def make(_):
        i = next(counter)
        rec = RequestRecord(index=i, concurrency=concurrency, phase="measured", max_tokens=tokens, queued=time.perf_counter() - origin)
        body = {"model": "emitter", "messages": [{"role": "user", "content": f"req-{i}"}], "max_tokens": tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        return rec, orjson.dumps(body)

    async def alive():
        return True

    async with StreamClient(endpoint, origin=origin, connections=concurrency, request_timeout_s=120) as client:
        await closed_loop(client, make, concurrency=concurrency, count=concurrency, on_record=lambda r: None, alive=alive)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        phase = await closed_loop(client, make, concurrency=concurrency, duration_s=seconds, on_record=lambda r: None, alive=alive)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    chunks = sum(len(r.chunk_times) for r in phase.records)
    failed = sum(r.status == "failed" for r in phase.records)
    print(json.dumps({"chunks": chunks, "failed": failed, "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)}))

with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
    runner.run(main())
"""


def client(tree: Path, url: str, concurrency: int, tokens: int, seconds: float) -> dict:
    """One client run of ``tree``'s servelab against ``url``, pinned to CPU 0: chunks, failed, CPU s."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run([sys.executable, "-c", DRIVER, url, str(concurrency), str(tokens), str(seconds)], env=env, capture_output=True, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {0}), timeout=seconds * 10 + 60)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"the {tree} client failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other source tree (a git worktree of an earlier commit)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "current": Path(__file__).resolve().parent.parent}
    procs, url, _ = start_emitters(0.0, 0.0, 1)
    rows: list[tuple[int, str, dict]] = []
    try:
        for k in range(args.rounds):
            for name in (("baseline", "current") if k % 2 == 0 else ("current", "baseline")):
                result = client(trees[name], url, args.concurrency, args.tokens, args.seconds)
                rows.append((k + 1, name, result))
                print(json.dumps({"round": k + 1, "tree": name, **result}), file=sys.stderr)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
    table = Table(title=f"client CPU per 1,000 chunks, {args.concurrency} streams × {args.tokens} chunks, {args.seconds:g} s a run, one emitter")
    for col in ("round", "tree", "chunks", "failed", "CPU ms / 1,000 chunks"):
        table.add_column(col, justify="right")
    per = {name: [] for name in trees}
    for k, name, r in rows:
        ms = r["cpu_s"] / r["chunks"] * 1e6
        per[name].append(ms)
        table.add_row(str(k), name, f"{r['chunks']:,}", str(r["failed"]), f"{ms:.2f}")
    base, cur = statistics.median(per["baseline"]), statistics.median(per["current"])
    table.add_row("median", "baseline", "", "", f"{base:.2f}")
    table.add_row("median", "current", "", "", f"{cur:.2f} ({100 * (cur / base - 1):+.1f} %)")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
