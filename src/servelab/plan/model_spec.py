"""Model architecture from a Hugging Face ``config.json``: parameters by kind and each layer's kind.

Parameter counts use the exact per-module shapes of each architecture (formulas in
../shared/reference/models-notes.md, "Derived quantities"), reproduced here per ``model_type``:

- GQA attention: ``H·nh·hd·(2 if output-gated) + 2·H·nkv·hd + nh·hd·H`` (+ q/k norms; gpt-oss biases and sinks)
- MLA (DeepSeek-V3): ``H·q_lora + q_lora·nh·(nope+rope) + H·(kv_lora+rope) + kv_lora·nh·(nope+v) + nh·v·H``
- Gated DeltaNet (Qwen3-Next / 3.5 / 3.6): ``H·(2Kd+2Vd) + 2H·nv + conv_dim·kernel + 2nv + dv + Vd·H``
- Mamba-2 (Nemotron-H): ``H·(2I+2gS+nh) + (I+2gS)·(k+1) + 3nh + I + I·H``, ``I = heads·head_dim``
- SwiGLU MLP ``3·H·I`` (relu2: ``2·H·I``); MoE: experts + router ``H·E`` + shared experts (+ Qwen's gate ``H``)

The layer kinds and the :class:`~servelab.specs.ModelSpec` they build are in ``servelab.specs``.
The bundled catalog (``servelab/data/models/*.json``) holds the configs of the field's common
models, converted from ../shared/reference/models.yaml.
"""

from __future__ import annotations

import difflib
import json
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, NonNegativeInt, PositiveInt, ValidationError

from servelab.errors import ServelabError
from servelab.specs import Layer, ModelSpec


def _ssm_bytes(cfg: dict) -> int:
    """Bytes per element of the recurrent (SSM / delta-rule) state as vLLM 0.25 keeps it
    (vllm/model_executor/models/config.py; vllm/model_executor/layers/mamba/mamba_utils.py
    ``MambaStateDtypeCalculator``): Nemotron-H its ``mamba_ssm_cache_dtype``, float32 by default;
    Qwen3.5 its ``mamba_ssm_dtype`` (float32 in the published configs); otherwise the model dtype,
    BF16 (Qwen3-Next: checked against a real vLLM 0.25 boot log, tests/fixtures/bootlogs)."""
    default = "float32" if cfg.get("model_type") == "nemotron_h" else "auto"
    dtype = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype") or default
    return 4 if dtype == "float32" else 2


def _get(cfg: dict, *keys: str, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


class CoreConfig(BaseModel):
    """The fields every supported config.json has, checked before a user's file is parsed."""

    hidden_size: PositiveInt
    num_hidden_layers: PositiveInt
    vocab_size: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    intermediate_size: NonNegativeInt | None = None


def parse_config(cfg: dict, name: str = "model") -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json dict (a ``text_config`` is used when present).

    Raises:
        ServelabError: unsupported ``model_type`` or missing required fields.
    """
    meta = cfg.get("_servelab", {})
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings", cfg["text_config"].get("tie_word_embeddings"))}
    mt = str(cfg.get("model_type", ""))
    try:
        H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
        nh = cfg["num_attention_heads"]
    except KeyError as exc:
        raise ServelabError(f"config of {name} lacks {exc.args[0]!r}; give a Hugging Face config.json") from None
    nkv = _get(cfg, "num_key_value_heads", default=nh)
    hd = _get(cfg, "head_dim", default=H // nh)
    tied = bool(cfg.get("tie_word_embeddings", False))
    spec = ModelSpec(
        name=meta.get("id", name), model_type=mt, hidden_size=H, vocab_size=V, layers=[], num_heads=nh, num_kv_heads=nkv,
        head_dim=hd, tied_embeddings=tied, max_position_embeddings=cfg.get("max_position_embeddings"),
        reference=meta.get("reference", {}), published_sizes=meta.get("published_checkpoint_sizes", {}),
    )  # fmt: skip
    p = {"embed": V * H, "lm_head": 0 if tied else V * H, "attn": 0, "recurrent": 0, "mlp": 0, "experts": 0, "shared": 0, "router": 0, "norms": H, "mtp": 0}
    gqa = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
    I = cfg.get("intermediate_size") or 0  # noqa: E741 (the paper's name)
    spec.intermediate_size = I
    if mt in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe"):
        qk_norm = 2 * hd if mt.startswith("qwen3") else 0
        moe = mt == "qwen3_moe"
        sparse_step = cfg.get("decoder_sparse_step", 1)
        mlp_only = set(cfg.get("mlp_only_layers") or [])
        for i in range(L):
            is_moe = moe and i not in mlp_only and (i + 1) % sparse_step == 0
            spec.layers.append(Layer("full", "moe" if is_moe else "dense"))
            p["attn"] += gqa + qk_norm
            p["norms"] += 2 * H
            if is_moe:
                _moe(spec, p, cfg, H, gated=True)
            else:
                p["mlp"] += 3 * H * I
    elif mt == "gpt_oss":
        spec.sliding_window = cfg.get("sliding_window")
        types = cfg.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
        E, I = _get(cfg, "num_local_experts", "num_experts"), cfg["intermediate_size"]  # noqa: E741
        spec.num_experts, spec.experts_per_token = E, _get(cfg, "num_experts_per_tok", "experts_per_token")
        spec.moe_intermediate_size, spec.intermediate_size = I, 0
        spec.expert_params = 3 * H * I + 2 * I + H  # gate_up (H→2I) and down (I→H), with biases
        for t in types:
            spec.layers.append(Layer("sliding" if t == "sliding_attention" else "full", "moe"))
            p["attn"] += gqa + nh * hd + 2 * nkv * hd + H + nh  # biases on q, k, v, o; one sink per head
            p["experts"] += E * spec.expert_params
            p["router"] += H * E + E
            p["norms"] += 2 * H
    elif mt in ("gemma3_text", "gemma3", "gemma2"):
        spec.sliding_window = cfg.get("sliding_window")
        pattern = cfg.get("sliding_window_pattern", 6)
        types = cfg.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(L)]
        for t in types:
            spec.layers.append(Layer("sliding" if t == "sliding_attention" else "full", "dense"))
            p["attn"] += gqa + 2 * hd
            p["mlp"] += 3 * H * I
            p["norms"] += 4 * H
    elif mt == "deepseek_v3":
        ql, kl, nope, rope, vd = (cfg[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        spec.mla_latent = kl + rope
        spec.head_dim = nope + rope
        mla = H * ql + ql * nh * (nope + rope) + H * (kl + rope) + kl * nh * (nope + vd) + nh * vd * H + ql + kl
        first_dense = cfg.get("first_k_dense_replace", 0)
        for i in range(L):
            is_moe = i >= first_dense
            spec.layers.append(Layer("mla", "moe" if is_moe else "dense"))
            p["attn"] += mla
            p["norms"] += 2 * H
            if is_moe:
                _moe(spec, p, cfg, H, gated=True)
            else:
                p["mlp"] += 3 * H * I
        spec.mtp_layers = cfg.get("num_nextn_predict_layers", 0)
        # MTP module: eh_proj (2H→H), 2 norms, one MoE decoder layer, a norm (embedding and head shared)
        per_layer = (p["attn"] + p["experts"] + p["shared"] + p["router"]) // max(1, spec.moe_layers)
        p["mtp"] = spec.mtp_layers * (2 * H * H + 3 * H + per_layer)
    elif mt in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"):
        nk, nv, dk, dv, kern = (cfg[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"))
        Kd, Vd = nk * dk, nv * dv
        conv = 2 * Kd + Vd
        gdn = H * (2 * Kd + 2 * Vd) + H * 2 * nv + conv * kern + 2 * nv + dv + Vd * H
        spec.linear_state_bytes = nv * dk * dv * _ssm_bytes(cfg) + conv * (kern - 1) * 2
        gated_attn = H * nh * hd * 2 + 2 * H * nkv * hd + nh * hd * H + 2 * hd
        interval = cfg.get("full_attention_interval", 4)
        types = cfg.get("layer_types") or ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L)]
        moe = bool(cfg.get("num_experts"))
        for t in types:
            kind = "full" if t == "full_attention" else "linear"
            spec.layers.append(Layer(kind, "moe" if moe else "dense"))
            p["attn" if kind == "full" else "recurrent"] += gated_attn if kind == "full" else gdn
            p["norms"] += 2 * H
            if moe:
                _moe(spec, p, cfg, H, gated=True)
            else:
                p["mlp"] += 3 * H * I
        spec.mtp_layers = _get(cfg, "mtp_num_hidden_layers", "num_nextn_predict_layers", default=0)
        ffn = (p["experts"] + p["shared"] + p["router"]) // max(1, spec.moe_layers) if moe else 3 * H * I
        p["mtp"] = spec.mtp_layers * (2 * H * H + 3 * H + gated_attn + ffn + 2 * H)
    elif mt == "nemotron_h":
        pattern = cfg["hybrid_override_pattern"]
        nmh, mhd, S, g, k = (cfg[x] for x in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel"))
        Im = nmh * mhd
        mamba = H * (2 * Im + 2 * g * S + nmh) + (Im + 2 * g * S) * (k + 1) + 3 * nmh + Im + Im * H
        spec.mamba_state_bytes = nmh * mhd * S * _ssm_bytes(cfg) + (Im + 2 * g * S) * (k - 1) * 2
        spec.mamba_chunk_size = cfg.get("mamba_chunk_size") or cfg.get("chunk_size") or 256  # vllm/transformers_utils/configs/nemotron_h.py default
        for ch in pattern:  # one block per character: M Mamba-2, * attention, E MoE FFN, - dense FFN
            p["norms"] += H
            if ch == "M":
                spec.layers.append(Layer("mamba", "none"))
                p["recurrent"] += mamba
            elif ch == "*":
                spec.layers.append(Layer("full", "none"))
                p["attn"] += gqa
            elif ch == "E":
                spec.layers.append(Layer("none", "moe"))
                _moe(spec, p, cfg, H, gated=False)
            else:
                spec.layers.append(Layer("none", "dense"))
                p["mlp"] += 2 * H * I
    else:
        raise ServelabError(
            f"model_type {mt!r} of {name} is not supported yet; supported: llama, qwen3, qwen3_moe, gpt_oss, gemma3, deepseek_v3, qwen3_next, qwen3_5, nemotron_h"
        )
    spec.params = p
    return spec


def _moe(spec: ModelSpec, p: dict[str, int], cfg: dict, H: int, *, gated: bool) -> None:
    """Add one MoE FFN (routed experts, router, shared experts) to the counts."""
    E = _get(cfg, "num_experts", "n_routed_experts", "num_local_experts")
    mi = cfg["moe_intermediate_size"]
    per = (3 if gated else 2) * H * mi
    spec.num_experts, spec.experts_per_token, spec.expert_params = E, cfg["num_experts_per_tok"], per
    spec.moe_intermediate_size = mi
    p["experts"] += E * per
    p["router"] += H * E + (E if cfg.get("n_routed_experts") else 0)  # DeepSeek / Nemotron: e_score_correction_bias
    shared_i = _get(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    n_shared = _get(cfg, "n_shared_experts", default=1 if shared_i else 0)
    if shared_i is None and n_shared:
        shared_i = n_shared * mi
        n_shared = 1
    if n_shared:
        p["shared"] += (3 if gated else 2) * H * shared_i + (H if cfg.get("shared_expert_intermediate_size") else 0)


def catalog() -> dict[str, Path]:
    """Bundled model configs: {short name: path}."""
    root = files("servelab.data").joinpath("models")
    return {Path(str(p)).stem: Path(str(p)) for p in root.iterdir() if str(p).endswith(".json")}


def load_model(ref: str) -> ModelSpec:
    """A model from a config.json file, a directory holding one, or a catalog name (``qwen3-8b``,
    ``Qwen/Qwen3-8B``; case-insensitive).

    Raises:
        ServelabError: nothing by that name, with the closest catalog names.
    """
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ServelabError(f"--model {ref}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except UnicodeDecodeError:
            raise ServelabError(f"--model {ref}: not a text file (not UTF-8); give a config.json") from None
        try:
            CoreConfig.model_validate((cfg.get("text_config") or cfg) if isinstance(cfg, dict) else cfg)
            return parse_config(cfg, name=path.parent.name if path.name == "config.json" else path.stem)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "the file"
            raise ServelabError(f"--model {ref}: {where}: {err['msg']}; give a Hugging Face config.json") from None
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:  # a model-specific field missing or of the wrong type
            raise ServelabError(f"--model {ref}: a field servelab needs is missing or not a number ({type(exc).__name__}: {exc}); give a Hugging Face config.json") from None
    names = catalog()
    key = ref.lower().rsplit("/", 1)[-1]
    if key in names:
        return parse_config(json.loads(names[key].read_text()), name=key)
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.4)
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(sorted(names))}"
    raise ServelabError(f"--model {ref!r} is neither a config.json nor a catalog model; {hint}")
