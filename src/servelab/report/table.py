"""Terminal tables for runs (Rich)."""

from __future__ import annotations

from rich.table import Table
from rich.markup import escape

from servelab.load.apis import templated
from servelab.metrics.repeats import TOK_S_SPREAD, TTFT_SPREAD, Interval, repeat_stats
from servelab.metrics.summary import Distribution, LevelSummary
from servelab.store.results import LoadSpec, RunResult


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _pair(d: Distribution, a: str, b: str, digits: int = 1) -> str:
    return f"{_num(getattr(d, a), digits)} / {_num(getattr(d, b), digits)}"


def bench_table(run: RunResult) -> Table:
    """One row per concurrency level: requests (ok/failed/incomplete), latencies and throughput.

    Latencies are ms (p50 / p99 unless the header says otherwise); throughput is tok/s and req/s;
    metric definitions are in docs/metrics.md. A level with failures is shown in red.
    """
    ep = run.endpoint
    title = f"{ep.model} · {ep.engine}{' ' + ep.engine_version if ep.engine_version else ''} · {ep.url}"
    caption = f"{load_text(run.load)}{', ignore_eos' if run.load.ignore_eos else ''}; latencies ms, p50 / p99"
    if run.ceiling:
        c = run.ceiling
        caption += f"; ceiling: {c.model} {c.quant} on {c.hardware} at {c.context_tokens} tokens of context (servelab plan)"
    table = Table(title=escape(title), caption=escape(caption))
    open_loop = any(lv.rate_rps for lv in run.levels)
    columns = [
        "rate req/s (target / achieved)" if open_loop else "sessions" if run.load.sessions else "conc",
        *(["send lag ms" if run.load.trace else "client wait ms"] if open_loop else []),
        "ok / fail / inc",
        "TTFT",
        "TPOT",
        "ITL",
        "E2E",
        "decode tok/s/req p50",
        "prefill tok/s/req p50",
        "output tok/s",
        "req/s",
        "window s",
    ] + (["% of ceiling"] if run.ceiling else []) + (["goodput req/s", "goodput tok/s", "SLO met", "SLO"] if run.load.slo else [])
    if run.load.slo:
        table.caption = escape(caption + "; SLO " + ", ".join(f"{o.key} ≤ {o.target_ms:g} ms" for o in run.load.slo) + " (goodput: docs/metrics.md)")
    for name in columns:
        table.add_column(name, justify="right")
    for lv in run.levels:
        row = _row(lv, open_loop) + ([_num(lv.pct_of_ceiling, 0) + " %" if lv.pct_of_ceiling is not None else "–"] if run.ceiling else [])
        table.add_row(*row, *(_slo_cells(lv) if run.load.slo else []), style="red" if lv.failed else None)
    return table


def load_text(load: LoadSpec) -> str:
    """The load of a run in a phrase: the request shape (or mix, sessions, trace), the API when not
    chat, and the prefix-cache mode."""
    out = load.output_tokens
    if load.trace is not None:
        t = load.trace
        share = f", repeats {t.prefix_share:.0%} of its prompt tokens" if t.prefix_share is not None else ""
        shape = f"trace {t.file} ({t.format}, {t.requests} requests over {t.duration_s:,.0f} s at time scale {t.time_scale:g}{share})"
    elif load.mix:
        shape = "mix " + ", ".join(f"{name} ×{weight:g}" for name, weight in load.mix.items())
    elif load.sessions:
        shape = (f"{load.turns} turns per session: a {load.input_tokens}-token first message, {load.turn_input_tokens or load.input_tokens} "
                 f"per later turn (text tokens), {out} max output tokens, think time {load.think_time}")  # fmt: skip
    else:
        shape = f"{load.input_tokens} prompt tokens, {out}{f' ±{load.output_spread:.0%}' if load.output_spread else ''} max output tokens"
    streams = ", streams staggered" if load.closed_loop == "stagger" and not load.rates and not load.sessions and not load.trace else ""
    api = "" if load.endpoint == "chat" else f", {load.endpoint} API" + ("" if templated(load.endpoint) else " (no chat template)")
    cache = ("sessions reuse their own turns" if load.sessions else "its shared blocks cacheable" if load.reuse_expected
             else f"prefix cache {load.prefix_cache}")  # fmt: skip
    return f"{shape}{api}, {cache}{streams}"


def turns_table(run: RunResult) -> Table | None:
    """Per level and turn of its sessions: requests, mean context, TTFT p50 / p99 and the prefix-cache
    hit rate from the server's usage (metrics/turns.py); None without sessions."""
    levels = [lv for lv in run.levels if lv.sessions is not None]
    if not levels:
        return None
    table = Table(title="sessions, per turn", caption="context: prompt tokens of the whole conversation (chat template included); hit rate: usage cached_tokens ÷ prompt tokens")
    for name in ("sessions", "turn", "requests", "context tokens", "TTFT ms p50 / p99", "prefix hit rate", "sessions ended"):
        table.add_column(name, justify="right")
    for lv in levels:
        ended = ", ".join(f"{k} {n}" for k, n in lv.sessions.ended.items())
        for i, t in enumerate(lv.sessions.turns):
            hit = f"{t.prefix_hit_rate:.1%}" if t.prefix_hit_rate is not None else "–"
            table.add_row(str(lv.concurrency) if i == 0 else "", str(t.turn), str(t.requests), _num(t.context_tokens_mean, 0),
                          _pair(t.ttft_ms, "p50", "p99"), hit, ended if i == 0 else "")  # fmt: skip
    return table


def _slo_cells(lv: LevelSummary) -> list[str]:
    """Goodput (req/s, tok/s), the share of requests that met every objective, and pass or the objectives missed."""
    s = lv.slo
    if s is None:
        return ["–"] * 4
    missed = [f"{c.key} {_num(c.measured_ms, 1)} ms" for c in s.checks if not c.passed]
    verdict = "[green]pass[/]" if s.passed else "[red]miss:[/] " + escape(", ".join(missed))
    return [_num(s.goodput_rps, 2), _num(s.goodput_tok_s), f"{s.attainment:.0%}" if s.attainment is not None else "–", verdict]


def _row(lv: LevelSummary, open_loop: bool = False) -> list[str]:
    first = [f"{_num(lv.rate_rps, 2)} / {_num(lv.achieved_rate_rps, 2)}", _pair(lv.client_wait_ms, "p50", "p99")] if open_loop else [str(lv.concurrency)]
    return [
        *first,
        f"{lv.ok} / {lv.failed_requests} / {lv.incomplete}",
        _pair(lv.ttft_ms, "p50", "p99"),
        _pair(lv.tpot_ms, "p50", "p99", 2),
        _pair(lv.itl_ms, "p50", "p99", 2),
        _pair(lv.e2e_ms, "p50", "p99", 0),
        _num(lv.decode_tok_s.p50),
        _num(lv.prefill_tok_s.p50),
        _num(lv.output_throughput_tok_s),
        _num(lv.request_throughput_rps, 2),
        _num(lv.window_s, 2),
    ]


def repeats_table(run: RunResult) -> Table | None:
    """Levels measured more than once (``--repeats``): mean ± 95 % confidence interval of output
    tok/s, TTFT and TPOT percentiles (ms), and the unstable flag (metrics/repeats.py); None without any."""
    stats = repeat_stats(run.levels)
    if not stats:
        return None
    t = Table(title="repeats: mean ± 95 % confidence interval (Student's t)", caption=f"unstable: tok/s apart by more than {TOK_S_SPREAD:.0%} or TTFT p50 by more than {TTFT_SPREAD:.0%} of their median")
    for col in ("level", "runs", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", ""):
        t.add_column(col, justify="right")

    def ci(i: Interval | None, digits: int = 1) -> str:
        return "–" if i is None else f"{i.mean:,.{digits}f} ± {i.half_width:,.{digits}f}"

    for r in stats:
        t.add_row(f"{r.rate_rps:g} req/s" if r.rate_rps else f"c={r.concurrency}", str(r.runs), ci(r.output_tok_s), ci(r.ttft_p50_ms), ci(r.ttft_p99_ms),
                  ci(r.tpot_p50_ms, 2), ci(r.tpot_p99_ms, 2), "[red]unstable[/]" if r.unstable else "")  # fmt: skip
    return t


def server_table(run: RunResult) -> Table | None:
    """Server-side figures per level (``/metrics`` deltas and peaks), or None when there were none."""
    rows = [lv for lv in run.levels if lv.server is not None]
    if not rows:
        return None
    gpu = any(lv.gpu for lv in rows)
    table = Table(title=escape(f"server-side ({run.endpoint.engine} /metrics" + (", NVML" if gpu else "") + ", measured phase)"))
    for name in ("level", "prompt tok (server / client)", "gen tok (server / client)", "prefix hit", "queue ms",
                 "peak running / waiting", "peak KV", "preempt", "spec accept / len") + (("GPU W", "J / out tok") if gpu else ()):  # fmt: skip
        table.add_column(name, justify="right")

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{x:.1%}"

    for lv in rows:
        s = lv.server
        spec = f"{pct(s.acceptance_rate)} / {_num(s.mean_acceptance_length, 2)}" if s.spec_drafts else "–"
        table.add_row(
            f"{lv.rate_rps:g}/s" if lv.rate_rps else str(lv.concurrency),
            f"{_num(s.prompt_tokens, 0)} / {lv.phase_prompt_tokens:,}",
            f"{_num(s.generation_tokens, 0)} / {lv.phase_output_tokens:,}",
            pct(s.prefix_cache_hit_rate),
            _num(s.queue_time_mean_ms),
            f"{_num(s.peak_running, 0)} / {_num(s.peak_waiting, 0)}",
            pct(s.peak_kv_usage),
            _num(s.preemptions, 0),
            spec,
            *(() if not gpu else (_num(lv.gpu.mean_power_w, 0), _num(lv.gpu.energy_per_output_token_j, 2)) if lv.gpu else ("–", "–")),
        )
    return table


def suite_table(rows: list, runs: int) -> Table:
    """One row per workload of ``servelab suite``: median (min–max) of per-request decode tok/s,
    TTFT and E2E over the measured runs (a session workload: over every turn of its sessions, its
    prompt column the context of the first and the last turn), and the output tokens the model
    actually produced."""
    table = Table(title=f"single-stream suite ({runs} measured runs per workload after 1 warm-up; median (min–max))")
    for name in ("workload", "prompt tok", "max out", "out tok/request", "decode tok/s", "TTFT ms", "E2E ms", "ok / fail"):
        table.add_column(name, justify="right")

    def spread(d: Distribution, digits: int = 1) -> str:
        return f"{_num(d.p50, digits)} ({_num(d.min, digits)}–{_num(d.max, digits)})" if d.n else "–"

    for w, run, note in rows:
        if run is None or not run.levels:
            table.add_row(escape(w.name), str(w.input_tokens), str(w.max_tokens), note or "–", "", "", "", "", style="yellow")
            continue
        lv = run.levels[0]
        produced = lv.output_tokens / lv.ok if lv.ok else None
        prompt = f"{w.input_tokens:,}"
        if lv.sessions is not None and lv.sessions.turns:  # a session: its context from the first turn to the last
            t = lv.sessions.turns
            prompt = f"{_num(t[0].context_tokens_mean, 0)}→{_num(t[-1].context_tokens_mean, 0)} ({len(t)} turns)"
        table.add_row(
            escape(w.name), prompt, str(w.max_tokens), _num(produced, 0), spread(lv.decode_tok_s), spread(lv.ttft_ms),
            spread(lv.e2e_ms, 0), f"{lv.ok} / {lv.failed_requests + lv.incomplete}", style="red" if lv.failed else None,
        )  # fmt: skip
    return table


def grid_table(rows: list) -> Table:
    """One row per grid cell: pp and tg t/s per request (mean ± std) and in total, llama-bench style."""
    table = Table(title="pp/tg grid (tok/s, mean ± std: per request, and in total per batch)")
    for name in ("test", "c", "prefill tok/req", "pp t/s (req)", "pp t/s (total)", "tg t/s (req)", "tg t/s (total)", "TTFT ms", "failed"):
        table.add_column(name, justify="right")

    def pm(mean: float | None, std: float | None) -> str:
        return "–" if mean is None else f"{mean:,.1f} ± {std:,.1f}"

    for s in rows:
        c = s.cell
        table.add_row(
            f"pp{c.pp} tg{c.tg}" + (f" @ d{c.depth}" if c.depth else ""), str(c.concurrency), _num(s.prefill_tokens, 0),
            pm(s.pp_req_mean, s.pp_req_std), pm(s.pp_total, s.pp_total_std), pm(s.tg_req_mean, s.tg_req_std), pm(s.tg_total, s.tg_total_std),
            _num(s.ttft_ms_mean), str(s.failed), style="red" if s.failed else None,
        )  # fmt: skip
    return table
