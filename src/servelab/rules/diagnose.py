"""Rules that turn a run's numbers into findings, each with the numbers that triggered it.

Each rule reads the run document (summaries, server stats, load spec) and, for the CUDA-graph
rule, the server's capture sizes when its boot log was read (or vLLM's defaults otherwise, said so).
Definitions of the inputs: docs/metrics.md.
"""

from __future__ import annotations

import math

from servelab import engines
from servelab.engines.bootfacts import BootFacts
from servelab.engines.cudagraph import padding, prompt_step_graph
from servelab.metrics.repeats import TOK_S_SPREAD, TTFT_SPREAD, repeat_stats
from servelab.metrics.summary import LevelSummary
from servelab.metrics.waves import WaveStats, bunched
from servelab.plan.cohorts import cohorts
from servelab.store.results import Finding, RunResult, TraceInfo

PREFIX_HIT_TOLERANCE = 0.01  # cold runs: more than 1% of prompt tokens from cache is contamination
ACCEPTANCE_DROP = 0.8  # acceptance at the highest level below 80% of the lowest level's
KV_FULL = 0.95  # peak KV-cache usage at which the cache counts as full
CLIENT_BUSY = 0.9  # servelab's process busy this share of the measured phase: its timestamps wait for its event loop
SEND_LAG_MS = 10.0  # a replay whose send lag p99 is above this did not keep the trace's schedule
SHORT_WINDOW = 3.0  # a --duration window under this many request durations (E2E p50) is not yet a steady state
CLOCK_CAPPED = 0.9  # a mean SM clock under this share of the maximum ...
POWER_AT_LIMIT = 0.95  # ... while the peak power reached this share of the limit: the GPU was power-capped
OVERRESERVED_GIB = 1.0  # CUDA-graph memory reserved beyond what the graphs took, and beyond their own size, that is named


ANOMALY_TEXT = {
    "after_done": "sent data after [DONE] (ignored)",
    "extra_choices": "sent choices beside the first of index 0 (ignored)",
    "usage_above_max_tokens": "reported more completion tokens than max_tokens",
    "usage_below_chunks": "reported fewer completion tokens than token chunks received",
    "usage_above_text": "reported more completion tokens than the text received can hold",
    "cached_above_prompt": "reported more cached prompt tokens than prompt tokens (not believed)",
}


def _replay(trace: TraceInfo, lv: LevelSummary) -> list[Finding]:
    """A replayed trace: the client behind its schedule (send lag p99 above ``SEND_LAG_MS``), its
    requests longer than the server's context (replayed all the same), and the measured prefix-cache
    hit rate beside the trace's own share of repeated blocks."""
    out = []
    lag = lv.client_wait_ms
    if lag.p99 is not None and lag.p99 > SEND_LAG_MS:
        out.append(Finding(kind="client_behind_schedule", severity="warning",
                           message=f"the replay's sends were late: send lag p50 {lag.p50:.1f} ms, p99 {lag.p99:.1f} ms (above {SEND_LAG_MS:g} ms): the client could not keep the "
                                   "trace's schedule, so the server saw a smoother load than the trace; spread the streams (--client-procs) or slow the trace (--time-scale)",
                           evidence={"send_lag_p50_ms": lag.p50, "send_lag_p99_ms": lag.p99, "threshold_ms": SEND_LAG_MS}))  # fmt: skip
    if trace.over_context:
        out.append(Finding(kind="trace_over_context", severity="warning",
                           message=f"{trace.over_context} of {trace.requests} trace requests need more than the server's {trace.context_tokens}-token context "
                                   "(prompt + output): they were sent at their times as the trace has them, and what the server did with them is in "
                                   "this level's failed requests and short outputs; your users would see the same on this server, or raise its "
                                   "context (vLLM --max-model-len, llama.cpp -c)",
                           evidence={"over_context": trace.over_context, "requests": trace.requests, "context_tokens": trace.context_tokens}))  # fmt: skip
    measured = lv.server.prefix_cache_hit_rate if lv.server is not None else None
    if measured is None and lv.prompt_tokens:
        measured = lv.client_cached_prompt_tokens / lv.prompt_tokens
    if trace.prefix_share is not None and measured is not None:
        out.append(Finding(kind="trace_prefix_reuse", severity="info",
                           message=f"the server served {measured:.1%} of prompt tokens from its prefix cache; the trace itself repeats {trace.prefix_share:.1%} "
                                   "(an unbounded cache's share): the gap is what the server's cache evicted or did not match",
                           evidence={"measured_hit_rate": measured, "trace_prefix_share": trace.prefix_share}))  # fmt: skip
    return out


def _anomalies(c: int, lv: LevelSummary) -> Finding:
    """What the server sent that servelab did not believe (records.Anomaly), with the requests affected."""
    said = "; ".join(f"{n} {ANOMALY_TEXT.get(k, k)}" for k, n in sorted(lv.stream_anomalies.items()))
    usage = any(k.startswith("usage_") for k in lv.stream_anomalies)
    return Finding(kind="stream_anomalies", severity="warning",
                   message=f"c={c}: the server's stream contradicted itself in measured requests: {said}"
                           + ("; their output tokens were counted from the stream received, not from usage" if usage else ""),
                   evidence={"concurrency": c, "requests": lv.stream_anomalies})  # fmt: skip


def diagnose(run: RunResult, capture_sizes: list[int] | None = None) -> list[Finding]:
    """All findings for a run, in rule order (see the module docstring)."""
    out: list[Finding] = []
    cold = run.load.prefix_cache == "cold" and not run.load.reuse_expected  # sessions and shared trace blocks reuse on purpose
    for lv in run.levels:
        at = f"{lv.rate_rps:g} req/s" if lv.rate_rps else f"c={lv.concurrency}"  # how a message names the level
        out += _level_findings(run, lv, at, cold)
        if lv.server is not None:
            out += _server_findings(run, lv, at, cold)
    out += _acceptance_trend(run) + _padding(run, capture_sizes) + _graphless_prompts(run, capture_sizes) + _prompt_truncation(run) \
        + _unstable_repeats(run) + _untuned_moe(run) + _model_code(run) + _graph_memory(run)  # fmt: skip
    return out


def _level_findings(run: RunResult, lv: LevelSummary, at: str, cold: bool) -> list[Finding]:
    """A level's findings from its records, its client and its GPU (the level named ``at``)."""
    out: list[Finding] = []
    c, s = lv.concurrency, lv.server
    if run.load.trace is not None:
        out.extend(_replay(run.load.trace, lv))
    if lv.sessions is not None and (early := {k: n for k, n in lv.sessions.ended.items() if k in ("context_limit", "failed")}):
        out.append(Finding(kind="sessions_ended_early", severity="warning" if "failed" in early else "info",
                           message=f"{at}: of {lv.sessions.started} sessions, "
                                   + ", ".join(f"{n} ended {'at the context limit (the next turn would not fit max_model_len; nothing was sent)' if k == 'context_limit' else 'on a failed turn'}" for k, n in early.items()),
                           evidence={"concurrency": c, "ended": lv.sessions.ended}))  # fmt: skip
    if lv.jit_kernels:
        out.append(Finding(kind="jit_compile", severity="warning",
                           message=f"{at}: the server compiled {', '.join(lv.jit_kernels)} while this level ran (its log's JIT warning): the compile "
                                   "stalled the window, so this level is not a measurement; run it again (the kernel is cached now) or warm that batch shape first",
                           evidence={"concurrency": c, "kernels": lv.jit_kernels}))  # fmt: skip
    if lv.failed_requests:
        out.append(Finding(kind="failed_requests", severity="error",
                           message=f"{at}: {lv.failed_requests} of {lv.ok + lv.failed_requests + lv.incomplete} measured requests failed ({', '.join(f'{k} ×{n}' for k, n in lv.error_kinds.items())})",
                           evidence={"concurrency": c, "error_kinds": lv.error_kinds}))  # fmt: skip
    if lv.incomplete:
        out.append(Finding(kind="incomplete_requests", severity="info",
                           message=f"{at}: {lv.incomplete} requests were still in flight at the end ({lv.window_s and round(lv.window_s, 2)} s window): counted as incomplete, their tokens in the window count toward throughput",
                           evidence={"concurrency": c, "incomplete": lv.incomplete}))  # fmt: skip
    if run.load.duration_s and lv.window_s and lv.e2e_ms.p50 and lv.window_s < SHORT_WINDOW * lv.e2e_ms.p50 / 1e3:
        e2e_s = lv.e2e_ms.p50 / 1e3
        out.append(Finding(kind="short_window", severity="warning",
                           message=f"{at}: the {lv.window_s:.0f} s window is {lv.window_s / e2e_s:.1f} × a request's duration (E2E p50 {e2e_s:.1f} s): its latencies "
                                   f"are those of the {lv.ok} requests that finished, the ones sent early, and its throughput is not yet a steady state; "
                                   f"measure at least {SHORT_WINDOW:.0f} × ({SHORT_WINDOW * e2e_s:.0f} s) with --duration, or use --requests",
                           evidence={"concurrency": c, "window_s": lv.window_s, "e2e_p50_s": e2e_s, "ok": lv.ok}))  # fmt: skip
    if lv.short_outputs:
        out.append(Finding(kind="short_outputs", severity="warning",
                           message=f"{at}: {lv.short_outputs} of {lv.ok} successful requests returned fewer tokens than max_tokens although ignore_eos was set: the server did not honour it, so outputs were shorter than asked (throughput and TPOT cover what came)",
                           evidence={"concurrency": c, "short_outputs": lv.short_outputs, "ok": lv.ok, "max_tokens": run.load.output_tokens}))  # fmt: skip
    if lv.stream_anomalies:
        out.append(_anomalies(c, lv))
    if cold and (s is None or s.prefix_cache_hit_rate is None) and lv.prompt_tokens \
            and lv.client_cached_prompt_tokens / lv.prompt_tokens > PREFIX_HIT_TOLERANCE:  # fmt: skip
        share = lv.client_cached_prompt_tokens / lv.prompt_tokens
        out.append(Finding(kind="prefix_cache_contamination", severity="warning",
                           message=f"{at}: the server's usage says {share:.1%} of prompt tokens came from its prefix cache in a cold run (no /metrics to confirm): TTFT and throughput are inflated",
                           evidence={"concurrency": c, "cached_prompt_tokens": lv.client_cached_prompt_tokens, "prompt_tokens": lv.prompt_tokens, "source": "usage"}))  # fmt: skip
    if lv.waves and lv.waves.synchronized:
        out.append(_waves(lv.concurrency, lv.waves, run.load.closed_loop))
    elif lv.waves and run.load.closed_loop == "stagger" and lv.waves.prompts_per_step:
        expected = _expected_cohort(lv.concurrency, run.load.output_tokens)
        if bunched(lv.waves.prompts_per_step, expected):
            out.append(_bunched(lv.concurrency, lv.waves, expected))
    if lv.client_cpu is not None and lv.client_cpu >= CLIENT_BUSY:
        out.append(Finding(kind="unstable_measurement", severity="warning",
                           message=f"{at}: servelab's own process was busy {lv.client_cpu:.0%} of the measured phase: chunks waited for its event loop, so "
                                   "TTFT and ITL include client delay; spread the streams over processes (--client-procs, --ray) or lower the load",
                           evidence={"concurrency": c, "client_cpu": lv.client_cpu, "threshold": CLIENT_BUSY}))  # fmt: skip
    if (pct := lv.pct_of_ceiling) is not None and pct > 100 and run.ceiling is not None:
        ce = run.ceiling
        out.append(Finding(kind="ceiling_exceeded", severity="warning",
                           message=f"{at}: decode ran at {pct:.0f}% of the ceiling ({lv.decode_tok_s.p50:,.1f} of {lv.decode_ceiling_tok_s:,.1f} tok/s per stream): "
                                   f"a ceiling is exceeded only when one of its assumptions did not hold — weights in {ce.quant}, {ce.hardware}'s datasheet "
                                   f"bandwidth, {ce.context_tokens:,} tokens of context, one token per step (no speculative decoding), and for a MoE model "
                                   "every expert equally likely (a skewed router, or random dummy weights, touches fewer experts per step and reads less)",
                           evidence={"concurrency": c, "pct_of_ceiling": pct, "decode_tok_s_p50": lv.decode_tok_s.p50,
                                     "ceiling_tok_s": lv.decode_ceiling_tok_s, **ce.model_dump()}))  # fmt: skip
    if (g := lv.gpu) and g.max_sm_clock_mhz and g.power_limit_w and g.mean_sm_clock_mhz < CLOCK_CAPPED * g.max_sm_clock_mhz \
            and g.peak_power_w >= POWER_AT_LIMIT * g.power_limit_w:  # fmt: skip
        share = g.mean_sm_clock_mhz / g.max_sm_clock_mhz
        out.append(Finding(kind="power_capped", severity="info",
                           message=f"{at}: the GPU ran at {share:.0%} of its maximum SM clock ({g.mean_sm_clock_mhz:,.0f} of {g.max_sm_clock_mhz:,.0f} MHz) "
                                   f"with power up to {g.peak_power_w:,.0f} of its {g.power_limit_w:,.0f} W limit: power-capped, so its compute-bound steps "
                                   f"(prefill) took up to {1 / share:.2f} × as long as at full clock, and levels below the cap were not slowed so",
                           evidence={"concurrency": c, "mean_sm_clock_mhz": g.mean_sm_clock_mhz, "max_sm_clock_mhz": g.max_sm_clock_mhz,
                                     "peak_power_w": g.peak_power_w, "power_limit_w": g.power_limit_w}))  # fmt: skip
    return out


def _server_findings(run: RunResult, lv: LevelSummary, at: str, cold: bool) -> list[Finding]:
    """A level's findings from the server's counters (``lv.server``, the level named ``at``)."""
    out: list[Finding] = []
    c, s = lv.concurrency, lv.server
    if cold and (s.prefix_cache_hit_rate or 0) > PREFIX_HIT_TOLERANCE:
        out.append(Finding(kind="prefix_cache_contamination", severity="warning",
                           message=f"{at}: {s.prefix_cache_hit_rate:.1%} of prompt tokens came from the prefix cache in a cold run: TTFT and throughput are inflated",
                           evidence={"concurrency": c, "prefix_cache_hit_rate": s.prefix_cache_hit_rate, "cached_prompt_tokens": s.cached_prompt_tokens}))  # fmt: skip
    if (s.peak_waiting or 0) > 0 or (s.queue_time_mean_ms or 0) > 0.1 * (lv.ttft_ms.mean or float("inf")):
        cause, why = _queue_cause(run, lv)
        out.append(Finding(kind="server_queueing", severity="warning",
                           message=f"{at}: requests waited in the server's queue (peak {s.peak_waiting or 0:.0f} waiting, {s.peak_running or 0:.0f} running"
                                   + (f", mean queue time {s.queue_time_mean_ms:.0f} ms of {lv.ttft_ms.mean:.0f} ms TTFT" if s.queue_time_mean_ms else "")
                                   + f"), so TTFT includes queueing; the cause: {why}",
                           evidence={"concurrency": c, "cause": cause, "peak_waiting": s.peak_waiting, "peak_running": s.peak_running,
                                     "queue_time_mean_ms": s.queue_time_mean_ms, "ttft_mean_ms": lv.ttft_ms.mean}))  # fmt: skip
    if s.preemptions:
        out.append(Finding(kind="preemptions", severity="warning",
                           message=f"{at}: the server preempted {s.preemptions:.0f} requests (KV cache full): their work was recomputed",
                           evidence={"concurrency": c, "preemptions": s.preemptions, "peak_kv_usage": s.peak_kv_usage}))  # fmt: skip
    if s.rejected:
        out.append(Finding(kind="server_metrics_rejected", severity="warning",
                           message=f"{at}: the server's /metrics gave impossible values, left out: "
                                   + ", ".join(f"{k} = {v}" for k, v in s.rejected.items()),
                           evidence={"concurrency": c, "rejected": s.rejected}))  # fmt: skip
    client_out = lv.phase_output_tokens if not lv.incomplete else None
    if s.generation_tokens is not None and client_out is not None and s.generation_tokens != client_out:
        out.append(Finding(kind="token_count_mismatch", severity="warning",
                           message=f"{at}: the server generated {s.generation_tokens:.0f} tokens, the client counted {client_out}",
                           evidence={"concurrency": c, "server_generation_tokens": s.generation_tokens, "client_output_tokens": client_out}))  # fmt: skip
    if s.prompt_tokens is not None and not lv.incomplete and s.prompt_tokens != lv.phase_prompt_tokens:
        out.append(Finding(kind="prompt_count_mismatch", severity="warning",
                           message=f"{at}: the server processed {s.prompt_tokens:.0f} prompt tokens, the client sent {lv.phase_prompt_tokens}",
                           evidence={"concurrency": c, "server_prompt_tokens": s.prompt_tokens, "client_prompt_tokens": lv.phase_prompt_tokens}))  # fmt: skip
    return out


def _graph_memory(run: RunResult) -> list[Finding]:
    """The server reserved more memory for CUDA graphs before sizing its KV cache than they took
    (``BootFacts.graph_estimate_gib`` against ``graph_pool_gib``), by more than ``OVERRESERVED_GIB``
    and more than the graphs' own size: that much KV cache was given up."""
    boot = run.boot
    if boot is None or boot.graph_estimate_gib is None or boot.graph_pool_gib is None:
        return []
    extra = boot.graph_estimate_gib - boot.graph_pool_gib
    if extra <= max(OVERRESERVED_GIB, boot.graph_pool_gib):
        return []
    engine = engines.get(boot.engine or run.endpoint.engine)
    kv = f" (it has {boot.kv_cache_gib:.2f} GiB)" if boot.kv_cache_gib else ""
    return [Finding(kind="graph_memory_overreserved", severity="warning",
                    message=f"{engine.title} reserved {boot.graph_estimate_gib:.2f} GiB for CUDA graphs that took {boot.graph_pool_gib:.2f} GiB: its KV cache{kv} "
                            f"is {extra:.1f} GiB smaller than this GPU's memory allows, so fewer requests fit at once"
                            + (f"; {engine.graph_estimate}" if engine.graph_estimate else ""),
                    evidence={"graph_estimate_gib": boot.graph_estimate_gib, "graph_pool_gib": boot.graph_pool_gib, "kv_cache_gib": boot.kv_cache_gib})]  # fmt: skip


def _graphless_prompts(run: RunResult, capture_sizes: list[int] | None) -> list[Finding]:
    """Steady-state levels whose steps that carry a prompt (its mean prompt tokens beside the other
    streams' decode tokens) are above the largest capture size (the boot log's, else the engine's
    defaults, said so): the engine runs them without CUDA graphs, and its ``largest_capture_flag``
    raises it (``prompt_step_graph``)."""
    engine = engines.get(run.endpoint.engine)
    sizes = capture_sizes or engine.capture_sizes()
    if not (engine.largest_capture_flag and sizes) or run.load.closed_loop != "stagger":
        return []
    largest, steps = max(sizes), {}
    for lv in run.levels:
        if lv.rate_rps is None and lv.ok and lv.prompt_tokens and (tokens := round(lv.prompt_tokens / lv.ok) + lv.concurrency - 1) > largest:
            steps[lv.concurrency] = tokens
    if not steps:
        return []
    top = max(steps)
    prompt = steps[top] - top + 1
    want = prompt_step_graph(prompt, top)
    if want is None or want <= largest:  # a prompt too long for a graph worth capturing, or the graphs are that large already
        return []
    return [Finding(kind="prompt_steps_without_graphs", severity="info",
                    message=f"c={', '.join(map(str, steps))}: a step that carries a prompt ({prompt:,} tokens beside the other streams' decode tokens, "
                            f"up to {max(steps.values()):,}) is above the largest CUDA graph ({largest}"
                            + ("" if capture_sizes else f", {engine.title}'s default") + f"), so {engine.title} runs it without graphs, its kernels "
                            f"launched one by one by the host; compare servelab predict … --vary max-capture-size={largest},{want}, and on the server "
                            f"{engine.largest_capture_flag} {want}" + (f" ({engine.larger_graphs})" if engine.larger_graphs else ""),
                    evidence={"concurrency_levels": list(steps), "step_tokens": list(steps.values()), "largest_capture_size": largest, "capture_sizes_assumed": capture_sizes is None, "suggested": want})]  # fmt: skip


def _untuned_moe(run: RunResult) -> list[Finding]:
    """The server's boot log says it ran its MoE layers with its default kernel config, having no tuned
    one for these experts on this GPU (``BootFacts.moe_config_tuned``)."""
    boot = run.boot
    if boot is None or boot.moe_config_tuned is not False:
        return []
    engine = engines.get(boot.engine or run.endpoint.engine)
    return [Finding(kind="untuned_moe_kernels", severity="info",
                    message=f"{engine.title} ran the MoE layers with its default kernel config, having no tuned one for these experts on this GPU "
                            f"({boot.moe_config} not found)" + (f"; {engine.untuned_moe}" if engine.untuned_moe else ""),
                    evidence={"moe_config": boot.moe_config})]  # fmt: skip


def void_routing(boot: BootFacts) -> bool:
    """Whether the server simulated its MoE routing (``BootFacts.moe_routing_simulation``) while the model's router ran outside the
    engine's MoE layer (``moe_external_routing``): vLLM 0.25 then routes every token to the first top-k experts (``Engine.void_routing``),
    so the run's MoE throughput is not the model's."""
    return boot.moe_routing_simulation is not None and bool(boot.moe_external_routing)


def _model_code(run: RunResult) -> list[Finding]:
    """The server's boot log says it ran another library's model code (``BootFacts.modeling_backend``), and whether its simulated
    MoE routing was void there (:func:`void_routing`)."""
    boot = run.boot
    if boot is None or boot.modeling_backend is None:
        return []
    engine = engines.get(boot.engine or run.endpoint.engine)
    out = [Finding(kind="transformers_backend", severity="warning",
                   message=f"{engine.title} ran the model on its {boot.modeling_backend} modeling backend, not its own model code"
                           + (f": {engine.foreign_model_code}" if engine.foreign_model_code else ""),
                   evidence={"modeling_backend": boot.modeling_backend})]  # fmt: skip
    if void_routing(boot):
        out.append(Finding(kind="void_routing_simulation", severity="error",
                           message=f"{engine.title} simulated MoE routing ({boot.moe_routing_simulation}) while the model's router ran outside its MoE layer: "
                                   "this run's MoE throughput is not the model's" + (f"; {engine.void_routing}" if engine.void_routing else ""),
                           evidence={"moe_routing_simulation": boot.moe_routing_simulation, "modeling_backend": boot.modeling_backend}))  # fmt: skip
    return out


def _unstable_repeats(run: RunResult) -> list[Finding]:
    """Repeats of a level (``--repeats``) further apart than the repeatability thresholds (metrics/repeats.py)."""
    out = []
    for r in repeat_stats(run.levels):
        if r.unstable:
            where = f"{r.rate_rps:g} req/s" if r.rate_rps else f"c={r.concurrency}"
            out.append(Finding(kind="unstable_measurement", severity="warning",
                               message=f"{where}: its {r.runs} repeats disagree — output tok/s {r.tok_s[0]:,.1f}–{r.tok_s[1]:,.1f} ({r.tok_s_spread:.0%} of their median), "
                                       f"TTFT p50 {r.ttft_ms[0]:,.1f}–{r.ttft_ms[1]:,.1f} ms ({r.ttft_spread:.0%}); above {TOK_S_SPREAD:.0%} / {TTFT_SPREAD:.0%} one run is not the answer: "
                                       "measure longer (--duration) or more repeats",
                               evidence={"concurrency": r.concurrency, "rate_rps": r.rate_rps, "runs": r.runs, "tok_s_spread": r.tok_s_spread, "ttft_spread": r.ttft_spread}))  # fmt: skip
    return out


def _queue_cause(run: RunResult, lv: LevelSummary) -> tuple[str, str]:
    """(cause, in words) of a level's server-side queueing, from the server's counters and the boot
    log's limits, in this order: KV capacity (preemptions, or the KV cache ≥ ``KV_FULL`` used), the
    slot cap (running requests reached max_num_seqs / the slots), the prefill token budget (the
    level's prompts need more prefill tokens than max_num_batched_tokens admits in one step, so
    requests arriving together start over several steps: vLLM's scheduler, ``vllm/v1/core/sched/scheduler.py``,
    stops admitting waiting requests once a step's token budget is spent)."""
    s, boot, c = lv.server, run.boot, lv.concurrency
    assert s is not None
    cap = (boot.max_num_seqs or boot.slots) if boot else None
    budget = boot.max_num_batched_tokens if boot else None
    served = lv.ok + lv.failed_requests
    prompt = round(lv.prompt_tokens / lv.ok) if lv.ok else run.load.input_tokens
    if s.preemptions or (s.peak_kv_usage or 0) >= KV_FULL:
        return "kv_capacity", f"the KV cache was full ({(s.peak_kv_usage or 0):.0%} used at peak, {s.preemptions or 0:.0f} preemptions): fewer requests fit than were offered"
    if cap and (s.peak_running or 0) >= cap:
        return "slot_cap", f"the slot cap: {cap} requests ran at once (max_num_seqs / slots), the rest waited for a free slot"
    if budget and served and c * prompt > budget:
        per_step = max(1, budget // prompt)
        return "prefill_budget", (f"the prefill token budget: {c} prompts of {prompt:,} tokens need {c * prompt:,} tokens of prefill, "
                                  f"max_num_batched_tokens {budget:,} admits about {per_step} per step, so requests that arrive together "
                                  "wait for later steps (a larger --max-num-batched-tokens shortens that wait and lengthens the decode stalls)")  # fmt: skip
    if boot is None:
        return "unknown", "not known without the server's boot log (pass --server-log): max_num_seqs / slots, the prefill token budget or KV capacity"
    return "unknown", "none of max_num_seqs / slots, the prefill token budget or KV capacity explains it from the counters scraped"


def _waves(c: int, w: WaveStats, closed_loop: str) -> Finding:
    """The ``synchronized_waves`` finding of a level; its advice by how the streams were started: a
    burst's streams leave together by design (``--closed-loop stagger`` ramps them apart), a staggered
    level's fell into step on their own (requests that prefill in one engine step end together and come
    back together: validation/RESULTS-predict.md, "Cohorts"), which only an open loop avoids."""
    by_wave = " / ".join(f"{v:,.0f}" if v is not None else "–" for v in w.ttft_p50_ms_by_wave)
    spread = f" ({w.ttft_spread:.1f}× apart)" if w.ttft_spread else ""
    fix = ("--closed-loop stagger measures the steady state" if closed_loop == "burst" else
           "the streams were ramped up apart and fell into step on their own (requests that prefill in one engine step end together and come "
           "back together), so its tok/s too depends on how far they bunched; compare --repeats, or measure an open-loop --rate, whose "
           "arrivals do not wait on completions")  # fmt: skip
    return Finding(kind="synchronized_waves", severity="warning",
                   message=f"c={c}: the streams ran in {w.waves} synchronized waves (each wave's sends within {w.send_spread:.0%} of a request's duration; "
                           f"{w.densest_share:.0%} of the sends in the densest 10% of the window); TTFT p50 by wave {by_wave} ms{spread}: "
                           f"TTFT here depends on how the waves line up, not only on the server; {fix}",
                   evidence={"concurrency": c, **w.model_dump(), "ttft_spread": w.ttft_spread})  # fmt: skip


def _expected_cohort(c: int, output_tokens: int) -> float:
    """The prompts a step carries on average where nothing bunches them, by predict's rule (``servelab.plan.cohorts.cohorts``:
    k = (c − 1) ÷ O prompts a decode step, in cohorts of k ÷ min(k, MIXED_SHARE), which is 1 at least)."""
    return cohorts((c - 1) / max(output_tokens, 1), math.inf)[1]


def _bunched(c: int, w: WaveStats, expected: float) -> Finding:
    """The ``bunched_prompts`` finding: a staggered level whose prompts came out of the engine ``BUNCHED`` or more to a step and
    at least twice ``expected`` (predict's cohort at this load; metrics/waves.py, docs/metrics.md "prompts per step"), though its
    sends were spread."""
    thirds = f" ({' → '.join(f'{x:g}' for x in w.prompts_per_step_by_third)} over the level's thirds)" if len(w.prompts_per_step_by_third) == 3 else ""
    return Finding(kind="bunched_prompts", severity="warning",
                   message=f"c={c}: its prompts came out of the engine {w.prompts_per_step:g} prompts a step{thirds}, where {expected:.1f} would ride "
                           "together unbunched, though its streams were ramped apart: they bunched into cohorts that ride one step each, so TTFT "
                           "waits for a cohort's step and tok/s "
                           "depends on how far they bunched, which grows as the load runs (a short window's figure is not the settled one: measure "
                           "minutes, or an open-loop --rate); slow steps that carry prompts do this (steps without CUDA graphs: finding "
                           "prompt_steps_without_graphs), and so does a host that takes half of each step or more, graphs or not (~1 B "
                           "models on vLLM: servelab predict prices such levels in waves, docs/metrics.md \"waves\")",
                   evidence={"concurrency": c, "prompts_per_step": w.prompts_per_step, "by_third": w.prompts_per_step_by_third, "expected": round(expected, 2)})  # fmt: skip


def _acceptance_trend(run: RunResult) -> list[Finding]:
    rates = [(lv.concurrency, lv.server.acceptance_rate) for lv in run.levels if lv.server and lv.server.acceptance_rate is not None]
    if len(rates) < 2:
        return []
    (c0, a0), (c1, a1) = min(rates), max(rates)
    if a0 and a1 < ACCEPTANCE_DROP * a0:
        return [Finding(kind="acceptance_collapse", severity="warning",
                        message=f"speculative acceptance falls from {a0:.0%} at c={c0} to {a1:.0%} at c={c1}: drafting costs more than it saves at high load",
                        evidence={"acceptance_by_concurrency": dict(rates)})]  # fmt: skip
    return []


def _padding(run: RunResult, capture_sizes: list[int] | None) -> list[Finding]:
    engine = engines.get(run.endpoint.engine)
    defaults = engine.capture_sizes()
    if defaults is None:
        return []
    assumed = capture_sizes is None
    sizes = capture_sizes or defaults
    out = []
    for row in padding(sizes, [lv.concurrency for lv in run.levels if lv.concurrency >= 1]):  # a rate or a trace's level has no fixed batch
        if row.waste > 0:
            out.append(Finding(kind="cudagraph_padding", severity="info",
                               message=f"c={row.concurrency}: decode batches of {row.tokens} are padded to the CUDA graph of {row.graph_size} ({row.waste:.0%} wasted)"
                                       + (f" — assuming {engine.title}'s default capture sizes" if assumed else ""),
                               evidence={"concurrency": row.concurrency, "graph_size": row.graph_size, "waste": row.waste, "capture_sizes_assumed": assumed}))  # fmt: skip
    return out


def _prompt_truncation(run: RunResult) -> list[Finding]:
    check = run.prompt_check
    if check and check.mean_deviation_tokens < -1:
        return [Finding(kind="prompt_truncated", severity="warning",
                        message=f"the server counted {-check.mean_deviation_tokens:.1f} fewer prompt tokens than sent on average: prompts may be truncated",
                        evidence=check.model_dump())]  # fmt: skip
    return []
