"""vLLM's host (the API server and the engine core's CPU work): what it costs a step and a request, on the machines measured
(vLLM 0.25 on the lent Hopper machines' Xeon hosts). Used through ``servelab.engines.vllm.VLLM.eager_host_s`` and
``step_host_s``; defined in docs/metrics.md ("host's floor", "host's time per step", "host's queue")."""

# The host's time to launch a step without CUDA graphs (vLLM 0.25 on the lent Hopper machines' Xeon hosts), per layer by kind:
# such a step takes at least this long (docs/metrics.md, "host's floor"). Fitted (least absolute error) on a lone 522-token prompt
# (without graphs) against a 512-token one (inside a graph) on 25 servers of 19 models: 143 ms of error in all against 340 without
# it; held out on the third to fifteenth kept-back sets' 29 servers, 318 against 385 (the seventh's, a faster host, 20 against 7; the eighth's 10.5 against 11.4; the ninth's 13.3 against 18.6;
# the tenth's 16.8 against 15.7; the eleventh's Aya-Expanse-8B 8.2 against 11.3, its dots.llm1 a void truth left out; the twelfth's
# AFMoE 19.6 against 3.8, FlexOlmo 33.7 against 33.7; the thirteenth's Laguna 18.5 against 25.8, Minitron-8B 13.6 against 17.0; the fourteenth's A.X K1 cut 1.7 against 1.7;
# the fifteenth's Moonlight 29.5 against 49.4;
# validation/eager_host.py). FP8 MoE layers 0: the
# calibration's eager times, fitted on FP8 MoE runs, exceed it. A host-bound steady state's steps with prompts without graphs pay the
# layers' floor alone (servelab.plan.predict): with the MoE and MLA extras MLA models' single stream went 4.4 → 17.3 % off, and where
# the host does not bind the cohorts' prompts share the step (validation/RESULTS-predict.md, "The host's floor", "One host's queue").
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
# The host's queue (docs/metrics.md, "host's queue"): where the host binds (servelab.plan.cohorts.host_weight: the host's time per step
# at least half the decode step's GPU time, ramped), a request waits before the engine about HOST_QUEUE host steps of one sequence
# (STEP_HOST_S) for each running stream (up to servelab.plan.predict.QUEUE_STREAMS), in a burst (vllm bench serve's mean TTFT of ~1 B
# models' 64-stream bursts: 200–400 ms, every request alike, where the engine's steps price 80–250) and in the steady state (vLLM's
# API server answered ~1 B models' headers ~90 ms late at 64 streams). Fitted (the median of measured − predicted TTFT ÷ the queue's
# host steps) on the first three kept-back sets' four host-bound bursts beyond one stream (OLMoE-1B-7B, Granite-3.1-3B-A800M at 16 and
# 64 streams: 1.08, 0.98, 3.57, 1.34) after the fifth set was opened, before the sixth was measured (validation/host_band.py). The
# steady state's, once its steps with prompts pay the host's floor (EAGER_HOST_LAYER_S), measured 0.9–1.4 on the dense ~1 B models of
# the fourth to sixth sets (one level 0.43) and 1.1–3.3 on the small MoE models (1.96 on the first three sets' 11 levels): one constant,
# the bursts', for both (validation/RESULTS-predict.md, "One host's queue").
HOST_QUEUE = 1.21
