#!/usr/bin/env python3
"""Validate servelab against a real vLLM on a GPU (dummy weights, real kernels, scheduler and memory).

Usage (on a machine with an NVIDIA GPU where ``import vllm`` works, e.g. through ../shared/gpu-vllm):

    python3 validation/vllm_gpu.py --kit .gpu-vllm --out OUT [--part dense|moe|all]

It starts vLLM with ``KIT/serve.sh`` for a dense model (Qwen3-8B, bf16) and a MoE model (Qwen3-30B-A3B,
fp8, uniform-random expert routing), runs servelab against each, and writes ``OUT/report.md`` and
``OUT/report.json`` with every check (passed / failed / explained), plus the server logs and a
``/metrics`` dump. Without a GPU it prints "skipped" and exits 0. Checks:

- bench at c = 1, 2, 4, 5, 8, 10, 16, 64 with ignore_eos: no errors; client and server token counts
  equal; client TTFT / E2E means within max(10 ms, 10 %) of the server's histograms;
- cold runs: zero prefix-cache hits; warm runs: hits;
- ``servelab bootlog`` on the server's own log: KV tokens, max concurrency, capture sizes, times, backends;
- ``servelab plan`` for the same model / dtype / max_model_len / gpu_memory_utilization on this GPU's
  profile: predicted KV budget and KV tokens vs vLLM's (target within 5 %);
- CUDA-graph padding on the MoE model: capture lists without and with 5 and 10; decode tok/s at
  c = 4, 5, 8, 10, 16; servelab's padding findings; vLLM's ``--cudagraph-metrics`` lines;
- queueing: ``--max-num-seqs 8`` under 16 streams gives the ``server_queueing`` finding;
- single-stream decode tok/s as a fraction of the plan's ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servelab.metrics.bootlog import parse_bootlog  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.planner import make_plan  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402
from servelab.store.results import load_run  # noqa: E402

CHECKS: list[dict] = []
DENSE_LEVELS = "1,2,4,5,8,10,16,64"
PADDING_LEVELS = "4,5,8,10,16"


def check(name: str, ok: bool | None, detail: str, **numbers: object) -> None:
    """Record one check (ok None = reported, no pass/fail bound) and print it."""
    CHECKS.append({"check": name, "ok": ok, "detail": detail, **numbers})
    mark = {True: "PASS", False: "FAIL", None: "INFO"}[ok]
    print(f"[{mark}] {name}: {detail}", flush=True)


def gpu() -> tuple[str, float] | None:
    """(name, memory GiB) of GPU 0, or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    name, mib = out.strip().splitlines()[0].rsplit(",", 1)
    return name.strip(), float(mib) / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(kit: Path, config: str, log: Path, *flags: str, env: dict | None = None) -> tuple[int, str]:
    """Start vLLM through the kit's serve.sh; (process group, URL). Raises on a failed start."""
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(kit / "serve.sh"), str(kit / "configs" / config), str(port), str(log), *flags],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=960)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM {config} did not start: {proc.stderr[-2000:]}")
    print(f"vLLM {config} ready in {time.monotonic() - t0:.0f} s on port {port}", flush=True)
    return int(proc.stdout.strip().splitlines()[-1]), f"http://127.0.0.1:{port}"


def stop(pgid: int) -> None:
    """SIGINT the server's process group; SIGKILL what is left after 60 s."""
    try:
        os.killpg(pgid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(1)  # waiting for the engine to exit, not synchronisation
    os.killpg(pgid, signal.SIGKILL)


def servelab(*args: str, check: bool = False) -> None:
    """Run the real ``servelab`` CLI with ``args`` (its ``--output`` directory gets its console as OUTPUT.stdout.txt);
    ``check``: raise RuntimeError when it exits non-zero (bench exits 1 on a run with failed requests, which is data)."""
    out = Path(args[args.index("--output") + 1])
    proc = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"})  # fmt: skip
    (out.parent / f"{out.name}.stdout.txt").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-6000:], proc.stderr[-2000:], flush=True)
    if check and proc.returncode:
        raise RuntimeError(f"servelab {args[0]} failed ({proc.returncode}): {proc.stderr[-500:]}")


def bench(url: str, out: Path, levels: str, *extra: str):
    """Run ``servelab bench`` (the real CLI) and read the run back."""
    servelab("bench", "--url", url, "--concurrency", levels, "--output", str(out), *extra)
    return load_run(out)


def profile_for(name: str) -> str:
    return "h200" if "H200" in name else "h100-sxm"


def close(a: float | None, b: float | None, rel: float = 0.10, abs_: float = 10.0) -> bool:
    return a is not None and b is not None and abs(a - b) <= max(abs_, rel * abs(b))


def plan_checks(facts, cfg: Path, quant: str, hw_name: str) -> None:
    """``servelab plan`` for the server's own model, format, max_model_len and utilisation, against what vLLM logged."""
    plan = make_plan(load_model(str(cfg)), get_format(quant), load_hardware(hw_name), kv_dtype="auto", kv_dtype_bytes=2.0,
                     max_model_len=facts.max_model_len, gpu_memory_utilization=facts.gpu_memory_utilization or 0.9)  # fmt: skip
    tag = f"{cfg.parent.name} {quant}"
    if facts.kv_cache_tokens:
        err = plan.kv_capacity_tokens / facts.kv_cache_tokens - 1
        check(f"plan: KV tokens vs vLLM ({tag})", abs(err) <= 0.05, f"plan {plan.kv_capacity_tokens:,} vs vLLM {facts.kv_cache_tokens:,} tokens ({err:+.1%})",
              plan_tokens=plan.kv_capacity_tokens, vllm_tokens=facts.kv_cache_tokens, error=err)  # fmt: skip
    if facts.kv_cache_gib:
        err = plan.kv_budget_gib / facts.kv_cache_gib - 1
        check(f"plan: KV budget vs vLLM ({tag})", abs(err) <= 0.05,
              f"plan {plan.kv_budget_gib:.2f} GiB vs vLLM {facts.kv_cache_gib} GiB ({err:+.1%}); plan weights {plan.weights_gib:.2f} GiB "
              f"(vLLM {facts.weights_gib}), overhead {plan.overhead_gib:.2f} GiB", plan_gib=plan.kv_budget_gib, vllm_gib=facts.kv_cache_gib, error=err)  # fmt: skip
    if facts.max_concurrency:
        err = plan.max_concurrency / facts.max_concurrency.factor - 1
        check(f"plan: max concurrency vs vLLM ({tag})", abs(err) <= 0.05,
              f"plan {plan.max_concurrency:.2f}x vs vLLM {facts.max_concurrency.factor}x at {facts.max_concurrency.context_tokens} tokens ({err:+.1%})", error=err)  # fmt: skip


def dense(kit: Path, out: Path, hw_name: str) -> None:
    """Qwen3-8B bf16: bench checks, cache control, bootlog, plan, ceiling; then queueing at max_num_seqs 8."""
    log = out / "qwen3-8b.log"
    cfg = kit / "configs" / "qwen3-8b" / "config.json"
    pgid, url = serve(kit, "qwen3-8b", log, "--max-model-len", "8192", "--gpu-memory-utilization", "0.9")
    try:
        urllib.request.urlopen(url + "/metrics", timeout=10).read()  # a first scrape, then the dump after the runs
        facts = parse_bootlog(log.read_text(errors="replace"))
        (out / "qwen3-8b.bootlog.json").write_text(facts.model_dump_json(indent=2))
        check("bootlog: vLLM facts present", all([facts.kv_cache_tokens, facts.max_concurrency, facts.kv_cache_gib, facts.cudagraph_sizes]),
              f"KV {facts.kv_cache_tokens} tokens / {facts.kv_cache_gib} GiB, max concurrency {facts.max_concurrency}, "
              f"{len(facts.cudagraph_sizes or [])} capture sizes, weights {facts.weights_gib} GiB in {facts.weights_load_s} s, "
              f"compile {facts.compile_s} s, graphs {facts.graph_capture_s} s, attention {facts.attention_backend}, ready {facts.ready_s} s",
              facts=facts.model_dump(exclude={"unrecognised"}))  # fmt: skip
        plan_checks(facts, cfg, "bf16", hw_name)
        cold = bench(url, out / "dense-cold", DENSE_LEVELS, "--input-tokens", "512", "--output-tokens", "64", "--hardware", hw_name,
                     "--model-config", str(cfg), "--server-log", str(log))  # fmt: skip
        run, _ = cold
        errors = sum(lv.failed_requests + lv.incomplete for lv in run.levels)
        check("bench: no errors at c=" + DENSE_LEVELS, errors == 0 and run.status == "complete", f"{errors} failed/incomplete, status {run.status}")
        for lv in run.levels:
            s = lv.server
            check(f"tokens c={lv.concurrency}", s is not None and s.generation_tokens == lv.output_tokens and s.prompt_tokens == lv.prompt_tokens,
                  f"server gen {s and s.generation_tokens} / client {lv.output_tokens}; server prompt {s and s.prompt_tokens} / client {lv.prompt_tokens}")  # fmt: skip
            check(f"TTFT mean c={lv.concurrency}", close(lv.ttft_ms.mean, s and s.ttft_mean_ms),
                  f"client {lv.ttft_ms.mean:.1f} ms vs server histogram {s and s.ttft_mean_ms and round(s.ttft_mean_ms, 1)} ms")  # fmt: skip
            check(f"E2E mean c={lv.concurrency}", close(lv.e2e_ms.mean, s and s.e2e_mean_ms),
                  f"client {lv.e2e_ms.mean:.1f} ms vs server histogram {s and s.e2e_mean_ms and round(s.e2e_mean_ms, 1)} ms")  # fmt: skip
            check(f"cold prefix hits c={lv.concurrency}", s is not None and (s.cached_prompt_tokens or 0) == 0, f"prefix-cache hit rate {s and s.prefix_cache_hit_rate}")
        first = run.levels[0]
        check("single-stream decode vs plan ceiling", None,
              f"{first.decode_tok_s.p50:.1f} tok/s = {first.pct_of_ceiling:.0f} % of the {first.decode_ceiling_tok_s:.1f} tok/s ceiling ({hw_name}, bf16, {run.ceiling.context_tokens} tokens of context)",
              pct_of_ceiling=first.pct_of_ceiling)  # fmt: skip
        warm, _ = bench(url, out / "dense-warm", "1,4", "--prefix-cache", "warm", "--input-tokens", "512", "--output-tokens", "16", "--requests", "8")
        hits = [lv.server.prefix_cache_hit_rate for lv in warm.levels if lv.server]
        check("warm prefix hits", bool(hits) and all(h and h > 0.5 for h in hits), f"hit rates {hits}")
        (out / "qwen3-8b.metrics.txt").write_text(urllib.request.urlopen(url + "/metrics", timeout=10).read().decode())
    finally:
        stop(pgid)
    log_q = out / "qwen3-8b-seqs8.log"
    pgid, url = serve(kit, "qwen3-8b", log_q, "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "8")
    try:
        run, _ = bench(url, out / "dense-queue", "16", "--input-tokens", "512", "--output-tokens", "128", "--requests", "48", "--server-log", str(log_q))
        found = [f for f in run.findings if f.kind == "server_queueing"]
        check("queueing finding at max_num_seqs 8, c=16", bool(found), found[0].message if found else "no server_queueing finding", evidence=found[0].evidence if found else None)
    finally:
        stop(pgid)


def moe(kit: Path, out: Path, hw_name: str) -> None:
    """Qwen3-30B-A3B fp8 with uniform-random routing: decode speed at c=4,5,8,10,16 with and without 5 and 10 captured."""
    env = {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random"}
    rows = {}
    for label, sizes in (("without-5-10", [1, 2, 4, 8, 16, 32, 64]), ("with-5-10", [1, 2, 4, 5, 8, 10, 16, 32, 64])):
        log = out / f"qwen3-30b-a3b-{label}.log"
        comp = json.dumps({"cudagraph_capture_sizes": sizes})
        pgid, url = serve(kit, "qwen3-30b-a3b", log, "--quantization", "fp8", "--max-model-len", "4096", "--max-num-seqs", "64",
                          "--compilation-config", comp, "--cudagraph-metrics", env=env)  # fmt: skip
        try:
            run, _ = bench(url, out / f"moe-{label}", PADDING_LEVELS, "--input-tokens", "256", "--output-tokens", "256", "--server-log", str(log))
        finally:
            stop(pgid)
        facts = parse_bootlog(log.read_text(errors="replace"))
        check(f"bootlog capture sizes ({label})", facts.cudagraph_sizes == sizes, f"parsed {facts.cudagraph_sizes}")
        if label == "without-5-10":
            plan_checks(facts, kit / "configs" / "qwen3-30b-a3b" / "config.json", "fp8", hw_name)
        padded = {f.evidence["concurrency"]: f.evidence["graph_size"] for f in run.findings if f.kind == "cudagraph_padding"}
        expected = {5: 8, 10: 16} if label == "without-5-10" else {}
        check(f"padding findings ({label})", padded == expected, f"servelab says padded {padded}, expected {expected}")
        metrics_lines = [ln for ln in log.read_text(errors="replace").splitlines() if "Padded" in ln or "Unpadded" in ln or "Num Paddings" in ln]
        (out / f"cudagraph-metrics-{label}.txt").write_text("\n".join(metrics_lines[-200:]))
        rows[label] = {lv.concurrency: (lv.decode_tok_s.p50, lv.output_throughput_tok_s) for lv in run.levels}
    for c in (4, 5, 8, 10, 16):
        a, b = rows["without-5-10"][c], rows["with-5-10"][c]
        check(f"MoE decode c={c}", None, f"per stream p50 {a[0]:.1f} → {b[0]:.1f} tok/s, aggregate {a[1]:.0f} → {b[1]:.0f} tok/s (without → with 5 and 10 captured)",
              without=a, with_=b)  # fmt: skip


def report(out: Path, device: str) -> None:
    (out / "report.json").write_text(json.dumps({"device": device, "checks": CHECKS}, indent=2, default=str))
    lines = [f"# servelab GPU validation on {device}", "", "| check | result | detail |", "|---|---|---|"]
    for c in CHECKS:
        lines.append(f"| {c['check']} | {dict([(True, 'pass'), (False, 'FAIL'), (None, 'info')])[c['ok']]} | {c['detail']} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True, help="the gpu-vllm kit folder (serve.sh, configs/, tokenizer/)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--part", choices=["dense", "moe", "all"], default="all")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    found = gpu()
    if found is None:
        print("skipped: no NVIDIA GPU here")
        return
    device = f"{found[0]} ({found[1]:.1f} GiB)"
    hw_name = profile_for(found[0])
    print(f"validating on {device}, plan profile {hw_name}", flush=True)
    try:
        if args.part in ("dense", "all"):
            dense(args.kit, args.out, hw_name)
        if args.part in ("moe", "all"):
            moe(args.kit, args.out, hw_name)
    finally:
        report(args.out, device)


if __name__ == "__main__":
    main()
