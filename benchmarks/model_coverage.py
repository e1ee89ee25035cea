"""Model coverage of ``servelab plan --model``: every real config.json in tests/fixtures/configs
(published.yaml says where each came from and its published parameter count) read as servelab
reads it, printed as a table: family (``generic decoder`` where the model_type has no family of its own),
total and active parameters, the published total and the error, KV-cache bytes per token (BF16,
the layers whose cache grows with context), and where the weights figure comes from.

The weights come from the formula here (the fixtures are config.json files without their
checkpoints); ``servelab plan`` on a checkpoint directory or a Hub id reads its safetensors
headers instead (tests/test_models.py checks those to the byte). Usage:
``python benchmarks/model_coverage.py [--markdown]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from servelab.plan.model_spec import load_model

CONFIGS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "configs"


def rows() -> list[dict]:
    """One row per fixture: id, family, totals (parameters), the published total and the error (%)."""
    out = []
    for entry in yaml.safe_load((CONFIGS / "published.yaml").read_text(encoding="utf-8"))["models"]:
        spec = load_model(str(CONFIGS / entry["file"]))
        published = float(entry["published"]) if entry["published"] else None
        if published is None:
            verdict = "no published count"
        elif entry.get("vision"):
            verdict = "published count includes a vision tower"
        else:
            err = abs(spec.total_params / published - 1)
            verdict = "within 1 %" if err <= max(0.01, entry.get("rounding", 0)) else f"MISS: {entry.get('known_miss', 'not explained')}"
        out.append({
            "id": entry["id"], "family": spec.family, "total": spec.total_params, "active": spec.active_params, "published": published,
            "error_pct": None if published is None else 100 * (spec.total_params / published - 1),
            "kv": spec.kv_bytes_per_token(2), "weights": "formula (config.json only)", "verdict": verdict,
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (for the README)")
    args = ap.parse_args()
    data = rows()
    cols = ("model", "family", "total B", "active B", "published B", "error", "KV B/token", "weights", "verdict")
    cells = [
        (r["id"], r["family"], f"{r['total'] / 1e9:,.2f}", f"{r['active'] / 1e9:,.2f}", "–" if r["published"] is None else f"{r['published'] / 1e9:,.2f}",
         "–" if r["error_pct"] is None else f"{r['error_pct']:+.2f} %", f"{r['kv']:,.0f}", r["weights"], r["verdict"])  # fmt: skip
        for r in data
    ]
    held = [r for r in data if r["verdict"] == "within 1 %"]
    counted = [r for r in data if r["published"] and r["verdict"] != "published count includes a vision tower"]
    summary = f"{len(data)} configs, {len({r['family'] for r in data})} families; {len(held)} of {len(counted)} with a published text-model count within 1 %"
    if args.markdown:
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for c in cells:
            print("| " + " | ".join(c) + " |")
        print(f"\n{summary}")
        return
    table = Table(title="servelab plan: model coverage (tests/fixtures/configs)")
    for c in cols:
        table.add_column(c, justify="left" if c in ("model", "family", "weights", "verdict") else "right")
    for c in cells:
        table.add_row(*c)
    console = Console(width=220)
    console.print(table)
    console.print(summary)


if __name__ == "__main__":
    main()
