"""servelab grid: cell order, per-cell maths by hand, and a resumable grid against the embedded server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.store.grid import Cell, cell_stats, cells
from servelab.values.records import RequestRecord

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
    said = " ".join(bad.output.split())  # a rerun cannot fix a cell the context cannot hold: said so, not "rerun to retry"
    assert "1 cell(s) need more than the server's context and were not measured (pp5000-tg8-d0-c1)" in said and "rerun" not in said


FIX = __import__("pathlib").Path(__file__).parent / "fixtures" / "llama-benchy" / "gemma-270m-0.4.0.md"


def test_import_llama_benchy_markdown_output():
    from servelab.store.grid import read_llama_benchy

    rows = read_llama_benchy(FIX)
    assert [(r.cell.pp, r.cell.tg, r.cell.depth, r.cell.concurrency) for r in rows] == [(512, 128, 0, 1), (512, 128, 0, 2), (512, 128, 0, 4)]
    c4 = rows[2]
    assert (c4.pp_total, c4.pp_total_std, c4.pp_req_mean) == (807.12, 22.40, 202.00)
    assert (c4.tg_total, c4.tg_req_mean, c4.ttft_ms_mean) == (106.99, 26.76, 2316.02)


def test_llama_benchy_csv_round_trip(tmp_path):
    from servelab.store.grid import llama_benchy_csv, read_llama_benchy

    rows = read_llama_benchy(FIX)
    (tmp_path / "lb.csv").write_text(llama_benchy_csv(rows, "gemma"), encoding="utf-8")
    header = (tmp_path / "lb.csv").read_text().splitlines()[0]
    real = (FIX.parent.parent / "imports" / "llama-benchy-0.4.0-gemma-270m.csv").read_text().splitlines()[0]
    assert header == real  # the columns llama-benchy 0.4.0's --format csv writes
    back = read_llama_benchy(tmp_path / "lb.csv")
    assert [(r.cell, r.pp_total, r.tg_req_mean) for r in back] == [(r.cell, r.pp_total, r.tg_req_mean) for r in rows]


def test_import_llama_benchy_csv_as_written_by_llama_benchy():
    """A CSV written by llama-benchy 0.4.0 itself (tests/fixtures/imports/README.md says how)."""
    from servelab.store.grid import read_llama_benchy

    rows = read_llama_benchy(FIX.parent.parent / "imports" / "llama-benchy-0.4.0-gemma-270m.csv")
    assert [(r.cell.pp, r.cell.tg, r.cell.concurrency) for r in rows] == [(128, 16, 1), (128, 16, 2), (256, 16, 1), (256, 16, 2)]
    c2 = rows[1]
    assert c2.pp_total == pytest.approx(390.5912218701095) and c2.pp_total_std == pytest.approx(5.312541262017277)
    assert c2.tg_req_mean == pytest.approx(28.167869244363157) and c2.ttft_ms_mean == pytest.approx(414.2826110000897)


def test_cli_import_and_bad_file(tmp_path):
    res = cli.invoke(app, ["grid", "--import-llama-benchy", str(FIX), "--output", str(tmp_path / "g")])
    assert res.exit_code == 0 and "807.1 ± 22.4" in res.output and (tmp_path / "g" / "grid.csv").exists()
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    res = cli.invoke(app, ["grid", "--import-llama-benchy", str(tmp_path / "bad.csv")])
    assert res.exit_code == 2 and "no llama-benchy header" in res.output
    (tmp_path / "short.csv").write_text("model,test,t/s (total),t/s (req)\nm,pp512\n")
    res = cli.invoke(app, ["grid", "--import-llama-benchy", str(tmp_path / "short.csv")])
    assert res.exit_code == 0 and "Traceback" not in res.output
    (tmp_path / "cut.csv").write_text("model,test,t/s (total),t/s (req)\nm\n")
    res = cli.invoke(app, ["grid", "--import-llama-benchy", str(tmp_path / "cut.csv")])
    assert res.exit_code == 2 and "line 2: test ''" in res.output


@pytest.mark.parametrize("option,value", [("--depth", "abc"), ("--depth", "-1"), ("--pp", "0")])
def test_bad_grid_list_is_one_line(option, value, tmp_path):
    res = cli.invoke(app, ["grid", "--url", "http://127.0.0.1:9", option, value, "--output", str(tmp_path / "g")])
    assert res.exit_code == 2 and option in res.output and "Traceback" not in res.output
    assert not (tmp_path / "g").exists()  # refused before any server is contacted
