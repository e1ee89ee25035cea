"""vLLM's host (the API server and the engine core's CPU work): what it costs a step and a request, on the machines measured
(vLLM 0.25 on the lent Hopper machines' Xeon hosts). Used through ``servelab.engines.vllm.VLLM.eager_host_s`` and
``step_host_s``; defined in docs/metrics.md ("host's floor", "host's time per step", "host's queue")."""

# The host's time to launch a step without CUDA graphs (vLLM 0.25 on the lent Hopper machines' Xeon hosts), per layer by kind:
# such a step takes at least this long (docs/metrics.md, "host's floor"). Fitted (least absolute error) on a lone 522-token prompt
# (without graphs) against a 512-token one (inside a graph) on 25 servers of 19 models: 143 ms of error in all against 340 without
# it; held out on the third to sixth kept-back sets' 14 servers, 133 against 190 (validation/eager_host.py). FP8 MoE layers 0: the
# calibration's eager times, fitted on FP8 MoE runs, exceed it. Bursts' steps with prompts only: in the steady state the prompts'
# cohorts merge as the load runs, which these times misprice (validation/RESULTS-predict.md, "The host's floor").
EAGER_HOST_LAYER_S = 0.7e-3
EAGER_HOST_MOE_S = {"bf16": 1.45e-3, "fp16": 1.45e-3, "fp8": 0.0, "fp8-block": 0.0}  # format → a MoE layer's routed experts (FP16 assumed as BF16); others: not measured
EAGER_HOST_MLA_S = 0.5e-3
# The host's time per engine step (scheduling, inputs, sampling, outputs), which asynchronous scheduling overlaps with the GPU's:
# a step takes the longer of the two (docs/metrics.md, "host's time per step"). STEP_HOST_S fitted on the ~1 B-active models'
# single stream (OLMoE-1B-7B, gpt-oss-120b cut; checked blind on Llama-3.2-1B: 1.90 ms measured and priced); STEP_HOST_SEQ_S a
# sequence beyond the first, fitted on Llama-3.2-1B's bursts at 16 and 64 streams after its set was opened (not held out; above
# 64 sequences an extrapolation): validation/RESULTS-predict.md, "The host's time per step, and a fourth kept-back set".
STEP_HOST_S = 1.9e-3
STEP_HOST_SEQ_S = 22e-6
# The host's queue (docs/metrics.md, "waves"): where the host binds (servelab.plan.cohorts.host_weight: the host's time per step
# at least half the decode step's GPU time, and the prompts in waves), a steady state's request waits before its first token
# about HOST_QUEUE host steps for each running stream (up to servelab.plan.predict.QUEUE_STREAMS): vLLM's API server answered
# ~1 B models' headers ~90 ms late at 64 streams, and the engine core took their prompts in waves. Fitted (the median of
# measured − predicted TTFT ÷ the queue's host steps) on the first three kept-back sets' 11 such levels (OLMoE-1B-7B,
# Granite-3.1-3B-A800M), before the fifth set was measured (1.23 then; 1.28 with the ramp): validation/host_band.py.
HOST_QUEUE = 1.28
# … and a burst's request (servelab.plan.predict's bursts: the host's time per step at least half the decode step's GPU time at the
# burst's running batch, ramped as above) about BURST_QUEUE host steps of one sequence (STEP_HOST_S) for each running stream, behind
# the burst's other requests before the engine (vllm bench serve's mean TTFT of ~1 B models' 64-stream bursts: 200–400 ms, every
# request alike, where the engine's steps price 80–250). Fitted (the median, as above) on the first three kept-back sets' four such
# bursts beyond one stream (OLMoE-1B-7B, Granite-3.1-3B-A800M at 16 and 64 streams: 1.08, 0.98, 3.57, 1.34) after the fifth set
# was opened, before the sixth was measured (validation/host_band.py); with the host's time at the batch in place of one sequence's
# (as the steady state's) the fitted bursts' 16 and 64 streams disagreed by twice as much.
BURST_QUEUE = 1.21
