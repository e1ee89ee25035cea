"""Weights as the checkpoint stores them: the weight format and the modules left in BF16, read from
the checkpoint's own ``quantization_config`` (config.json) or ``hf_quant_config.json`` (ModelOpt).

The base format comes from ``quant_method`` (and ``quant_algo`` / ``weight_block_size`` /
``config_groups``), the names vLLM loads them under (``vllm/model_executor/layers/quantization/``):

| quant_method | format |
|---|---|
| ``fp8`` | ``fp8-block`` with ``weight_block_size``, else ``fp8`` |
| ``modelopt`` (quant_algo ``FP8`` / ``NVFP4``) | ``fp8`` / ``nvfp4`` |
| ``mxfp4`` | ``mxfp4`` |
| ``gptq``, ``awq`` (bits 4) | ``gptq-int4`` / ``gptq-int4-g32`` / ``awq-int4`` by ``group_size`` |
| ``compressed-tensors`` | by the weights of its first config group: 4-bit float ``nvfp4``, 8-bit float ``fp8``, 4-bit int ``gptq-int4`` |

The exclusion list (``ignore``, ``modules_to_not_convert``, ``exclude_modules``) is matched as the
loaders do: ``re:`` entries as regular expressions (compressed-tensors), entries with ``*`` as
shell patterns (ModelOpt), other entries as substrings of the module name (transformers'
``modules_to_not_convert``). Each parameter kind of :class:`~servelab.plan.model_spec.ModelSpec`
is tested through one module name per layer in Hugging Face's naming (``model.layers.{i}.self_attn.q_proj``,
``….mlp.experts.0.gate_proj`` …); the share of layers whose module matches stays BF16. Embeddings,
lm_head, norms and routers stay BF16 as in every published non-GGUF checkpoint.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ValidationError, field_validator

from servelab.errors import ServelabError, first_problem
from servelab.guards.jsonfile import loads
from servelab.plan.quant import LINEAR_KINDS, QuantFormat, get_format
from servelab.values.specs import ModelSpec
from servelab.guards.files import read_bytes

# one module per parameter kind, layer index {i}, in each family's Hugging Face naming
_MODULES = {
    "attn": "model.layers.{i}.self_attn.q_proj",
    "recurrent": "model.layers.{i}.linear_attn.in_proj_qkvz",
    "mlp": "model.layers.{i}.mlp.gate_proj",
    "experts": "model.layers.{i}.mlp.experts.0.gate_proj",
    "shared": "model.layers.{i}.mlp.shared_expert.gate_proj",
}
_NEMOTRON_H = {  # backbone.layers.{i}.mixer.* (transformers' NemotronH)
    "attn": "backbone.layers.{i}.mixer.q_proj",
    "recurrent": "backbone.layers.{i}.mixer.in_proj",
    "mlp": "backbone.layers.{i}.mixer.up_proj",
    "experts": "backbone.layers.{i}.mixer.experts.0.up_proj",
    "shared": "backbone.layers.{i}.mixer.shared_experts.up_proj",
}
_APPLIES = {  # the layers that hold a kind
    "attn": lambda layer: layer.kind in ("full", "sliding", "mla"),
    "recurrent": lambda layer: layer.kind in ("linear", "mamba"),
    "mlp": lambda layer: layer.ffn == "dense",
    "experts": lambda layer: layer.ffn == "moe",
    "shared": lambda layer: layer.ffn == "moe",
}
_DEEPSEEK = {**_MODULES, "attn": "model.layers.{i}.self_attn.q_a_proj", "shared": "model.layers.{i}.mlp.shared_experts.gate_proj"}


def read_quant_config(config_path: Path) -> dict | None:
    """The checkpoint's quantization config beside (or inside) a config.json: its
    ``quantization_config``, else a ModelOpt ``hf_quant_config.json`` in the same folder; None if neither.

    Both files are read through ``servelab.guards.jsonfile`` (size and nesting bounded).

    Raises:
        ServelabError: config.json or hf_quant_config.json cannot be read, or is not valid JSON (or
            too large or deep).
    """
    cfg = loads(read_bytes(config_path, "--checkpoint-config"), str(config_path), "give the checkpoint's config.json")
    if not isinstance(cfg, dict):
        return None
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    qc = cfg.get("quantization_config") or text_cfg.get("quantization_config")
    if isinstance(qc, dict):
        return qc
    sidecar = config_path.parent / "hf_quant_config.json"
    if sidecar.is_file():
        doc = loads(read_bytes(sidecar, "--checkpoint-config"), str(sidecar), "fix it or pass --quant")
        quant = doc.get("quantization", doc) if isinstance(doc, dict) else None
        return {"quant_method": "modelopt", **quant} if isinstance(quant, dict) else None
    return None


class _Weights(BaseModel):
    num_bits: int | None = None
    type: str | None = None


class _Group(BaseModel):
    weights: _Weights | None = None


class QuantConfig(BaseModel):
    """The fields of a checkpoint's quantization config servelab reads (others are ignored)."""

    quant_method: str = ""
    quant_algo: str = ""
    weight_block_size: list[int] | None = None
    bits: int = 4
    group_size: int = 128
    config_groups: dict[str, _Group] | None = None
    ignore: list[str] = []
    modules_to_not_convert: list[str] = []
    exclude_modules: list[str] = []

    @field_validator("ignore", "modules_to_not_convert", "exclude_modules", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        return [] if value is None else [value] if isinstance(value, str) else value

    @field_validator("quant_method", "quant_algo", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        return "" if value is None else value


def checkpoint_format(spec: ModelSpec, raw: dict) -> QuantFormat:
    """The format of the checkpoint's weights (module docstring), with its BF16 exclusions applied.

    Raises:
        ServelabError: a malformed config, or a quant_method or algorithm servelab has no format
            for (pass ``--quant``).
    """
    try:
        qc = QuantConfig.model_validate(raw)
    except ValidationError as exc:
        raise ServelabError(f"the checkpoint's quantization_config: {first_problem(exc, 'the whole')}; fix it or pass --quant") from None
    base = get_format(_base_name(qc), spec)
    patterns = [*qc.ignore, *qc.modules_to_not_convert, *qc.exclude_modules]
    names = _NEMOTRON_H if spec.model_type == "nemotron_h" else _DEEPSEEK if spec.count("mla") else _MODULES
    kept = {}
    for kind in LINEAR_KINDS:
        where = [i for i, layer in enumerate(spec.layers) if _APPLIES[kind](layer)]
        hits = sum(1 for i in where if _excluded(names[kind].format(i=i), patterns)) if kind in base.quantized else 0
        if hits:
            kept[kind] = hits / len(where)
    excluded = ", ".join(f"{k} {v:.0%}" for k, v in kept.items())
    return QuantFormat(base.name, base.bits, base.quantized, f"{base.source}; from the checkpoint's quantization config"
                       + (f" (BF16: {excluded})" if excluded else ""), kept=kept)  # fmt: skip


def _base_name(qc: QuantConfig) -> str:
    method, algo = qc.quant_method.lower(), qc.quant_algo.upper()
    if method == "fp8":
        return "fp8-block" if qc.weight_block_size else "fp8"
    if method == "modelopt" and algo in ("FP8", "NVFP4"):
        return algo.lower()
    if method == "mxfp4":
        return "mxfp4"
    if method in ("gptq", "awq") and qc.bits == 4:
        return f"{method}-int4" + ("-g32" if method == "gptq" and qc.group_size == 32 else "")
    if method == "compressed-tensors":
        weights = next(iter((qc.config_groups or {}).values()), _Group()).weights or _Weights()
        named = {(4, "float"): "nvfp4", (8, "float"): "fp8", (4, "int"): "gptq-int4"}.get((weights.num_bits, weights.type))
        if named:
            return named
    named = f"quant_method {method!r}" + (f", quant_algo {algo!r}" if algo else "")  # repr: a name from a file stays on one line
    raise ServelabError(f"the checkpoint's quantization_config ({named}) has no servelab format; pass --quant")


def _excluded(module: str, patterns: list[str]) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.search(p[3:], module):
                return True
        elif "*" in p:
            if fnmatch.fnmatchcase(module, p) or fnmatch.fnmatchcase(module, p + ".*"):
                return True
        elif p in module:
            return True
    return False


def weight_format(quant: str | None, spec: ModelSpec, checkpoint_config: Path | None = None) -> QuantFormat:
    """The weight format to plan: the quantization config of ``checkpoint_config``
    (``--checkpoint-config``: a config.json, or a checkpoint directory holding one) if given; else
    ``quant`` (``--quant``), planned as the catalog's published checkpoint of that format where
    there is one (its exclusions: nvidia's Qwen3.5 NVFP4 exports keep attention, Gated DeltaNet,
    shared experts and MTP in BF16), else the format on every linear layer; else, for a model read
    from a config.json (a user's file or the Hugging Face cache's copy, ``spec.config_path``), the
    checkpoint's own quantization config (:func:`read_quant_config`, :func:`checkpoint_format`);
    else a catalog model's own (``spec.native_quant``: its published checkpoint, e.g. gpt-oss's
    MXFP4 experts, DeepSeek-V3's block FP8); else BF16.

    Raises:
        ServelabError: an unknown ``quant``, an unreadable quantization config, or a
            ``checkpoint_config`` without one.
    """
    if checkpoint_config is not None:
        path = checkpoint_config / "config.json" if checkpoint_config.is_dir() else checkpoint_config
        try:
            qc = read_quant_config(path)
        except OSError as exc:
            raise ServelabError(f"--checkpoint-config {checkpoint_config}: not a readable config.json ({type(exc).__name__}); give the checkpoint's config.json or its directory") from None
        except ServelabError as exc:
            raise ServelabError(f"--checkpoint-config: {exc}") from None
        if not isinstance(qc, dict):
            raise ServelabError(f"--checkpoint-config {checkpoint_config}: no quantization_config (nor hf_quant_config.json beside it); give a quantized checkpoint's config.json, or --quant")
        fmt = checkpoint_format(spec, qc)
        return replace(fmt, source=f"{fmt.source} ({checkpoint_config})")
    if quant:
        base = get_format(quant, spec)
        published = spec.published.get(base.name)
        if published:
            fmt = checkpoint_format(spec, published["quantization_config"])
            return replace(fmt, source=f"the published checkpoint {published['repo']}: {fmt.source} ({published['source']})")
        return base
    if spec.config_path:
        qc = read_quant_config(Path(spec.config_path))
        return checkpoint_format(spec, qc) if qc else get_format("bf16", spec)
    if spec.native_quant:
        fmt = checkpoint_format(spec, spec.native_quant)
        return replace(fmt, source=f"the published checkpoint {spec.name}: {fmt.source}; --quant bf16 for BF16 weights")
    return get_format("bf16", spec)
