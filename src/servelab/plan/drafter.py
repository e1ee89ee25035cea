"""A speculative-decoding drafter as vLLM loads it beside the target model (``--speculative-config``):
its weights and the KV cache it adds. ``servelab plan --speculative METHOD:ARG``:

- ``mtp:K``: the model's own multi-token-prediction layers (``mtp_num_hidden_layers`` /
  ``num_nextn_predict_layers``), loaded in BF16 (the MTP heads of the published NVFP4 / FP8
  exports stay BF16: ../shared/reference/models-notes.md), each adding one attention layer of the
  target's shape to the KV cache (vllm/model_executor/models/qwen3_next_mtp.py,
  deepseek_mtp.py: a decoder layer per MTP module, sharing the target's embedding and head);
- ``eagle3:PATH``: an EAGLE-3 draft model (its config.json), BF16, without its embedding (vLLM
  shares the target's: vllm/model_executor/models/llama_eagle3.py), adding its own layers' KV;
- ``ngram:K``: prompt lookup, no weights and no KV.

K is the number of speculative tokens per step (for ``eagle3``, ``--draft-tokens``, default 3).
A hybrid model also keeps K extra recurrent-state pages per request (``servelab.engines.kv_layout.HybridLayout``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from servelab.errors import ServelabError
from servelab.plan.model_spec import load_model
from servelab.plan.roofline import mtp_pass_bytes
from servelab.values.specs import Layer, ModelSpec

EAGLE3_DEFAULT_TOKENS = 3
BF16_BYTES = 2


@dataclass(frozen=True)
class Drafter:
    """What a drafter adds, for the whole model (not yet divided over tensor-parallel ranks).

    ``layers`` are attention layers in the target's shape (MTP: they join the target's KV-cache
    layout); ``kv_bytes_per_token`` is the KV of layers of another shape (EAGLE-3), bytes per token.
    """

    method: str
    num_tokens: int
    weight_bytes: float
    layers: list[Layer] = field(default_factory=list)
    kv_bytes_per_token: float = 0.0

    def pass_bytes(self, spec: ModelSpec, tokens: int, routing: float = 1.0) -> float:
        """Bytes (whole model) one draft pass over ``tokens`` tokens reads: the MTP layer and the
        shared LM head (:func:`~servelab.plan.roofline.mtp_pass_bytes`), an EAGLE-3 model's
        weights (its own head included), nothing for n-gram."""
        if self.method == "mtp":
            return mtp_pass_bytes(spec, tokens, routing)
        return self.weight_bytes


def parse_drafter(text: str, spec: ModelSpec, kv_dtype_bytes: float, draft_tokens: int = 0) -> Drafter:
    """The drafter ``--speculative`` names (module docstring).

    Raises:
        ServelabError: an unknown method, a K that is not a positive integer, ``mtp`` on a model
            without MTP layers, or an EAGLE-3 path that is not a config.json.
    """
    method, _, arg = text.partition(":")
    method = method.strip().lower()
    if method == "eagle3":
        if not arg:
            raise ServelabError("--speculative eagle3:PATH: give the EAGLE-3 draft model's config.json (or its folder)")
        try:
            draft = load_model(arg)
        except ServelabError as exc:  # load_model names --model; the input here is --speculative
            raise ServelabError(f"--speculative eagle3:{arg}: {str(exc).removeprefix('--model ')}") from None
        weights = (draft.total_params - draft.params["embed"]) * BF16_BYTES
        return Drafter("eagle3", draft_tokens or EAGLE3_DEFAULT_TOKENS, weights, kv_bytes_per_token=draft.kv_bytes_per_token(kv_dtype_bytes))
    if method not in ("mtp", "ngram"):
        raise ServelabError(f"--speculative {text!r}: use mtp:K, eagle3:PATH or ngram:K")
    if not re.fullmatch(r"[1-9][0-9]{0,5}", arg):
        raise ServelabError(f"--speculative {text!r}: K, the speculative tokens per step, must be a positive integer (e.g. {method}:3)")
    if method == "ngram":
        return Drafter("ngram", int(arg), 0.0)
    if not spec.mtp_layers:
        raise ServelabError(f"--speculative {text!r}: {spec.name} has no MTP layers; use eagle3:PATH or ngram:K")
    kind = "mla" if spec.count("mla") else "full"
    return Drafter("mtp", int(arg), spec.params["mtp"] * BF16_BYTES, layers=[Layer(kind, "none")] * spec.mtp_layers)
