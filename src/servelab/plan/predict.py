"""``servelab predict``: a closed-loop level's speed before it is measured, from the roofline's bytes
and FLOPs (``servelab.plan.roofline``), the engine's scheduler limits, and efficiencies and times per step
calibrated on real runs.

The model, per GPU of a TP group, at ``c`` streams of P prompt and O output tokens:

- **running** B = min(c, max_num_seqs, requests of P + O tokens the KV cache holds); the rest
  wait on the server (the *slot cap* or *KV capacity*), adding (c − B) ÷ B request durations;
- **decode step** at B sequences and context L = P + O/2:
  t_d = max(weights ÷ (bandwidth · η_bw), FLOPs ÷ (peak · η_c)) + KV ÷ (bandwidth · η_bw) + t₀,
  t₀ = L · t_ℓ for a model of L layers (t_ℓ the calibrated time per layer: a layer's norms, rotary,
  attention set-up and activation kernels and the gaps between them in its CUDA graph; a constant t₀
  fitted on 36- and 40-layer models left the 64-layer Qwen3-32B 6 % fast at one stream, held out, and
  t_ℓ 0.3 % on the 62-layer Gemma-3-27B and 0.6 % on the 80-layer Llama-3.1-70B, validation/RESULTS-predict.md),
  and each of its L_moe MoE layers adds t_moe (``moe_layer_us``: its router and dispatch kernels, 21–27 µs
  in FP8 fitted on three MoE models and two GPUs, of which the format's ``Engine.moe_layer_extra_s``: vLLM's
  FP8 17.3 µs on Qwen3-30B-A3B and 27.7 on Mixtral-8x7B, its fused-MoE op quantizing its activations, the
  longer the wider its hidden size and experts) and, in a step without CUDA graphs, ``moe_eager_layer_ms``:
  the matrix products read the weights touched (MoE: the distinct experts B tokens reach under
  uniform routing) or are compute-bound, and attention then reads the KV cache and recurrent state
  of B sequences; weights and FLOPs over the *padded* batch s = the smallest CUDA-graph capture
  size ≥ B (vLLM runs the captured graph of size s, its padding tokens routed like real ones);
  above the largest size the step runs without a graph and adds t_eager; peak: the datasheet's for
  the format's compute dtype, or the rate the engine's kernels were measured to reach
  (``Engine.compute_peak``: vLLM's online FP8 at 1.5 × the BF16 peak, its MoE experts at 1 ×,
  measured), the routed experts' FLOPs at the rate the engine's MoE kernel reaches against dense matrix products
  (``MoeKernel.rate``, measured); a step without CUDA graphs adds t_eager and, in FP8 on vLLM, 0.4 ms a layer
  (``Engine.eager_extra_s``);
- **the host's time per step** (``Engine.step_host_s``, docs/metrics.md): with asynchronous scheduling the host prepares
  step n + 1 while the GPU runs step n, so no step (decode, or carrying prompts) is shorter than the host's time for it;
  where that time h is at least ``HOST_SHARE`` of the decode step's GPU time (a *host-bound* point), a steady state's request
  also waits in **the host's queue** before its first token: ``Terms.host_queue`` · B · h₁, in the steady state and in a burst (B and its ramp at most 64)
  (h₁ the host's time for a step of one sequence; docs/metrics.md; empirical rules, fitted on the first three kept-back sets,
  validation/host_band.py), and the point carries the host's band (``servelab.plan.band``);
- **prefill** of one prompt alone: t_p = FLOPs ÷ (peak · η_c) (or its bytes, when larger);
- **steady state** (``stagger``, servelab's default; vLLM's chunked prefill mixes prefills into
  decode steps): while a request decodes its O tokens, the other B − 1 streams each prefill once,
  k = (B − 1) ÷ O prompts per decode step. They ride in *mixed steps* (:func:`cohorts`): the streams
  bunch into cohorts of m₀ = k ÷ min(k, ``MIXED_SHARE``) prompts on average (measured on vLLM 0.25,
  H100: 19–35 % of the steps carry prompts from 32 to 256 streams: ``python validation/mixed_steps.py``; under a calibration
  ``servelab calibrate`` measured them on, min(k, the server's share ``Calibration.mixed_share``) where the host does not bind),
  and a step's token budget splits a cohort larger than it: under ``max_num_batched_tokens`` holding
  b = (budget − the other sequences' decode tokens) ÷ P prompts, a cohort of X prompts takes ⌈X ÷ b⌉
  mixed steps (chunked prefill), so with X exponential about m₀ a cohort takes 1 + 1 ÷ (e^(b ÷ m₀) − 1)
  steps, each carrying m = m₀ ÷ that, and a share f = min(1, k ÷ m) of the steps carries prompts (at
  8,192 tokens and 512-token prompts nothing splits; at 2,048, on vLLM 0.25, H100, Qwen3-30B-A3B
  FP8, 26–45 % of the steps carried prompts at 20–42 streams, and the points served 26–37 streams
  within a TPOT objective where 8,192's served 50–114, validation/RESULTS-tune.md: the split cohorts
  return split, which the rule does not count, so it prices the direction, not the size). A mixed step reads the weights once for its decode and
  prompt tokens, taking max(weights ÷ bandwidth, FLOPs ÷ peak) of all of them, plus t_eager when
  its tokens exceed the largest capture size (vLLM 0.25 runs such a batch without CUDA graphs:
  ~80 ms for a 512-token prompt beside a MoE decode batch on H100, ~5 × the decode step), so
  TPOT = t_d + f · (mixed step − decode step);
- **TTFT in the steady state** (vLLM's asynchronous scheduling, on by default in 0.25: the scheduler
  decides step n + 1 while step n runs, vllm/v1/engine/core.py ``step_with_batch_queue``): a request
  that arrives as its stream's previous one ends waits for the step running and the one already
  scheduled (each a mixed step with probability f: 2 · (t_d + f · (mixed step − decode step))), then
  rides a mixed step, TTFT = those two steps + the mixed step + its cohort's other m − 1
  prompts ahead of it in the API server ((m − 1) ÷ 2 · ``ADMIT_S_PER_TOKEN`` · P) + ``API_TTFT_S``
  (HTTP, chat template, tokenization, the first chunk: measured 4–7 ms at one stream); at one
  stream the engine is idle and TTFT = the prompt's step + ``API_TTFT_S``. p99: both waiting steps
  carry prompts. Chat and completions endpoints measured alike (within 4 % tok/s, 10 % TTFT at
  1–256 streams: validation/api-h100/), so no term per output chunk;
- **burst** (``--closed-loop burst``, and vllm bench serve: the requests of a wave arrive
  together): step by step (``servelab.plan.burst``): the wave's prompts prefill in chunks of
  ``max_num_batched_tokens`` after the API server hands them on one by one (the launch spread),
  then the wave decodes at full batch with CUDA graphs; each stream's next request (``BURST_REQUESTS``
  per stream) arrives as its previous one ends; a step with prompts without CUDA graphs takes at least
  the host's time to launch it (``Engine.eager_host_s``; a steady state's, its layers' launches alone where the host binds, ``Terms.eager_launch_s``, and a share ``Calibration.mixed_floor`` of the whole beyond one stream, 0 but where calibrate fits it). TTFT is bimodal: its mean and p99 are the figures
  to compare (``ttft_mean_s``, ``ttft_p99_s``); a burst with speculative decoding is priced as the
  steady state (not step by step); **batch** (``--closed-loop batch``): the same with one request per
  stream, a ``servelab grid`` cell or a llama-benchy batch, whose tg t/s (total) is ``tg_total_tok_s``;
- E2E = TTFT + (O − 1) · TPOT; output tok/s per stream = O ÷ E2E, aggregate = c · O ÷ (E2E + queue wait).

Tensor parallel over ``tp`` GPUs (or nodes): bytes and FLOPs per GPU come from the roofline; each
step adds its all-reduces (:func:`allreduce_s`: two per layer over the interconnect, with an
estimated fixed latency each; not measured against a run yet).

Bottleneck named per point: the slot cap or KV capacity (streams waiting), prefill (the prefill
term of TPOT at least half the decode step; "in steps without CUDA graphs" when t_eager is most of it), no
CUDA graph (a decode batch above the largest capture size, t_eager above half the step), CUDA-graph padding (the padded step ≥ 1.1 × the unpadded one:
FLOPs when compute-bound, and on MoE models the experts the padding tokens reach), per-step
overhead (t₀ above half the step), the TP all-reduce (above half the step), else bandwidth or
compute (the larger term of t_d).

Speculative decoding with K draft tokens at acceptance rate a (accepted ÷ drafted, as vLLM counts
it): the step verifies B · (1 + K) tokens (padded to the capture size above them) and yields
τ = 1 + K · a tokens per sequence (the mean acceptance length), so TPOT = (t_d + t_draft) ÷ τ +
the prefill share. t_draft = a calibrated constant (``draft_overhead_ms``: vLLM 0.25's n-gram drafter
on H100 adds 2–4 ms a step, validation/RESULTS-predict.md) plus, for a model drafter
(``--speculative mtp:K`` or ``eagle3:PATH``), K passes that each read the drafter's weights
(``servelab.plan.roofline.mtp_pass_bytes``: the MTP layer and the shared LM head) ÷ (bandwidth · η_bw)
and pay one layer's time t_ℓ each. Checked on the DGX Spark report's Qwen3.5-122B-A10B MTP-2 table (validation/RESULTS-spark.md).

Assumptions (stated with every prediction): uniform MoE routing (or a routing γ, ``servelab.plan.roofline``); the engine's chunked prefill
interleaving prefills with decode (vLLM V1) and its asynchronous scheduling; cohorts of prompts as :func:`cohorts` prices them;
no prefix-cache hits; acceptance that does not fall with the batch; the all-reduce latency of each
hardware profile (an estimate). Calibration (:class:`Calibration`): η_bw and η_c on a grid, t_ℓ and
t_eager by least squares (every row is linear in them) on the relative errors of measured TPOT
and aggregate tok/s of real steady-state runs (``servelab.plan.fit``); bursts and TTFT are held out. Shipped calibrations and their measured errors: data/calibration.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servelab.plan.burst import simulate
from servelab.plan.calibration import Calibration
from servelab.plan.cohorts import HOST_SHARE, host_ramp, host_weight, recohorted, waved
from servelab.plan.roofline import spec_tokens_per_step
from servelab.plan.terms import StepTerms, Terms

PADDING_NAMED = 1.1  # padding is named the bottleneck when it makes the decode step this much longer
PREFILL_NAMED = 0.5  # prefill is named when the prompts add this share of the decode step to TPOT, or more
API_TTFT_S = 0.005  # TTFT's share outside the engine steps (HTTP, chat template, tokenization, the first chunk): 4–7 ms at one stream on vLLM 0.25 (validation/RESULTS-predict.md)
ADMIT_S_PER_TOKEN = 2.0e-6  # the API server's time per request, per prompt token, one request after another (chat endpoint): a 256-stream burst of 1,024-token prompts ended 550 ms later than without it (validation/waves-h100/burst-*: TTFT p99 6.42–6.45 s measured, 5.88 s simulated), 2.1 ms a request
ASYNC_WAIT_STEPS = 2  # steady state: the steps a new request waits for before the one that carries its prompt (module docstring; vLLM's asynchronous scheduling)
QUEUE_STREAMS = 64  # the host's queue counts the running streams up to this many, the most it was measured at (above: held there, an extrapolation)
HOST_NAMED = "the host's time per step"  # the bottleneck where a step's host time (Engine.step_host_s) exceeds its GPU work
NO_GRAPH = ("prefill, in steps without CUDA graphs", "no CUDA graph (batch above the largest capture size)")  # the bottlenecks a larger capture size lifts
BURST_REQUESTS = {"burst": 2, "batch": 1}  # requests per stream: vllm bench serve --max-concurrency C --num-prompts 2C (issue 38's truth); a grid cell, llama-benchy's batch


@dataclass(frozen=True)
class Point:
    """One predicted level. Times in s, rates in tok/s."""

    concurrency: int
    running: int
    padded_batch: int
    decode_step_s: float
    prefill_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    queue_s: float
    per_stream_tok_s: float
    aggregate_tok_s: float
    bottleneck: str
    ttft_mean_s: float  # bursts: TTFT is bimodal (waves), so compare its mean and p99; the steady state: the p50 (``ttft_s``)
    ttft_p99_s: float
    tg_total_tok_s: float | None = None  # bursts and batches run step by step: Σ (O − 1) ÷ (last token − first first-token), servelab grid's tg t/s (total)
    host_share: float = 0.0  # the host's time per step ÷ the decode step's GPU time, at the running batch (``HOST_SHARE``)
    host_queue_s: float = 0.0  # the wait in the host's queue, in its TTFT (s; steady state and bursts; docs/metrics.md "host's queue")

    @property
    def host_bound(self) -> bool:
        """The host's time per step is at least ``HOST_SHARE`` of the decode step's GPU time (docs/metrics.md, "waves")."""
        return self.host_share >= HOST_SHARE


def step_times(t: Terms, bw, cmp, per_step: float):
    """TPOT and TTFT of a level without the calibrated times per step (module docstring), and what
    one second of each adds to them: ``(tpot, ttft, decode step, (the per-layer time on tpot, on
    ttft), (eager time on tpot, on ttft), (a fixed time per step on tpot, on ttft))``, s. The prompts prefilled beside the decode: a share f
    (``Terms.mixed_share``, :func:`cohorts`) of the steps carries k ÷ f prompts, and such a mixed step reads its weights once, taking its
    bytes ÷ bandwidth or FLOPs ÷ peak, whichever is larger, instead of the decode step's. The format's
    known costs (a step without CUDA graphs: ``Terms.eager_extra_s``; its MoE layers in every step:
    ``Terms.moe_extra_s``) are in tpot and ttft already.
    ``bw``, ``cmp``: η_bw, η_c (floats, or arrays for the fit's grid); ``per_step``: tokens per
    step per sequence (speculative decoding)."""
    share = t.mixed_share
    core = np.maximum(t.decode_bytes_s / bw, t.decode_flops_s / cmp)
    mixed = np.maximum(t.mixed_bytes_s / bw, t.mixed_flops_s / cmp)
    decode = core + (t.kv_s + t.draft_bytes_s) / bw + t.allreduce_s
    riding = share * np.maximum(0.0, mixed - core) + t.prompts_per_step * t.prefill_allreduce_s
    wait = ASYNC_WAIT_STEPS if t.running > 1 else 0  # an idle engine schedules a request at once
    prompts = t.prompts_per_step / share if share else 1.0
    admit = (prompts - 1) / 2 * ADMIT_S_PER_TOKEN * t.input_tokens if t.running > 1 else 0.0  # behind the others of its cohort in the API server
    ttft = API_TTFT_S + admit + wait * (decode + riding) + mixed + (t.kv_s + t.draft_bytes_s) / bw + t.allreduce_s + prompts * t.prefill_allreduce_s
    eager_tpot = t.decode_eager / per_step + share * (t.mixed_eager and not t.decode_eager)
    eager_ttft = wait * (t.decode_eager + share * (t.mixed_eager and not t.decode_eager)) + t.mixed_eager
    layers = t.layers + t.draft_passes  # a step's: the model's, and one for each draft pass
    tpot = decode / per_step + riding + t.eager_extra_s * eager_tpot + t.moe_extra_s / per_step
    ttft = ttft + t.eager_extra_s * eager_ttft + t.moe_extra_s * (wait + 1)
    return tpot, ttft, decode, (layers / per_step, wait * layers + t.layers), (eager_tpot, eager_ttft), (1 / per_step, wait + 1)


def fitted_extras(t: Terms, cal: Calibration) -> tuple[float, float]:
    """The calibration's share of what a step pays beyond its roofline terms and its layers' t_ℓ, s: its
    MoE layers' time (every step: ``moe_layer_us`` each, and ``untuned_moe_layer_us`` each where the engine's
    fused-MoE kernel runs its default config), its MLA layers' (``mla_layer_us`` each), and what a step
    without CUDA graphs adds (t_eager, ``moe_eager_layer_ms`` for each MoE layer, ``mla_eager_layer_ms`` for each MLA layer). The format's own
    (``Terms.moe_extra_s``, ``Terms.eager_extra_s``) come on top."""
    every = cal.moe_layer_us * t.moe_layers + cal.untuned_moe_layer_us * t.untuned_moe_layers + cal.mla_layer_us * t.mla_layers
    return every / 1e6, (cal.eager_step_ms + cal.moe_eager_layer_ms * t.moe_layers + cal.mla_eager_layer_ms * t.mla_layers) / 1e3


def predict(t: Terms, cal: Calibration, *, concurrency: int, output_tokens: int, acceptance: float = 0.0) -> Point:
    """A level's prediction from its terms and a calibration; with draft tokens, ``acceptance`` the
    acceptance rate, accepted ÷ drafted tokens (module docstring)."""
    t = t.on_host(cal.host_scale)  # this machine's host (servelab calibrate)
    if t.mode in BURST_REQUESTS and t.step_at and not t.draft_tokens:
        return _burst(t, cal, concurrency=concurrency, output_tokens=output_tokens)
    layer, draft = cal.layer_overhead_us / 1e6, (cal.draft_overhead_ms / 1e3 if t.draft_tokens else 0.0)
    fitted_moe, fitted_eager = fitted_extras(t, cal)  # step_times adds the format's own to tpot and ttft
    moe, eager = fitted_moe + t.moe_extra_s, fitted_eager + t.eager_extra_s  # all told
    overhead = layer * (t.layers + t.draft_passes) + moe + draft  # a step's: its layers', its MoE layers', each draft pass's, the drafting time
    per_step = spec_tokens_per_step(acceptance, t.draft_tokens)
    tpot0, ttft0, decode, (o_tpot, o_ttft), (e_tpot, e_ttft), (s_tpot, s_ttft) = step_times(t, cal.bw_efficiency, cal.compute_efficiency, per_step)
    t_d, host = float(decode) + overhead + eager * t.decode_eager, t.host_s(t.running)  # the decode step (the waves change only the mixed one)
    host_share = host / t_d
    weight = host_weight(t, host_share)
    shifted = recohorted(t, cal.mixed_share) if cal.mixed_share and not host_ramp(host_share) else waved(t, weight)
    if shifted is not t:  # this server's cohorts as calibrate measured them where the host does not bind; where it binds, waves
        t = shifted
        tpot0, ttft0, _, (o_tpot, o_ttft), (e_tpot, e_ttft), (s_tpot, s_ttft) = step_times(t, cal.bw_efficiency, cal.compute_efficiency, per_step)
    tpot = float(tpot0 + layer * o_tpot + (draft + fitted_moe) * s_tpot + fitted_eager * e_tpot)
    ttft = float(ttft0 + layer * o_ttft + (draft + fitted_moe) * s_ttft + fitted_eager * e_ttft)
    share = t.mixed_share
    mixed = t_d + (tpot - t_d / per_step) / share if share else ttft - API_TTFT_S  # a step that carries prompts, as priced (one stream: its prompt alone)
    steady = cal.mixed_floor * t.eager_host_s if t.running > 1 else 0.0  # a step with prompts without graphs: a share of the host's floor, its MoE and MLA layers' launches included
    floor = max(host, host_ramp(host_share) * t.eager_launch_s, steady) if t.mixed_eager else host  # and where the host binds, at least its layers' launches
    lift, lift_mixed = max(0.0, host - t_d), max(0.0, floor - mixed)  # each kind of step no faster than the host's time for it
    tpot += (1 - share) * lift / per_step + share * lift_mixed
    ttft += (s_ttft - 1) * ((1 - share) * lift + share * lift_mixed) + lift_mixed  # the steps it waits for, then its own
    queue_s = weight * t.host_queue * min(t.running, QUEUE_STREAMS) * t.step_host_s  # where the host binds, a request waits in its queue: its turn behind the running streams
    ttft += queue_s
    t_d += lift
    t_p = t.prefill_s / cal.compute_efficiency + t.prefill_allreduce_s
    b, o = t.running, output_tokens
    e2e = ttft + (o - 1) * tpot
    queue = (concurrency - b) / b * e2e if concurrency > b else 0.0
    t_mem, t_cmp = t.decode_bytes_s / cal.bw_efficiency, t.decode_flops_s / cal.compute_efficiency
    riding = tpot - t_d / per_step
    if concurrency > b:
        bottleneck = "slot cap / KV capacity"
    elif riding >= PREFILL_NAMED * t_d / per_step:
        eager_riding = eager * (e_tpot - t.decode_eager / per_step)  # the prompt steps' t_eager, not the decode step's
        bottleneck = NO_GRAPH[0] if eager_riding > riding / 2 else "prefill"
    elif t.decode_eager and eager > 0.5 * t_d:
        bottleneck = NO_GRAPH[1]
    elif max(t_mem, t_cmp) >= PADDING_NAMED * max(t.unpadded_bytes_s / cal.bw_efficiency, t.unpadded_flops_s / cal.compute_efficiency):
        bottleneck = "CUDA-graph padding"
    elif t.allreduce_s > 0.5 * t_d:
        bottleneck = "TP all-reduce"
    elif lift > 0:
        bottleneck = HOST_NAMED
    elif overhead > 0.5 * t_d:
        bottleneck = "per-step overhead"
    else:
        bottleneck = "bandwidth" if t_mem + t.kv_s / cal.bw_efficiency >= t_cmp else "compute"
    p99 = ttft + ASYNC_WAIT_STEPS * (1 - share) * max(0.0, riding) / share if t.running > 1 and share else ttft  # both waiting steps carry prompts
    return Point(concurrency, b, t.padded, t_d, t_p, ttft, tpot, e2e, queue, o / e2e, concurrency * o / (e2e + queue), bottleneck, ttft, p99,
                 host_share=host_share, host_queue_s=queue_s)


def _burst(t: Terms, cal: Calibration, *, concurrency: int, output_tokens: int) -> Point:
    """A burst or batch level (``BURST_REQUESTS`` per stream) from the step-by-step scheduler of
    ``servelab.plan.burst``, each step's time the roofline with the calibration: max(weights ÷
    (bandwidth · η_bw), FLOPs ÷ (peak · η_c · clock)) + KV ÷ (bandwidth · η_bw) + all-reduces + L · t_ℓ (+ t_eager
    above the largest capture size, and a step with prompts then at least the host's time to launch it, ``Terms.eager_host_s``), clock ``Terms.power_clock`` for a step with prompts right after another
    (the board's power limit lowers the clock through a wave's prefill; measured with nvidia-smi:
    validation/clocks-h100/, validation/cold-h200/qwen3-8b-clocks.json), else 1: the wave's first step
    keeps the calibration's rate, an empirical rule (docs/metrics.md, "burst"). Aggregate tok/s: every
    output token ÷ first send to last token."""
    fitted_moe, fitted_eager = fitted_extras(t, cal)
    eager = fitted_eager + t.eager_extra_s
    t0 = cal.layer_overhead_us / 1e6 * t.layers + fitted_moe + t.moe_extra_s

    def gpu_s(x: StepTerms, clock: float = 1.0) -> float:
        """A step's GPU time without t_eager, s, its FLOPs at ``clock`` × the calibrated rate."""
        return max(x.bytes_s / cal.bw_efficiency, x.flops_s / cal.compute_efficiency / clock) + x.kv_s / cal.bw_efficiency + x.allreduce_s + t0

    def step_s(decode: int, prompt: int, sustained: bool) -> float:
        x = t.step_at(decode, prompt)
        gpu = gpu_s(x, t.power_clock if sustained and prompt else 1.0)  # a wave's prefill, step after step: at the power-capped clock
        host = t.host_s(decode + math.ceil(prompt / t.input_tokens))  # no step faster than the host's time for its sequences,
        return max(gpu + eager, t.eager_host_s if prompt else 0.0, host) if x.eager else max(gpu, host)  # a prompt's without graphs than its launches

    def gpu_decode_s(b: int) -> float:
        """The GPU time of a decode step of ``b`` sequences, s (with t_eager above the largest capture size)."""
        x = t.step_at(b, 0)
        return gpu_s(x) + (eager if x.eager else 0.0)

    x, qb = t.step_at(t.running, 0), min(t.running, QUEUE_STREAMS)  # the queue as at 64 streams above them, the most it was measured at
    gpu_decode, host = gpu_decode_s(t.running), t.host_s(t.running)
    queue_s = host_ramp(t.host_s(qb) / gpu_decode_s(qb)) * t.host_queue * qb * t.step_host_s if t.running > 1 else 0.0  # every request of a host-bound burst waits behind the others
    requests = BURST_REQUESTS[t.mode]
    run = simulate(step_s, streams=concurrency, requests_per_stream=requests, input_tokens=t.input_tokens, output_tokens=output_tokens,
                   max_num_seqs=t.max_running, max_num_batched_tokens=t.max_num_batched_tokens, admit_s=ADMIT_S_PER_TOKEN * t.input_tokens, wait_s=queue_s)  # fmt: skip
    e2e, tpot, mean = API_TTFT_S + float(np.mean(run.e2e_s)), run.tpot_s(output_tokens), run.ttft("mean")
    decode, prefill = step_s(t.running, 0, False), step_s(0, t.input_tokens, False)
    if concurrency > t.running:
        bottleneck = "slot cap / KV capacity"
    elif mean - queue_s >= PREFILL_NAMED * (e2e - mean):  # the host's queue is the host's, not the prefill's
        bottleneck = "prefill (a wave's prompts, chunked under max_num_batched_tokens" + ("; at the power-capped clock)" if t.power_clock < 1 else ")")
    elif x.eager and eager > 0.5 * decode:
        bottleneck = NO_GRAPH[1]
    elif decode <= t.host_s(t.running):
        bottleneck = HOST_NAMED
    elif t0 > 0.5 * decode:
        bottleneck = "per-step overhead"
    else:
        bottleneck = "bandwidth" if (x.bytes_s + x.kv_s) / cal.bw_efficiency >= x.flops_s / cal.compute_efficiency else "compute"
    return Point(concurrency, t.running, t.padded, decode, prefill, API_TTFT_S + run.ttft("p50"), tpot, e2e, 0.0, output_tokens / e2e,
                 concurrency * requests * output_tokens / run.span_s, bottleneck, API_TTFT_S + mean, API_TTFT_S + run.ttft("p99"),
                 run.tg_total_tok_s(output_tokens), host / gpu_decode, queue_s)  # fmt: skip
