"""The engine's scheduler limits a prediction works under: max_num_seqs, max_num_batched_tokens, the
CUDA-graph capture sizes (the plan engine's defaults for the hardware where not given) and the requests
the KV cache holds (``servelab plan``'s memory)."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.engines import plan_engine
from servelab.errors import ServelabError
from servelab.plan.memory import plan_memory
from servelab.plan.quant import QuantFormat
from servelab.values.specs import Hardware, ModelSpec


@dataclass(frozen=True)
class Limits:
    """The engine's scheduler limits for the prediction (vLLM's names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    capture_sizes: list[int]
    kv_requests: float  # requests of P + O tokens the KV cache holds (servelab plan)


def limits_for(
    spec: ModelSpec, fmt: QuantFormat, hw: Hardware, *, tp: int, input_tokens: int, output_tokens: int,
    max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None, capture_sizes: list[int] | None = None, draft_tokens: int = 0,
    max_capture_size: int | None = None, kv_dtype_bytes: float = 2.0, gpu_memory_utilization: float | None = None,
) -> Limits:  # fmt: skip
    """The plan engine's limits (its defaults for the hardware where not given, its default
    capture sizes for them and ``draft_tokens``, up to ``max_capture_size`` tokens where given) and the
    requests of P + O tokens ``servelab plan`` fits in the KV cache (of ``kv_dtype_bytes`` per
    element, in ``gpu_memory_utilization`` of the memory: ``servelab.plan.memory.plan_memory``).

    Raises:
        ServelabError: the model does not fit (no KV cache left, or not one request).
    """
    engine = plan_engine()
    mbt_default, seqs_default = engine.batch_defaults(hw)
    seqs, mbt = max_num_seqs or seqs_default, max_num_batched_tokens or mbt_default
    mem = plan_memory(spec, fmt, hw, tp=tp, max_model_len=input_tokens + output_tokens, max_num_seqs=seqs, max_num_batched_tokens=mbt,
                      kv_dtype_bytes=kv_dtype_bytes, gpu_memory_utilization=gpu_memory_utilization)  # fmt: skip
    if not mem.fits:
        raise ServelabError(f"{spec.name} in {fmt.name} does not fit {hw.name} at TP {tp} ({'; '.join(mem.notes) or 'no KV cache left'}): "
                            "nothing to predict; `servelab plan` shows the memory, try another --quant or --tp")  # fmt: skip
    kv = mem.max_concurrency
    return Limits(max_num_seqs=seqs, max_num_batched_tokens=mbt, capture_sizes=capture_sizes or engine.capture_sizes(seqs, mbt, draft_tokens, largest=max_capture_size or engine.model_capture_size(spec)),
                  kv_requests=kv)  # fmt: skip
