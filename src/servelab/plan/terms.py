"""A level's calibration-free terms for ``servelab predict`` (``servelab.plan.predict``, whose module docstring gives the model):
the roofline of its decode step, its steps with prompts and any step of a burst (``Terms.step_at``), the engine's format costs and
the host's (``Engine.eager_host_s``, ``Engine.step_host_s``), from a model, a format, a GPU and the server's limits."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from servelab.engines import plan_engine
from servelab.plan.cohorts import cohorts
from servelab.plan.drafter import Drafter
from servelab.plan.limits import Limits
from servelab.plan.quant import QuantFormat
from servelab.plan.roofline import allreduce_s, compute_dtype, decode_step, expert_flops, prefill, weights_touched
from servelab.values.specs import Hardware, ModelSpec


@dataclass(frozen=True)
class Terms:
    """The calibration-free terms of one level: seconds at 100 % efficiency and no overhead."""

    decode_bytes_s: float  # decode step's weights ÷ bandwidth (MoE experts reached by the padded batch; the KV is kv_s)
    decode_flops_s: float  # decode step's FLOPs (padded batch) ÷ peak
    prefill_s: float  # one prompt's FLOPs ÷ peak (or bytes ÷ bandwidth, when larger)
    running: int
    padded: int
    unpadded_bytes_s: float  # the same step's weights without padding, to name padding as a bottleneck
    unpadded_flops_s: float
    draft_tokens: int = 0  # speculative decoding: draft tokens per step (the step verifies B · (1 + K) tokens)
    draft_passes: int = 0  # a model drafter's forward passes per step (K for MTP and EAGLE, 0 for n-gram), each paying one layer's time
    draft_bytes_s: float = 0.0  # … the weights they read ÷ bandwidth
    allreduce_s: float = 0.0  # tensor parallel: the decode step's all-reduces (not scaled by the efficiencies)
    prefill_allreduce_s: float = 0.0  # … and one prompt's
    mode: str = "stagger"  # how the streams send (servelab.plan.predict's module docstring): ``stagger``, ``burst`` or ``batch``
    prompts_per_step: float = 0.0  # k: prompts prefilled beside a decoding request, per decode step
    mixed_bytes_s: float = 0.0  # a mixed step (the decode batch and its cohort of m prompts, :func:`cohorts`): weights ÷ bandwidth
    mixed_flops_s: float = 0.0  # … its FLOPs ÷ peak
    kv_s: float = 0.0  # the running batch's KV cache and recurrent state ÷ bandwidth (read beside the weights' matrix products)
    decode_eager: bool = False  # the decode step has more tokens than the largest capture size: no CUDA graph
    mixed_eager: bool = False  # … a step that carries prompts (theirs and the other sequences' decode tokens)
    step_at: Callable[[int, int], StepTerms] | None = None  # any step's terms, by its decode and prompt tokens (bursts: servelab.plan.burst)
    input_tokens: int = 0
    max_running: int = 1  # min(max_num_seqs, requests the KV cache holds)
    max_num_batched_tokens: int = 8192
    layers: int = 1  # the model's layers: a step pays the per-layer time for each (a draft pass for one)
    moe_layers: int = 0  # … of them MoE layers: a step pays the MoE layer times for each (Calibration.moe_layer_us, moe_eager_layer_ms)
    eager_extra_s: float = 0.0  # what a step without CUDA graphs adds in this format beyond the calibration's t_eager (Engine.eager_extra_s)
    moe_extra_s: float = 0.0  # what the MoE layers add to every step in this format beyond the calibration's moe_layer_us (Engine.moe_layer_extra_s)
    power_clock: float = 1.0  # a burst's prompts after its first step with prompts compute at this share of the clock (Engine.sustained_clock)
    mixed_share: float = 0.0  # f: the share of the steps that carry prompts, k ÷ f prompts each (:func:`cohorts`)
    mla_layers: int = 0  # MLA attention layers: a step pays Calibration.mla_layer_us for each
    untuned_moe_layers: int = 0  # MoE layers whose fused-MoE kernel runs the engine's default config (Engine.moe_kernel): Calibration.untuned_moe_layer_us each
    eager_launch_s: float = 0.0  # the host's time to launch a step's layers without CUDA graphs (Engine.eager_host_s): a steady state's such step with prompts takes at least this long × host_ramp
    eager_host_s: float = 0.0  # … with its MoE and MLA layers' extras: a burst's such step with prompts takes at least this long
    step_host_s: float = 0.0  # the host's time for an engine step of one sequence (Engine.step_host_s): no step is shorter
    step_host_seq_s: float = 0.0  # … and what each other sequence in the step adds to it
    host_queue: float = 0.0  # one-sequence host steps per running stream a request waits where the host binds (Engine.step_host_s: the host's queue)

    def host_s(self, sequences: int) -> float:
        """The host's time for an engine step of ``sequences`` sequences, s (``Engine.step_host_s``; docs/metrics.md)."""
        return self.step_host_s + self.step_host_seq_s * (sequences - 1)

    def on_host(self, scale: float) -> Terms:
        """These terms on a host whose times are ``scale`` × those of the machines measured (``Calibration.host_scale``, which
        ``servelab calibrate`` fits): its floors under steps without CUDA graphs, its time per step and so its queue, scaled."""
        host = ("eager_launch_s", "eager_host_s", "step_host_s", "step_host_seq_s")
        return replace(self, **{key: getattr(self, key) * scale for key in host}) if scale != 1 else self


@dataclass(frozen=True)
class StepTerms:
    """One engine step's calibration-free terms, s: weights ÷ bandwidth (the experts its tokens reach),
    FLOPs ÷ peak (both over the tokens padded to the capture size above them), the decode sequences'
    KV cache ÷ bandwidth, the TP all-reduces; ``eager``: more tokens than the largest capture size."""

    bytes_s: float
    flops_s: float
    kv_s: float
    allreduce_s: float
    eager: bool


def terms(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, concurrency: int, input_tokens: int, output_tokens: int, limits: Limits,
    tp: int = 1, draft_tokens: int = 0, routing: float = 1.0, mode: str = "stagger", drafter: Drafter | None = None,
) -> Terms:  # fmt: skip
    """The roofline terms of one level (``servelab.plan.predict``'s module docstring); with ``draft_tokens`` K the step verifies
    B · (1 + K) tokens, padded to the capture size above that many tokens; ``routing`` γ: the MoE
    experts B tokens reach (``servelab.plan.roofline``; 1 = uniform); ``drafter``: a model drafter
    whose K passes per step read its weights (its K is the draft tokens when ``draft_tokens`` is 0)."""
    draft_tokens = draft_tokens or (drafter.num_tokens if drafter else 0)
    max_running = max(1, min(limits.max_num_seqs, math.floor(limits.kv_requests) or 1))
    running = min(concurrency, max_running)
    per_seq = 1 + draft_tokens
    padded = next((s for s in sorted(limits.capture_sizes) if s >= running * per_seq), running * per_seq)  # tokens
    context = input_tokens + output_tokens // 2
    engine, dtype = plan_engine(), compute_dtype(fmt)
    heads = engine.mla_heads(spec, hw, tp) if spec.count("mla") else None
    step = decode_step(spec, fmt, hw, batch=running, context=context, tp=tp, tokens_per_seq=per_seq, routing=routing, mla_heads=heads)
    pad = decode_step(spec, fmt, hw, batch=padded, context=context, tp=tp, routing=routing, mla_heads=heads)
    case = engine.moe_kernel(spec, fmt.name, hw, tp)

    def touched(tokens: int) -> float:
        """Weight bytes (per GPU) of a step over ``tokens`` tokens, the experts read again per tile where the kernel does (MoeKernel.tiles)."""
        tile = next(((m, share) for most, m, share in case.tiles if tokens <= most), (0, 0.0)) if case else (0, 0.0)
        return weights_touched(spec, fmt, tokens, routing, tile) / tp

    padded_bytes = touched(padded)  # padding tokens reach experts too
    untuned = bool(case and not case.tuned)
    peak = engine.compute_peak(hw, dtype, bool(spec.moe_layers)) or float("inf")  # the rate the engine's kernels reach
    slow = 1 / case.rate - 1 if case else 0.0  # the routed experts' FLOPs at the MoE kernel's rate (MoeKernel.rate): each counts 1 + slow at the peak

    def busy(flops: float, tokens: int) -> float:
        """``flops`` of a step over ``tokens`` tokens (per GPU), the routed experts' counted at the MoE kernel's rate."""
        return flops + slow * expert_flops(spec, tokens) / tp

    pf = prefill(spec, fmt, hw, tokens=input_tokens, tp=tp)
    bw = hw.bandwidth_gbs * 1e9
    k = (running - 1) / output_tokens
    share, m = cohorts(k, (limits.max_num_batched_tokens - (running - 1) * per_seq) / input_tokens)
    kv_seq = spec.seq_bytes(context, 2.0) / tp / bw  # one sequence's KV cache and recurrent state (read by attention and the recurrent layers) ÷ bandwidth
    mixed_tokens = round((running - 1) * per_seq + m * input_tokens)  # a prompt's step: the prompts and the other sequences' decode tokens
    mixed_bytes = touched(round(running * per_seq + m * input_tokens))  # the whole decode batch's and the prompts'
    largest = max(limits.capture_sizes, default=0)
    unpadded_bytes = touched(running * per_seq)
    passes = draft_tokens if drafter and drafter.method != "ngram" else 0
    draft_bytes = passes * drafter.pass_bytes(spec, running, routing) / tp if passes and drafter else 0.0
    step_flops, prompt_flops = busy(step.flops, running * per_seq), busy(pf.flops, input_tokens)  # the decode batch's and one prompt's, the experts' at their rate
    sizes, per_decode, per_prompt = sorted(limits.capture_sizes), step_flops / (running * per_seq), prompt_flops / input_tokens

    @lru_cache(maxsize=None)
    def step_at(decode: int, prompt: int) -> StepTerms:
        n = decode + prompt
        size = next((x for x in sizes if x >= n), n)
        return StepTerms(touched(size) / bw, (decode * per_decode + prompt * per_prompt) * size / n / peak,
                         decode * kv_seq, allreduce_s(spec, hw, size, tp), n > largest)  # fmt: skip

    return Terms(padded_bytes / bw, busy(pad.flops, padded) / peak, max(prompt_flops / peak, pf.bytes / bw), running, padded, unpadded_bytes / bw,
                 step_flops / peak, draft_tokens, passes, draft_bytes / bw, allreduce_s(spec, hw, padded, tp), allreduce_s(spec, hw, input_tokens, tp),
                 mode, k, mixed_bytes / bw, (step_flops + m * prompt_flops) / peak, running * kv_seq, running * per_seq > largest, mixed_tokens > largest,
                 step_at, input_tokens, max_running, limits.max_num_batched_tokens, len(spec.layers), spec.moe_layers,
                 engine.eager_extra_s(dtype, len(spec.layers)), engine.moe_layer_extra_s(dtype, spec.hidden_size, spec.moe_intermediate_size // tp) * spec.moe_layers,
                 engine.sustained_clock(hw, dtype, bool(spec.moe_layers)), share, spec.count("mla"), spec.moe_layers if untuned else 0,
                 *engine.eager_host_s(spec, fmt.name, hw), *engine.step_host_s(hw))  # fmt: skip
