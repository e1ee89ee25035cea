"""Traces, think times and the session schedule as pure logic (no server): each format read, bad
lines named or skipped, hostile text never a traceback, the prefix share of a known trace."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typer.testing import CliRunner

from servelab.cli import app
from servelab.run.options import BenchOptions
from servelab.errors import ServelabError
from servelab.load.scheduler import session_loop
from servelab.values.records import RequestRecord
from servelab.settings import Load
from servelab.workloads.sessions import Conversation, ThinkTime, parse_think_time
from servelab.workloads.suites import BUILTIN, BUILTIN_MIXES
from servelab.workloads.traces import MOONCAKE_BLOCK_TOKENS, load_trace

TRACES = Path(__file__).parent / "fixtures" / "traces"


def test_each_format_is_read_in_arrival_order_from_zero():
    moon = load_trace(TRACES / "mooncake.jsonl")
    assert moon.format == "mooncake" and len(moon.requests) == 6 and moon.duration_s == pytest.approx(4.8)
    assert moon.requests[2].hash_ids == (0, 3) and moon.requests[2].input_tokens == 700
    azure = load_trace(TRACES / "azure.csv")
    assert azure.format == "azure" and [r.input_tokens for r in azure.requests] == [120, 260, 90, 300, 150]
    assert azure.requests[1].at_s == pytest.approx(0.33876, abs=1e-4)  # 7-digit fractions read to the microsecond
    own = load_trace(TRACES / "servelab-records.jsonl")  # measured requests only, at their queued times
    assert own.format == "servelab" and [(round(r.at_s, 2), r.input_tokens, r.output_tokens) for r in own.requests] == [
        (0.0, 128, 8), (0.02, 128, 8), (1.4, 96, 10), (2.6, 200, 6)]  # fmt: skip


def test_time_scale_divides_the_times_and_rate_follows():
    fast = load_trace(TRACES / "mooncake.jsonl", time_scale=4)
    assert fast.duration_s == pytest.approx(1.2) and fast.rate_rps == pytest.approx(5.0)


def test_prefix_share_counts_only_leading_blocks_seen_before():
    """Requests 3, 4 and 6 begin with blocks seen earlier: 512 (only block 0 of [0, 3]), 560 and
    650 tokens (whole prompts, capped at their length), of 3,010 prompt tokens."""
    assert MOONCAKE_BLOCK_TOKENS == 512
    assert load_trace(TRACES / "mooncake.jsonl").prefix_share() == pytest.approx((512 + 560 + 650) / 3010)
    assert load_trace(TRACES / "azure.csv").prefix_share() is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "input_length": -1, "output_length": 2}\n', "line 2: input_length"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 2}\nnot json\n', "line 2: not JSON"),
        ('{"timestamp": "soon", "input_length": 10, "output_length": 2}\n', "line 1: timestamp"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [-4]}\n', "line 1: hash_ids"),
        ('{"timestamp": 1e999, "input_length": 10, "output_length": 2}\n', "line 1: timestamp"),
    ],
)
def test_a_bad_line_is_one_error_naming_it_unless_skipped(tmp_path, text, needle):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(ServelabError, match="--skip-bad") as err:
        load_trace(path, "mooncake")
    assert needle in str(err.value) and "\n" not in str(err.value)
    if text.count("\n") > 1:
        assert load_trace(path, "mooncake", skip_bad=True).skipped_lines == 1


def test_a_replay_longer_than_a_week_is_refused_before_anything_is_sent(tmp_path):
    """An epoch-milliseconds timestamp beside relative ones makes a 55-year replay: refused in one
    line naming the span and the fixes, before any connection; its first request alone replays."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
                     '{"timestamp": 1732000000000, "input_length": 10, "output_length": 2}\n')  # fmt: skip
    url = "http://127.0.0.1:9"  # nothing listens: a replay that starts fails to connect
    res = CliRunner().invoke(app, ["bench", "--url", url, "--trace", str(trace), "--output", str(tmp_path / "run")])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "span 2e+04 days" in lines[0] and "--requests N" in lines[0], res.output
    assert not (tmp_path / "run").exists()
    res = CliRunner().invoke(app, ["bench", "--url", url, "--trace", str(trace), "--requests", "1", "--output", str(tmp_path / "run")])
    assert "span" not in res.output and "cannot reach" in res.output
    assert load_trace(trace, time_scale=1e4).duration_s == pytest.approx(173_200)  # 2 days at 10,000 × faster: passes


def test_azure_without_its_columns_and_bad_timestamps(tmp_path):
    (tmp_path / "a.csv").write_text("time,tokens\n1,2\n")
    with pytest.raises(ServelabError, match="no column ContextTokens, GeneratedTokens, TIMESTAMP"):
        load_trace(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,2\n2023-11-16 18:15:46.1,²,2\n")
    with pytest.raises(ServelabError, match="line 2"):
        load_trace(tmp_path / "b.csv")
    with pytest.raises(ServelabError, match=r"no request in it \(format azure, 2 bad lines skipped\)"):
        load_trace(tmp_path / "b.csv", skip_bad=True)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["mooncake", "azure", "servelab", None]), st.booleans())
def test_hostile_trace_text_is_a_trace_or_one_line_error(tmp_path_factory, text, fmt, skip_bad):
    path = tmp_path_factory.mktemp("t") / "trace.txt"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        trace = load_trace(path, fmt, skip_bad=skip_bad)
    except ServelabError as exc:
        assert "\n" not in str(exc).strip()
    else:
        assert trace.requests and all(r.at_s >= 0 for r in trace.requests)


@pytest.mark.parametrize(("value", "mean", "exp"), [("0", 0, False), ("2s", 2, False), ("500ms", 0.5, False), ("exp:2s", 2, True), ("1m", 60, False)])
def test_think_time_grammar(value, mean, exp):
    assert parse_think_time(value) == ThinkTime(mean, exp)


@given(st.text(max_size=20))
def test_think_time_is_a_value_or_one_line_error(value):
    try:
        t = parse_think_time(value)
    except ServelabError as exc:
        assert "--think-time" in str(exc)
    else:
        assert 0 <= t.mean_s <= 3600


def test_exponential_think_times_are_seeded_and_have_their_mean():
    t = ThinkTime(2.0, exponential=True)
    draws = [t.draw(0, s, 1) for s in range(4000)]
    assert draws[:5] == [t.draw(0, s, 1) for s in range(5)] and 1.85 < sum(draws) / len(draws) < 2.15


def test_a_conversation_sends_copies_and_keeps_its_order():
    conv = Conversation("rules")
    conv.ask("q1")
    sent = conv.snapshot()
    conv.answer("a1")
    conv.ask("q2")
    assert [m["role"] for m in sent] == ["system", "user"] and [m["role"] for m in conv.snapshot()] == ["system", "user", "assistant", "user"]


def test_agentic_is_a_builtin_session_workload_with_its_mixes():
    agentic = BUILTIN["agentic"]
    assert agentic.multi_turn and agentic.turns > 1 and agentic.system_tokens >= 1024 and '"name": "read_file"' in agentic.system
    assert BUILTIN_MIXES["agentic"] == {"agentic": 1} and "agentic" in BUILTIN_MIXES["chat_and_agents"]
    assert not BUILTIN["qa"].multi_turn


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"turns": 3}, "--turns goes with --sessions"),
        ({"sessions": "2", "trace": Path("t")}, "either --sessions or --trace"),
        ({"sessions": "2", "rates": "1"}, "--sessions sets the load"),
        ({"trace": Path("t"), "duration_s": "5s"}, "drop --duration"),
        ({"requests": 3, "duration_s": "5s"}, "either --requests or --duration"),
    ],
)
def test_meaningless_combinations_are_refused(kwargs, needle):
    with pytest.raises(ServelabError, match=needle):
        Load(**kwargs).traffic


class _Client:
    """Answers every request after a short await; remembers which affinity each came with."""

    origin = 0.0

    def __init__(self) -> None:
        self.affinities: list[object] = []

    async def send(self, record: RequestRecord, body: bytes, affinity: object = None):
        self.affinities.append(affinity)
        record.start = time.perf_counter() - self.origin
        await asyncio.sleep(0)
        record.end = time.perf_counter() - self.origin
        return None


def test_session_loop_plays_each_session_once_at_most_n_open():
    client, open_now, peak, played = _Client(), [0], [0], []

    async def play(j, send):
        open_now[0] += 1
        peak[0] = max(peak[0], open_now[0])
        for turn in range(3):
            await send(RequestRecord(index=j * 3 + turn, concurrency=2, phase="measured", max_tokens=1, queued=0.0, session=j, turn=turn), b"", j)
        played.append(j)
        open_now[0] -= 1

    async def alive():
        return True

    phase = asyncio.run(session_loop(client, play, concurrency=2, count=5, on_record=lambda r: None, alive=alive))
    assert sorted(played) == [0, 1, 2, 3, 4] and peak[0] == 2 and len(phase.records) == 15
    assert [a for a in client.affinities if a == 3] == [3, 3, 3]  # each session's turns carry its key


def test_session_loop_with_a_duration_cuts_sessions_off():
    class Slow(_Client):
        async def send(self, record, body, affinity=None):
            record.start = 0.0
            await asyncio.sleep(10)  # never answers inside the duration

    ended = []

    async def play(j, send):
        try:
            await send(RequestRecord(index=j, concurrency=1, phase="measured", max_tokens=1, queued=0.0), b"", j)
        except asyncio.CancelledError:
            ended.append(j)
            raise

    async def alive():
        return True

    t0 = time.perf_counter()
    phase = asyncio.run(session_loop(Slow(), play, concurrency=2, duration_s=0.2, on_record=lambda r: None, alive=alive))
    assert time.perf_counter() - t0 < 5 and sorted(ended) == [0, 1] and phase.window is not None


@pytest.mark.parametrize("load", [{"sessions": True, "turns": 3}, {"mix": {"agentic": 1.0}, "workloads": BUILTIN}])
def test_sessions_on_the_completions_api_are_refused_wherever_they_come_from(load):
    """--sessions, or a multi-turn workload drawn from a mix (a conversation cannot be a raw prompt)."""
    with pytest.raises(ServelabError, match="--endpoint chat"):
        BenchOptions(concurrency=[1], api="completions", **load)
    assert BenchOptions(concurrency=[1], api="chat", **load).session_mode
