"""servelab grid: cell order, per-cell maths by hand, and a resumable grid against the embedded server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.grid import Cell, cell_stats, cells
from servelab.records import RequestRecord

cli = CliRunner()


def test_cells_cover_every_combination_in_a_seeded_shuffle():
    a = cells([512, 2048], [128], [0, 4096], [1, 2, 5], seed=3)
    assert len(a) == 12 and len(set(a)) == 12
    assert a == cells([512, 2048], [128], [0, 4096], [1, 2, 5], seed=3)  # reproducible
    assert a != cells([512, 2048], [128], [0, 4096], [1, 2, 5], seed=4)  # shuffled by the seed
    assert sorted(a, key=lambda c: (c.pp, c.depth, c.concurrency))[0] == Cell(512, 128, 0, 1)


def rec(i, start, ttft, chunks, out, prompt=100, cached=0):
    return RequestRecord(index=i, concurrency=2, phase="measured", max_tokens=out, queued=start, start=start,
                         first_token=start + ttft, end=start + chunks[-1], chunk_times=chunks, output_tokens=out,
                         prompt_tokens=prompt, cached_prompt_tokens=cached)  # fmt: skip


def test_cell_stats_by_hand():
    # batch 1: two requests from t=0; prefill 100 tokens each (20 cached on the second) by 0.5 s and 1.0 s
    b1 = [rec(0, 0.0, 0.5, [0.5, 1.5], 11), rec(1, 0.0, 1.0, [1.0, 2.0], 11, cached=20)]
    b2 = [rec(3, 10.0, 0.5, [0.5, 1.5], 11), rec(4, 10.0, 0.5, [0.5, 1.5], 11)]
    s = cell_stats(Cell(100, 11, 0, 2), [*b1, *b2])
    assert (s.requests, s.failed) == (4, 0)
    assert s.prefill_tokens == pytest.approx((100 + 80 + 100 + 100) / 4)
    assert s.pp_req_mean == pytest.approx((200 + 80 + 200 + 200) / 4)
    assert s.pp_total == pytest.approx(((180 / 1.0) + (200 / 0.5)) / 2)  # per batch, then mean
    assert s.tg_req_mean == pytest.approx(10.0)  # 10 tokens over 1 s each
    assert s.tg_total == pytest.approx((20 / 1.5 + 20 / 1.0) / 2)  # batch 1 spans 0.5 → 2.0 s


def test_grid_runs_resumes_and_records_a_failing_cell(llama, tmp_path):
    out = tmp_path / "grid"
    args = ["grid", "--url", llama.url, "--pp", "64", "--tg", "8", "--concurrency", "1,2", "--runs", "2", "--output", str(out)]
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = (out / "grid.csv").read_text().splitlines()
    assert lines[0].startswith("pp,tg,depth,concurrency") and len(lines) == 3
    assert {line.split(",")[3] for line in lines[1:]} == {"1", "2"}
    assert all(line.split(",")[4] == str(2 * int(line.split(",")[3])) for line in lines[1:])  # runs × concurrency requests
    again = cli.invoke(app, args)
    assert again.exit_code == 0 and again.output.count("done before, skipped") == 2
    bad = cli.invoke(app, ["grid", "--url", llama.url, "--pp", "64,5000", "--tg", "8", "--runs", "1", "--output", str(out)])
    assert bad.exit_code == 1
    assert (out / "pp5000-tg8-d0-c1" / "error.txt").read_text().startswith("a request needs 5000 prompt")
    assert "pp64 tg8" in " ".join(bad.output.split())  # the other cell is still reported
