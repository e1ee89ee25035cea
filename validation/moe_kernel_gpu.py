#!/usr/bin/env python3
"""One MoE layer's expert time in vLLM's Triton fused-MoE op, by format, expert shape, batch and kernel
config (issue 38: why Mixtral-8x7B FP8 decodes 4–9 % slower than predict at one stream while Qwen3-30B-A3B
and Qwen2-57B-A14B FP8 do not).

Usage (on a GPU machine where ``import vllm`` works through ../shared/gpu-vllm):

    python3 validation/moe_kernel_gpu.py --out OUT

For each expert shape (Mixtral-8x7B: 8 experts of 14,336, top 2; Qwen3-30B-A3B: 128 of 768, top 8;
Qwen2-57B-A14B: 64 of 2,560, top 8), format (BF16; FP8 per-tensor weights with dynamic per-tensor
activations, what ``--quantization fp8`` gives) and batch M, one layer is the router (a BF16 gate
matmul and vLLM's ``fused_topk``) and ``fused_experts`` (align, the activations' FP8 quantization, the
gate-up GEMM, SiLU-and-mul, the down GEMM, the top-k sum). Each is timed inside a CUDA graph (decode
runs in one) over ``COPIES`` weight copies in turn, so that no layer's experts sit in L2, with:

- ``auto``: the kernel config vLLM picks (its tuned JSON for the GPU, shape and format if it ships one,
  else ``get_default_config``), vllm/model_executor/layers/fused_moe/fused_moe.py
  ``try_get_optimal_moe_config``;
- ``default``: ``get_default_config`` forced, where a tuned JSON exists.

Also per M in ``PROFILED``, a torch.profiler breakdown by kernel (eager calls, GPU time only). Writes
``OUT/moe-kernel.json`` and prints a table: µs per layer, the distinct experts' bytes and the bandwidth
they were read at.

``--prefill`` instead (issue 53: what a burst's prompts cost in the fused-MoE op): for the expert shapes of
``PREFILL_SHAPES`` at ``PREFILL_BATCHES`` tokens (a lone prompt, a quarter and a whole 8,192-token chunk), BF16
(and FP8 per-tensor, block FP8 where listed), ``fused_experts`` with the config vLLM picks (``auto``) and, where a
tuned JSON ships, ``get_default_config`` too, inside a CUDA graph; beside it a cuBLAS BF16 GEMM pair of the same
FLOPs ((M · top-k) × K × 2N, then × N × K), so that the experts' rate is read against the dense one the calibration's
η_c was fitted on: ``rate`` = the dense pair's time ÷ the experts' time. ``OUT/moe-prefill.json``.

``--eager`` instead: the FP8 layer without CUDA graphs at ``EAGER_BATCHES`` tokens (a 512-token prompt
beside 15 decoding sequences, two beside 63: vLLM's steps that carry prompts run so), ``CALLS`` layers
called back to back: the host's time to launch them (no sync inside), the wall time until the GPU is
done, and the same layers inside a CUDA graph; ``OUT/moe-eager.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.fused_moe import (
    fused_experts,
    fused_topk,
    override_config,
)
from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
from vllm.model_executor.layers.fused_moe.fused_moe import (
    get_default_config,
    get_moe_configs,
    try_get_optimal_moe_config,
)

SHAPES = {"mixtral-8x7b": (8, 14336, 4096, 2), "qwen3-30b-a3b": (128, 768, 2048, 8), "qwen2-57b-a14b": (64, 2560, 3584, 8)}
BATCHES = (1, 4, 16, 64, 256)
COPY_BYTES = 12e9  # weight copies per shape and format: enough to leave L2 (50 MB) far behind
CALLS = 48  # layers per captured graph
REPLAYS = 10
PROFILED = (1, 64)  # batches also broken down by kernel
EAGER_BATCHES = (527, 1087)  # --eager: tokens of a step that carries one or two 512-token prompts
PREFILL_SHAPES = {  # name → (experts, width, hidden, top-k, formats): the MoE models of issue 53's runs and kept-back sets
    "deepseek-v2-lite": (64, 1408, 2048, 6, ("bf16",)), "glm-4.7-flash": (64, 1536, 2048, 4, ("bf16",)),
    "gpt-oss-20b": (32, 2880, 2880, 4, ("bf16",)), "gpt-oss-120b": (128, 2880, 2880, 4, ("bf16",)),
    "deepseek-v2": (160, 1536, 5120, 6, ("bf16",)), "qwen3-235b-a22b": (128, 1536, 4096, 8, ("bf16",)),
    "qwen1.5-moe-a2.7b": (60, 1408, 2048, 4, ("bf16",)), "qwen3-30b-a3b": (128, 768, 2048, 8, ("bf16", "fp8")),
    "mixtral-8x7b": (8, 14336, 4096, 2, ("bf16", "fp8")), "kimi-k2": (384, 2048, 7168, 8, ("fp8-block",)),
}
PREFILL_BATCHES = (512, 2048, 8192)  # --prefill: a lone prompt's tokens, a quarter and a whole 8,192-token chunk


def _layer(E: int, N: int, K: int, fp8: bool, seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = torch.randn(E, 2 * N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    w2 = torch.randn(E, K, N, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    gate = torch.randn(K, E, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    if not fp8:
        return {"w1": w1, "w2": w2, "gate": gate, "quant": None}
    s1 = w1.abs().amax(dim=(1, 2)).float() / 448.0
    s2 = w2.abs().amax(dim=(1, 2)).float() / 448.0
    q1 = (w1 / s1[:, None, None].to(w1.dtype)).to(torch.float8_e4m3fn)
    q2 = (w2 / s2[:, None, None].to(w2.dtype)).to(torch.float8_e4m3fn)
    del w1, w2
    return {"w1": q1, "w2": q2, "gate": gate, "quant": fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None)}


def _block_layer(E: int, N: int, K: int, seed: int) -> dict:
    """Block-FP8 experts (128 × 128 weight blocks, per-token-group activations: DeepSeek-V3's checkpoints)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = (torch.randn(E, 2 * N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).to(torch.float8_e4m3fn)
    w2 = (torch.randn(E, K, N, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).to(torch.float8_e4m3fn)
    s1 = torch.full((E, -(-2 * N // 128), -(-K // 128)), 1e-3, device="cuda")
    s2 = torch.full((E, -(-K // 128), -(-N // 128)), 1e-3, device="cuda")
    gate = torch.randn(K, E, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    return {"w1": w1, "w2": w2, "gate": gate, "quant": fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None, block_shape=[128, 128])}


def _call(layer: dict, x: torch.Tensor, topk: int) -> torch.Tensor:
    logits = x @ layer["gate"]
    weights, ids, _ = fused_topk(x, logits, topk, renormalize=True)
    return fused_experts(x, layer["w1"], layer["w2"], weights, ids, quant_config=layer["quant"])


def _time(layers: list[dict], x: torch.Tensor, topk: int, call=None, calls: int = CALLS) -> float:
    call = call or _call
    for layer in layers:  # compile and warm every kernel before capture
        call(layer, x, topk)
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            call(layers[i % len(layers)], x, topk)
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                call(layers[i % len(layers)], x, topk)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    del graph
    return start.elapsed_time(end) / 1e3 / (REPLAYS * calls)


def _kernels(layer: dict, x: torch.Tensor, topk: int) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        _call(layer, x, topk)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            _call(layer, x, topk)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t:
            out[e.key[:80]] = round(t / 20, 2)  # µs per layer
    return out


def _eager(layers: list[dict], x: torch.Tensor, topk: int) -> tuple[float, float]:
    """``CALLS`` FP8 layers without a graph: the host's launch time and the wall time until the GPU ends, s a layer."""
    for layer in layers:
        _call(layer, x, topk)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for i in range(CALLS):
        _call(layers[i % len(layers)], x, topk)
    host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return host / CALLS, start.elapsed_time(end) / 1e3 / CALLS


def eager_main(out: Path, shapes: list[str]) -> None:
    """``--eager`` (module docstring)."""
    rows, gpu = [], torch.cuda.get_device_name()
    print(f"{gpu}; FP8, µs per layer: host launch, wall without graphs, inside a graph")
    with set_current_vllm_config(VllmConfig()):
        for name in shapes:
            E, N, K, topk = SHAPES[name]
            copies = max(2, min(16, int(COPY_BYTES // (3 * E * N * K))))
            layers = [_layer(E, N, K, True, seed) for seed in range(copies)]
            for M in EAGER_BATCHES:
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 0.5
                host, wall = _eager(layers, x, topk)
                graph = _time(layers, x, topk)
                rows.append({"gpu": gpu, "shape": name, "M": M, "host_us": round(host * 1e6, 1), "eager_us": round(wall * 1e6, 1), "graph_us": round(graph * 1e6, 1)})
                print(f"{name:16} {M:>5} host {host * 1e6:8.1f}  eager {wall * 1e6:8.1f}  graph {graph * 1e6:8.1f}", flush=True)
                (out / "moe-eager.json").write_text(json.dumps(rows, indent=1))
            del layers
            torch.cuda.empty_cache()


def _dense(layer: dict, x: torch.Tensor, topk: int) -> torch.Tensor:
    """cuBLAS BF16 GEMMs of the experts' FLOPs: (M · top-k) × K × 2N, then × N × K (``layer``: ``a``, ``w1``, ``w2``)."""
    return (layer["a"] @ layer["w1"])[:, : layer["w2"].shape[0]] @ layer["w2"]


def prefill_main(out: Path, shapes: list[str]) -> None:
    """``--prefill`` (module docstring)."""
    rows, gpu = [], torch.cuda.get_device_name()
    print(f"{gpu}; one MoE layer's experts at prefill sizes: ms, TFLOPS, and the rate against cuBLAS BF16 GEMMs of the same FLOPs")
    with set_current_vllm_config(VllmConfig()):
        for name in shapes:
            E, N, K, topk, formats = PREFILL_SHAPES[name]
            for fmt in formats:
                dtype = {"bf16": None, "fp8": "fp8_w8a8", "fp8-block": "fp8_w8a8"}[fmt]
                block = [128, 128] if fmt == "fp8-block" else None
                try:
                    layers = [_block_layer(E, N, K, s) if block else _layer(E, N, K, fmt == "fp8", s) for s in range(2)]
                except torch.OutOfMemoryError as e:
                    print(f"{name} {fmt}: {e}", flush=True)
                    continue
                tuned = bool(get_moe_configs(E, N, dtype, *(block or (0, 0))))
                for M in PREFILL_BATCHES:
                    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 0.5
                    flops = 2 * 3 * M * topk * N * K
                    dense = [{"a": torch.randn(M * topk, K, device="cuda", dtype=torch.bfloat16), "w1": torch.randn(K, 2 * N, device="cuda", dtype=torch.bfloat16),
                              "w2": torch.randn(N, K, device="cuda", dtype=torch.bfloat16)} for _ in range(2)]  # fmt: skip
                    t_dense = _time(dense, x, topk, _dense, 8)
                    del dense
                    for mode in ["auto", "default"] if tuned else ["auto"]:
                        default = get_default_config(M, E, N, K, topk, dtype, block)
                        cfg = try_get_optimal_moe_config((E, 2 * N, K), (E, K, N), topk, dtype, M, block) if mode == "auto" else default
                        try:
                            with override_config(default) if mode == "default" else nullcontext():
                                t = _time(layers, x, topk, calls=8)
                        except Exception as e:  # noqa: BLE001 (a shape or format this vLLM cannot run: recorded, the others go on)
                            print(f"{name} {fmt} {M} {mode}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                            continue
                        row = {"gpu": gpu, "shape": name, "format": fmt, "M": M, "mode": mode, "tuned_file": tuned, "config": cfg,
                               "layer_ms": round(t * 1e3, 4), "tflops": round(flops / t / 1e12, 1), "dense_ms": round(t_dense * 1e3, 4),
                               "dense_tflops": round(flops / t_dense / 1e12, 1), "rate": round(t_dense / t, 3)}  # fmt: skip
                        rows.append(row)
                        print(f"{name:18} {fmt:9} {M:>5} {mode:8} {row['layer_ms']:8.3f} ms {row['tflops']:6.1f} TF  dense {row['dense_tflops']:6.1f} TF  rate {row['rate']:.3f}", flush=True)
                        (out / "moe-prefill.json").write_text(json.dumps(rows, indent=1))
                del layers
                torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", help="comma-separated names of SHAPES (PREFILL_SHAPES with --prefill); default all")
    ap.add_argument("--eager", action="store_true", help="the FP8 layer without CUDA graphs (module docstring)")
    ap.add_argument("--prefill", action="store_true", help="the experts at prefill sizes against cuBLAS (module docstring)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prefill:
        return prefill_main(args.out, args.shapes.split(",") if args.shapes else list(PREFILL_SHAPES))
    if args.eager:
        return eager_main(args.out, args.shapes.split(",") if args.shapes else list(SHAPES))
    rows = []
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}; µs per layer (router + experts), the distinct experts' bytes at M and their read rate")
    print(f"{'shape':16} {'fmt':5} {'M':>4} {'config':8} {'µs':>8} {'MB':>8} {'TB/s':>6}  kernel config")
    with set_current_vllm_config(VllmConfig()):
        for name in args.shapes.split(",") if args.shapes else SHAPES:
            E, N, K, topk = SHAPES[name]
            for fp8 in (False, True):
                dtype = "fp8_w8a8" if fp8 else None
                elem = 1 if fp8 else 2  # bytes a weight
                per_copy = 3 * E * N * K * elem
                copies = max(2, min(16, int(COPY_BYTES // per_copy)))
                layers = [_layer(E, N, K, fp8, seed) for seed in range(copies)]
                tuned = bool(get_moe_configs(E, N, dtype, 0, 0))
                for M in BATCHES:
                    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 0.5
                    distinct = sum(int(torch.unique(fused_topk(x, x @ la["gate"], topk, True)[1]).numel()) for la in layers) / copies
                    bytes_ = distinct * 3 * N * K * elem
                    modes = ["auto", "default"] if tuned else ["auto"]
                    for mode in modes:
                        default = get_default_config(M, E, N, K, topk, dtype, None)
                        cfg = try_get_optimal_moe_config((E, 2 * N, K), (E, K, N), topk, dtype, M) if mode == "auto" else default
                        with override_config(default) if mode == "default" else nullcontext():
                            t = _time(layers, x, topk)
                            row = {"gpu": gpu, "shape": name, "format": "fp8" if fp8 else "bf16", "M": M, "mode": mode,
                                   "tuned_file": tuned, "config": cfg, "layer_us": round(t * 1e6, 2), "distinct_experts": distinct,
                                   "expert_bytes": bytes_, "read_tb_s": round(bytes_ / t / 1e12, 3)}  # fmt: skip
                            if M in PROFILED:
                                row["kernels_us"] = _kernels(layers[0], x, topk)
                        rows.append(row)
                        c = {k: cfg[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages") if k in cfg}
                        print(f"{name:16} {row['format']:5} {M:>4} {mode:8} {row['layer_us']:>8.1f} {bytes_ / 1e6:>8.1f} {row['read_tb_s']:>6.2f}  {c}", flush=True)
                        (args.out / "moe-kernel.json").write_text(json.dumps(rows, indent=1))
                del layers
                torch.cuda.empty_cache()
    for r in rows:
        if "kernels_us" in r:
            print(f"\n{r['shape']} {r['format']} M={r['M']} {r['mode']}: " + "; ".join(f"{k} {v}" for k, v in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
