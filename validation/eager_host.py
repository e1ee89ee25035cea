#!/usr/bin/env python3
"""The host's time to launch a step without CUDA graphs (issue 53): the floor ``servelab predict`` puts under such a step
(``servelab.engines.vllm.EAGER_HOST_*``, ``Engine.eager_host_s``), fitted here and checked model by model.

One stream, one prompt alone in its step, on every server measured cold with vLLM 0.25 (dummy weights, the kit): ``vllm
bench serve``'s 1-stream burst sends prompts of 522 tokens (above the largest CUDA-graph capture size, 512: the step runs
without graphs), ``servelab bench``'s 1-stream steady state prompts of 512 (inside a graph). The difference of their TTFTs is
what the step without graphs costs more: the step inside the graph is its GPU work G (its TTFT less ``API_TTFT_S``).

predict prices a step without graphs at max(G + e, H): e the shipped calibration's times without graphs (t_eager, the MoE
layers' ``moe_eager_layer_ms``, FP8's 0.4 ms a layer), H the host's time to launch the step, h_layer a layer + h_moe a MoE
layer (by format) + h_mla an MLA layer. The four are fitted by least absolute error on a grid (``--fit``) on the 25 servers
measured before the third kept-back set (19 models; of the servers 8 ran a MoE in BF16, 7 in FP8, 7 an MLA model; gpt-oss's,
whose prompts were 512 tokens, have no step without graphs): no model among them is held out. The third kept-back set's four
servers (validation/kept-back3-h200/, measured after the constants were set), the fourth's, the fifth's and the sixth's (kept-back4-h200/,
kept-back5-h200/, kept-back6-h100/: an H100 host), the seventh's (kept-back7-h100/: another H100 host) and the eighth's
(kept-back8-h100/: a third), the ninth's (kept-back9-h100/: a fourth), the tenth's (kept-back10-h100/: a further one), the
eleventh's (kept-back11-h100/: a further one), the twelfth's (kept-back12-h100/: a further one), the thirteenth's (kept-back13-h100/: a
further one), the fourteenth's (kept-back14-h100/: a further one) and the fifteenth's (kept-back15-h100/: a further one) are printed apart, held out. A server whose truth is void (``kept_back.void``: its MoE
routing simulated with the router outside the MoE layer) is left out.

Usage: ``python validation/eager_host.py [--fit]`` (no GPU; ``--fit`` takes about a minute).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "validation"))

from servelab.engines.vllm import ENGINE  # noqa: E402
from servelab.plan.calibration import calibrations  # noqa: E402
from servelab.plan.hardware import load_hardware  # noqa: E402
from servelab.plan.model_spec import load_model  # noqa: E402
from servelab.plan.predict import API_TTFT_S  # noqa: E402
from servelab.plan.quant import get_format  # noqa: E402
from servelab.plan.roofline import compute_dtype  # noqa: E402
from kept_back import void  # noqa: E402

V = ROOT / "validation"
FP8 = {"kimi-k2-6l": "fp8-block", "deepseek-v3-8l": "fp8-block", "mixtral-8x7b": "fp8", "qwen2-57b-a14b": "fp8", "qwen3-30b-a3b": "fp8",
       "llama-3.1-70b": "fp8", "qwen3-32b-fp8": "fp8"}  # fmt: skip  # the servers' formats (validation/cold_gpu.py); the others BF16
HELD_OUT = ("kept-back3-h200", "kept-back4-h200", "kept-back5-h200", "kept-back6-h100", "kept-back7-h100", "kept-back8-h100", "kept-back9-h100", "kept-back10-h100",
            "kept-back11-h100", "kept-back12-h100", "kept-back13-h100", "kept-back14-h100", "kept-back15-h100")  # measured after the floor's constants were set
GRID = {"layer": np.arange(0, 1.2, 0.05), "moe_bf16": np.arange(0, 3.0, 0.05), "moe_fp8": np.arange(0, 2.5, 0.05), "mla": np.arange(0, 1.5, 0.1)}  # ms


def servers() -> list[dict]:
    """Every server with both probes: its name, the model's layers by kind, its format, G and the measured extra (s)."""
    out = []
    for bursts in sorted(V.glob("*/*-bursts.json")) + sorted(V.glob("calibrate-h200/*/*-bursts.json")):
        model, folder = bursts.name.removesuffix("-bursts.json"), bursts.parent
        lone = [lv for lv in json.loads(bursts.read_text())["levels"] if lv["concurrency"] == 1 and lv["total_input_tokens"] > 512 * lv["completed"]]
        graph = [lv["ttft_ms"]["p50"] for name in ("calibrate-run", "stagger-run") if (folder / f"{model}-{name}.json").exists()
                 for lv in json.loads((folder / f"{model}-{name}.json").read_text())["levels"] if lv["concurrency"] == 1 and lv["ok"]]  # fmt: skip
        if not lone or not graph or void(model, folder):  # gpt-oss's 512-token prompts (its /v1/completions) stay inside a graph
            continue
        base = model.removesuffix("-bf16").removesuffix("-fp8")
        spec = load_model(str(V / "configs" / base) if (V / "configs" / base).exists() else base)
        out.append({"server": f"{folder.name}/{model}", "spec": spec, "fmt": FP8.get(model, "bf16"), "g": graph[-1] / 1e3 - API_TTFT_S,
                    "extra": (lone[0]["mean_ttft_ms"] - graph[-1]) / 1e3, "hw": load_hardware("h100-sxm" if "h100" in folder.name else "h200"),
                    "held_out": folder.name in HELD_OUT})  # fmt: skip
    return out


def fitted_eager(s: dict) -> float:
    """The shipped calibration's times without graphs for the server's model, with FP8's, s."""
    cal, spec = calibrations()["vllm-0.25-h100-bf16"], s["spec"]
    fp8 = ENGINE.eager_extra_s(compute_dtype(get_format(s["fmt"])), len(spec.layers))  # FP8's activation quantization without graphs
    return (cal.eager_step_ms + cal.moe_eager_layer_ms * spec.moe_layers + cal.mla_eager_layer_ms * spec.count("mla")) / 1e3 + fp8


def priced(s: dict, host: float) -> float:
    """The extra predict prices with a host time ``host`` (s): max(G + e, H) − G."""
    return max(s["g"] + fitted_eager(s), host) - s["g"]


def fit(rows: list[dict]) -> tuple[dict[str, float], float]:
    """The grid's least-absolute-error point (ms) and its error, s."""
    axes = np.meshgrid(*GRID.values(), indexing="ij")
    err = np.zeros(axes[0].shape)
    for s in rows:
        spec = s["spec"]
        moe = axes[1] if s["fmt"] == "bf16" else axes[2]
        host = (axes[0] * len(spec.layers) + moe * spec.moe_layers + axes[3] * spec.count("mla")) / 1e3
        err += np.abs(np.maximum(s["g"] + fitted_eager(s), host) - s["g"] - s["extra"])
    i = np.unravel_index(np.argmin(err), err.shape)
    return {k: round(float(a[i]), 2) for k, a in zip(GRID, axes, strict=True)}, float(err[i])


def main() -> dict[bool, tuple[int, float, float]]:
    """Prints every server's row, then per group (fitted on, held out): servers and the absolute error in all with the floor and
    without it, s (returned, by ``held_out``)."""
    rows = servers()
    print("| server | layers (MoE, MLA) | format | step inside a graph, ms | without: extra measured | priced with the floor | without it |\n|---|---|---|---|---|---|---|")
    totals: dict[bool, tuple[int, float, float]] = {}
    for s in rows:
        spec, host = s["spec"], ENGINE.eager_host_s(s["spec"], s["fmt"], s["hw"])[1]
        a, b = priced(s, host), fitted_eager(s)
        n, with_floor, without = totals.get(s["held_out"], (0, 0.0, 0.0))
        totals[s["held_out"]] = (n + 1, with_floor + abs(a - s["extra"]), without + abs(b - s["extra"]))
        print(f"| {s['server']}{' (held out)' if s['held_out'] else ''} | {len(spec.layers)} ({spec.moe_layers}, {spec.count('mla')}) | {s['fmt']} | "
              f"{s['g'] * 1e3:.1f} | {s['extra'] * 1e3:.1f} | {a * 1e3:.1f} | {b * 1e3:.1f} |")  # fmt: skip
    for held, (n, with_floor, without) in sorted(totals.items()):
        print(f"\n{'held out (the third to fifteenth kept-back sets)' if held else 'fitted on'}: {n} servers, absolute error in all {with_floor * 1e3:.0f} ms with "
              f"the floor, {without * 1e3:.0f} ms without it")  # fmt: skip
    if "--fit" in sys.argv:
        best, err = fit([s for s in rows if not s["held_out"]])
        print(f"least absolute error on the grid (the servers fitted on): {best} ms (layer, MoE layer in BF16 and in FP8, MLA layer), {err * 1e3:.0f} ms in all")
    return totals


if __name__ == "__main__":
    main()
