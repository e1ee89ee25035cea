"""TensorRT-LLM's ``trtllm-serve``: what servelab knows so far (launch facts only).

It may build its engine at start, hence a 1800 s readiness timeout on ``/health``; TP and EP
sizes are ``--tp_size`` / ``--ep_size``. Discovery, metrics and boot-log formats are not known
yet: a running trtllm-serve is measured as a generic OpenAI-compatible server.
"""

from __future__ import annotations

from servelab.engines.base import Engine, Flags


class TrtLlm(Engine):
    """``trtllm-serve`` as a recipe's engine."""

    name = "trtllm"
    title = "TensorRT-LLM"
    launchers = (("trtllm-serve",),)  # TensorRT-LLM docs, "trtllm-serve"
    ready_path = "/health"
    ready_timeout_s = 1800.0
    default_port = 8000
    flags = Flags(tp=("--tp_size",), ep=("--ep_size",), ep_takes_size=True)


ENGINE = TrtLlm()
