"""``servelab grid``: prefill (pp) and generation (tg) speed over context depth × concurrency, llama-bench style.

A cell is (pp, tg, depth, concurrency). Its requests carry ``depth`` tokens of earlier
conversation (the same for every request of the cell, so a prefix cache can hold it, as llama-bench's
``-d`` does with its KV cache) followed by ``pp`` new prompt tokens, and generate exactly ``tg`` tokens.
Per cell (docs/metrics.md, "Grid"):

- pp t/s (req) = prompt tokens the server computed (prompt − cached) ÷ TTFT, per request;
- tg t/s (req) = (output tokens − 1) ÷ (last token − first token), per request;
- pp t/s (total) = Σ computed prompt tokens ÷ (last first-token − first start) of one batch;
- tg t/s (total) = Σ (output tokens − 1) ÷ (last token − first first-token) of one batch
  (llama-benchy's formula).

A cell runs ``runs`` batches of ``concurrency`` requests started together. Per-request figures are
mean ± std over every request of the cell, totals mean ± std over its batches.
Cells run in a shuffled, seeded order so thermal drift does not line up with load. Each cell is a
run directory under the grid's directory; a rerun skips cells whose run is complete, and a cell
that fails is recorded (``error.txt``) while the grid goes on.
"""

from __future__ import annotations

import csv
import io
import itertools
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from servelab.metrics.request import decode_span
from servelab.values.records import RequestRecord
from servelab.guards.untrusted import for_csv
from servelab.guards.files import read_bytes


@dataclass(frozen=True)
class Cell:
    """One grid cell."""

    pp: int
    tg: int
    depth: int
    concurrency: int

    @property
    def name(self) -> str:
        """Directory name of the cell's run."""
        return f"pp{self.pp}-tg{self.tg}-d{self.depth}-c{self.concurrency}"


def cells(pp: list[int], tg: list[int], depth: list[int], concurrency: list[int], seed: int) -> list[Cell]:
    """Every combination, in a shuffled order fixed by ``seed``."""
    out = [Cell(*c) for c in itertools.product(pp, tg, depth, concurrency)]
    random.Random(seed).shuffle(out)
    return out


@dataclass
class CellStats:
    """pp and tg speeds of one cell (tok/s; per-request mean and std, and aggregate)."""

    cell: Cell
    requests: int
    failed: int
    prefill_tokens: float  # mean prompt tokens the server computed per request (cached ones excluded)
    pp_req_mean: float | None
    pp_req_std: float | None
    pp_total: float | None
    pp_total_std: float | None
    tg_req_mean: float | None
    tg_req_std: float | None
    tg_total: float | None
    tg_total_std: float | None
    ttft_ms_mean: float | None
    ttft_ms_std: float | None = None


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _ok(r: RequestRecord) -> bool:
    return r.status == "ok" and r.start is not None and r.first_token is not None


def _decodes(r: RequestRecord) -> bool:
    return _ok(r) and decode_span(r) is not None


def _computed(r: RequestRecord) -> int:
    return (r.prompt_tokens or 0) - (r.cached_prompt_tokens or 0)


def _batch_totals(batch: list[RequestRecord]) -> tuple[float | None, float | None]:
    """(pp total, tg total) of one batch of requests started together."""
    ok = [r for r in batch if _ok(r)]
    dec = [r for r in batch if _decodes(r)]
    pp_span = max((r.first_token for r in ok), default=0) - min((r.start for r in ok), default=0)
    tg_span = max((r.start + r.chunk_times[-1] for r in dec), default=0) - min((r.first_token for r in dec), default=0)
    pp = sum(_computed(r) for r in ok) / pp_span if ok and pp_span > 0 else None
    tg = sum(r.output_tokens - 1 for r in dec) / tg_span if dec and tg_span > 0 else None
    return pp, tg


def cell_stats(cell: Cell, records: list[RequestRecord]) -> CellStats:
    """The cell's figures from its measured records (see the module docstring)."""
    measured = sorted((r for r in records if r.phase == "measured"), key=lambda r: r.index)
    batches = [measured[i : i + cell.concurrency] for i in range(0, len(measured), cell.concurrency)]
    ok = [r for r in measured if _ok(r)]
    pp = [_computed(r) / (r.first_token - r.start) for r in ok if r.first_token > r.start]
    tg = [(r.output_tokens - 1) / decode_span(r) for r in measured if _decodes(r)]
    totals = [_batch_totals(b) for b in batches]
    pp_req, pp_req_std = _mean_std(pp)
    tg_req, tg_req_std = _mean_std(tg)
    pp_tot, pp_tot_std = _mean_std([p for p, _ in totals if p is not None])
    ttft = _mean_std([(r.first_token - r.start) * 1e3 for r in ok])
    tg_tot, tg_tot_std = _mean_std([t for _, t in totals if t is not None])
    return CellStats(
        cell=cell, requests=len(measured), failed=len(measured) - len(ok),
        prefill_tokens=statistics.fmean(_computed(r) for r in ok) if ok else 0.0,
        pp_req_mean=pp_req, pp_req_std=pp_req_std, pp_total=pp_tot, pp_total_std=pp_tot_std,
        tg_req_mean=tg_req, tg_req_std=tg_req_std, tg_total=tg_tot, tg_total_std=tg_tot_std,
        ttft_ms_mean=ttft[0], ttft_ms_std=ttft[1],
    )  # fmt: skip


CSV_COLUMNS = ("pp", "tg", "depth", "concurrency", "requests", "failed", "prefill_tokens", "pp_req_mean", "pp_req_std",
               "pp_total", "pp_total_std", "tg_req_mean", "tg_req_std", "tg_total", "tg_total_std", "ttft_ms_mean")  # fmt: skip


def grid_csv(rows: list[CellStats]) -> str:
    """The grid as CSV text, one line per cell (columns ``CSV_COLUMNS``, speeds in tok/s), for the
    CLI's one output writer."""
    with io.StringIO(newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for s in rows:
            c = s.cell
            w.writerow([c.pp, c.tg, c.depth, c.concurrency, s.requests, s.failed, round(s.prefill_tokens, 1)]
                       + ["" if v is None else round(v, 3) for v in (s.pp_req_mean, s.pp_req_std, s.pp_total, s.pp_total_std,
                                                                      s.tg_req_mean, s.tg_req_std, s.tg_total, s.tg_total_std, s.ttft_ms_mean)])  # fmt: skip
        return f.getvalue()


# llama-benchy's result columns (its 0.4 table: model, test, t/s (total), t/s (req), peak t/s,
# peak t/s (req), ttfr (ms), est_ppt (ms), e2e_ttft (ms); test names "pp512 @ d4096 (c2)", "tg128 (c1)";
# values "mean ± std"). Source: ../shared/reference/baseline-clients.md §6 (llama-benchy 0.4.0 output).
# llama-benchy 0.4.0 `--format csv` (tests/fixtures/imports/llama-benchy-0.4.0-gemma-270m.csv, written by it)
LLAMA_BENCHY_COLUMNS = ("model", "test_name", "t_s_mean", "t_s_std", "t_s_req_mean", "t_s_req_std", "peak_ts_mean", "peak_ts_std",
                        "peak_ts_req_mean", "peak_ts_req_std", "ttfr_mean", "ttfr_std", "est_ppt_mean", "est_ppt_std",
                        "e2e_ttft_mean", "e2e_ttft_std")  # fmt: skip
_TEST = re.compile(r"^(pp|tg)(\d+)(?: @ d(\d+))?(?: \(c(\d+)\))?$")


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


def llama_benchy_csv(rows: list[CellStats], model: str) -> str:
    """The grid as llama-benchy's ``--format csv`` text: a pp row and a tg row per cell (no peak
    figures: servelab has none; TTFT goes in ttfr, est_ppt and e2e_ttft alike)."""
    with io.StringIO(newline="") as f:
        w = csv.writer(f)
        w.writerow(LLAMA_BENCHY_COLUMNS)
        for s in rows:
            c = s.cell
            depth = f" @ d{c.depth}" if c.depth else ""
            ttft = [_num(s.ttft_ms_mean), _num(s.ttft_ms_std)]
            w.writerow([for_csv(model), f"pp{c.pp}{depth} (c{c.concurrency})", _num(s.pp_total), _num(s.pp_total_std), _num(s.pp_req_mean),
                        _num(s.pp_req_std), "", "", "", "", *ttft, *ttft, *ttft])  # fmt: skip
            w.writerow([for_csv(model), f"tg{c.tg}{depth} (c{c.concurrency})", _num(s.tg_total), _num(s.tg_total_std), _num(s.tg_req_mean),
                        _num(s.tg_req_std), *[""] * 10])  # fmt: skip
        return f.getvalue()


def _value(text: str) -> tuple[float | None, float | None]:
    parts = [p.strip().replace(",", "") for p in text.split("±")]
    try:
        return (float(parts[0]), float(parts[1]) if len(parts) > 1 else 0.0) if parts[0] else (None, None)
    except ValueError:
        return None, None


def llama_benchy_rows(path: Path) -> tuple[dict[str, int], list[list]]:
    """Header (name → index) and rows ``[line number, cells…]`` of a llama-benchy CSV or Markdown table.

    Raises:
        ValueError: not UTF-8 text, or no llama-benchy header.
    """
    rows: list[list] = []
    header = None
    try:
        text = read_bytes(path, "llama-benchy table").decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (not UTF-8)") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells_ = [c.strip() for c in (line.strip().strip("|").split("|") if "|" in line else next(csv.reader([line])))]
        if header is None:
            if ("test" in cells_ and any(c.startswith("t/s") for c in cells_)) or ("test_name" in cells_ and "t_s_mean" in cells_):
                header = cells_
            continue
        if set(line.replace("|", "").strip()) <= set(":- "):
            continue  # the Markdown separator
        rows.append([n, *cells_, *[""] * (len(header) - len(cells_))])  # a short row reads as empty cells
    if header is None:
        raise ValueError(f"{path}: no llama-benchy header (a 'test' and a 't/s' column, or test_name and t_s_mean)")
    return {name: i + 1 for i, name in enumerate(header)}, rows


def read_llama_benchy(path: Path) -> list[CellStats]:
    """Cells from a llama-benchy result: its ``--format csv`` (mean and std columns), or its Markdown
    table (``mean ± std`` cells), pp and tg rows of the same depth and concurrency paired in order.

    Raises:
        ValueError: no llama-benchy header, or a test name it cannot read (the message names the line).
    """
    col, rows = llama_benchy_rows(path)
    if "test_name" in col:  # --format csv
        test = col["test_name"]

        def pair(row: list, base: str) -> tuple[float | None, float | None]:  # a missing column reads as empty
            mean, std = (_value(row[col[k]])[0] if k in col else None for k in (f"{base}_mean", f"{base}_std"))
            return mean, std

        total, req, ttfr = (lambda r: pair(r, "t_s")), (lambda r: pair(r, "t_s_req")), (lambda r: pair(r, "e2e_ttft"))
    else:  # the Markdown table
        test = col["test"]
        t, q = col.get("t/s (total)", col.get("t/s")), col.get("t/s (req)", col.get("t/s (total)", col.get("t/s")))
        e = col.get("e2e_ttft (ms)", col.get("ttfr (ms)"))
        total, req = (lambda r: _value(r[t]) if t else (None, None)), (lambda r: _value(r[q]) if q else (None, None))
        ttfr = (lambda r: _value(r[e])) if e else (lambda r: (None, None))
    pending: dict[tuple[int, int], tuple[int, tuple, tuple, tuple]] = {}
    out = []
    for row in rows:
        n, name = row[0], row[test]
        m = _TEST.match(name)
        if not m:
            raise ValueError(f"{path} line {n}: test {name!r} is not ppN/tgN [@ dD] [(cC)]")
        kind, size, depth, conc = m.group(1), int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 1)
        if kind == "pp":
            pending[(depth, conc)] = (size, total(row), req(row), ttfr(row))
            continue
        pp, pp_tot, pp_req, ttft = pending.pop((depth, conc), (0, (None, None), (None, None), (None, None)))
        tg_tot, tg_req = total(row), req(row)
        out.append(CellStats(cell=Cell(pp, size, depth, conc), requests=0, failed=0, prefill_tokens=float(pp),
                             pp_req_mean=pp_req[0], pp_req_std=pp_req[1], pp_total=pp_tot[0], pp_total_std=pp_tot[1],
                             tg_req_mean=tg_req[0], tg_req_std=tg_req[1], tg_total=tg_tot[0], tg_total_std=tg_tot[1],
                             ttft_ms_mean=ttft[0], ttft_ms_std=ttft[1]))  # fmt: skip
    return out
