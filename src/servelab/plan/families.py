"""Model architecture from a Hugging Face ``config.json``: parameters by kind and each layer's kind,
per ``model_type`` family, with a generic decoder for any other.

Parameter counts use each architecture's exact per-module shapes (formulas in
../shared/reference/models-notes.md, "Derived quantities"; each family's modeling file below):

- GQA attention: ``H·nh·hd·(2 if output-gated) + 2·H·nkv·hd + nh·hd·H`` (+ biases, q/k norms)
- MLA (DeepSeek-V2/V3): ``H·q_lora + q_lora·nh·(nope+rope) + H·(kv_lora+rope) + kv_lora·nh·(nope+v) + nh·v·H``;
  with ``q_lora_rank`` null the query is projected straight from the hidden state, ``H·nh·(nope+rope)``
- Gated DeltaNet (Qwen3-Next / 3.5 / 3.6): ``H·(2Kd+2Vd) + 2H·nv + conv_dim·kernel + 2nv + dv + Vd·H``
- Mamba-2 (Nemotron-H): ``H·(2I+2gS+nh) + (I+2gS)·(k+1) + 3nh + I + I·H``, ``I = heads·head_dim``
- SwiGLU MLP ``3·H·I`` (relu2: ``2·H·I``); MoE: experts + router ``H·E`` (+ ``E`` score-correction
  bias) + shared experts (+ Qwen's shared-expert gate ``H``)

The llama-like families differ only in a few switches (:class:`Decoder`): which projections carry
biases, the q/k norms, norms per layer, where the experts' fields are, which layers are MoE. A
``model_type`` not in :data:`DECODERS` nor among the special architectures is read as a generic
decoder (:func:`parse_config` says which assumptions it made); its count is checked against the
checkpoint's headers where they are at hand (``servelab.plan.tensors``).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.errors import ServelabError
from servelab.values.specs import Layer, ModelSpec

_HF = "transformers src/transformers/models/{0}/modeling_{0}.py"


@dataclass(frozen=True)
class Decoder:
    """How one llama-like family's decoder layer differs from Llama's.

    ``qkv_bias``/``o_bias``: biases on those projections (None: the config's ``attention_bias``);
    ``qk_norm``: ``head`` (one ``head_dim`` vector each for q and k), ``full`` (over all heads:
    ``nh·hd`` and ``nkv·hd``), ``config`` (``head`` when the config's ``use_qk_norm`` is true) or
    ``none``; ``norms``: H-sized norm vectors per layer (×2 for LayerNorms with a bias);
    ``expert_width``: the config field of one routed expert's width; ``shared_width``: the shared
    expert's width field for families with one of a fixed width (Llama 4: ``intermediate_size``);
    ``dense_width``: the dense MLP's width field; ``lm_head_bias``: Phi-3.5-MoE.
    """

    source: str
    qkv_bias: bool | None = False
    o_bias: bool | None = False
    qk_norm: str = "none"
    norms: int = 2
    norm_bias: bool = False
    expert_width: str = "moe_intermediate_size"
    shared_width: str | None = None
    dense_width: str = "intermediate_size"
    lm_head_bias: bool = False


_MIXTRAL_LIKE = {"expert_width": "intermediate_size"}
DECODERS: dict[str, Decoder] = {
    "llama": Decoder(_HF.format("llama"), qkv_bias=None, o_bias=None),
    "mistral": Decoder(_HF.format("mistral")),
    "qwen2": Decoder(_HF.format("qwen2"), qkv_bias=True),
    "mimo": Decoder("XiaomiMiMo/MiMo-7B-Base modeling_mimo.py (Qwen2 with MTP layers)", qkv_bias=True),
    "qwen3": Decoder(_HF.format("qwen3"), qk_norm="head"),
    "qwen3_vl_text": Decoder(_HF.format("qwen3_vl"), qk_norm="head"),
    "qwen2_moe": Decoder(_HF.format("qwen2_moe"), qkv_bias=True),
    "qwen3_moe": Decoder(_HF.format("qwen3_moe"), qk_norm="head"),
    "qwen3_vl_moe_text": Decoder(_HF.format("qwen3_vl_moe"), qk_norm="head"),
    "mixtral": Decoder(_HF.format("mixtral"), **_MIXTRAL_LIKE),
    "phi3": Decoder(_HF.format("phi3")),
    "phimoe": Decoder(_HF.format("phimoe"), qkv_bias=None, o_bias=None, norm_bias=True, lm_head_bias=True, **_MIXTRAL_LIKE),
    "granite": Decoder(_HF.format("granite"), qkv_bias=None, o_bias=None),
    "granitemoe": Decoder(_HF.format("granitemoe"), qkv_bias=None, o_bias=None, **_MIXTRAL_LIKE),
    "olmo2": Decoder(_HF.format("olmo2"), qk_norm="full"),
    "olmoe": Decoder(_HF.format("olmoe"), qk_norm="full", **_MIXTRAL_LIKE),
    "glm4": Decoder(_HF.format("glm4"), qkv_bias=None, norms=4),
    "glm4_moe": Decoder(_HF.format("glm4_moe"), qkv_bias=None, qk_norm="config"),
    "minimax_m2": Decoder("vllm vllm/model_executor/models/minimax_m2.py", qk_norm="full", **_MIXTRAL_LIKE),
    "llama4_text": Decoder(_HF.format("llama4"), expert_width="intermediate_size", shared_width="intermediate_size", dense_width="intermediate_size_mlp"),
    "deepseek_v2": Decoder(_HF.format("deepseek_v2")),
    "deepseek_v3": Decoder(_HF.format("deepseek_v3")),
    "kimi_k2": Decoder("moonshotai/Kimi-K2-Instruct modeling_deepseek.py (DeepSeek-V3's architecture)"),
    "ernie4_5_moe": Decoder("vllm vllm/model_executor/models/ernie45_moe.py (moe_num_experts, moe_k, moe_layer_start_index/interval/end_index)"),
    "nemotron": Decoder(_HF.format("nemotron"), qkv_bias=None, o_bias=None, norm_bias=True),  # LayerNorm1P; relu2 MLP without a gate (_decoder)
}
SPECIAL = {
    "gpt_oss": _HF.format("gpt_oss"),
    "gemma2": _HF.format("gemma2"),
    "gemma3_text": _HF.format("gemma3"),
    "gemma3": _HF.format("gemma3"),
    "gemma4_text": _HF.format("gemma4"),
    "qwen3_next": _HF.format("qwen3_next"),
    "qwen3_5_text": _HF.format("qwen3_5"),
    "qwen3_5_moe_text": _HF.format("qwen3_5_moe"),
    "qwen3_5": _HF.format("qwen3_5"),
    "qwen3_5_moe": _HF.format("qwen3_5_moe"),
    "nemotron_h": _HF.format("nemotron_h"),
}
GENERIC = "generic decoder"  # the family of a model_type read with GENERIC_ASSUMPTIONS
GENERIC_ASSUMPTIONS = ("GQA attention without biases or q/k norms", "a gated MLP (3·H·I; with hidden_act relu2 none: 2·H·I)", "two RMSNorms per layer",
                       "MoE experts, MLA and sliding windows only where the usual config fields name them")  # fmt: skip


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


def _experts(cfg: dict) -> int | None:
    """Routed experts per MoE layer, under any of its usual names (ERNIE 4.5: ``moe_num_experts``; its VL models list the
    text experts first, then the vision ones: the text's)."""
    return _text(_get(cfg, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"))


def _text(value):
    """The text model's entry of an ERNIE-4.5-VL per-modality list (text first), else ``value``."""
    return value[0] if isinstance(value, list) and value else value


def text_config(cfg: dict) -> dict:
    """The language model's config: a multimodal wrapper's ``text_config`` (Mistral 3, Llama 4,
    Gemma 3/4, Qwen3-VL, Qwen3.5, Kimi-K2.5), with the wrapper's ``tie_word_embeddings``; else
    ``cfg``. A Nemotron-H config that lists its blocks (``layers_block_type``) without
    ``num_hidden_layers`` gets it from the list's length."""
    if isinstance(cfg.get("text_config"), dict):
        inner = cfg["text_config"]
        cfg = {**inner, "tie_word_embeddings": cfg.get("tie_word_embeddings", inner.get("tie_word_embeddings"))}
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("layers_block_type"), list):
        cfg = {**cfg, "num_hidden_layers": len(cfg["layers_block_type"])}
    return cfg


def family(cfg: dict) -> tuple[str, str]:
    """(family, source) of a config.json: its ``model_type`` where servelab knows it, else
    :data:`GENERIC` with the assumptions' summary (the text config's type, for a wrapper)."""
    mt = str(text_config(cfg).get("model_type", ""))
    if mt in DECODERS:
        return mt, DECODERS[mt].source
    if mt in SPECIAL:
        return mt, SPECIAL[mt]
    return GENERIC, f"model_type {mt!r} read as a generic decoder: " + "; ".join(GENERIC_ASSUMPTIONS)


def parse_config(cfg: dict, name: str = "model") -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json dict (a ``text_config`` is used when present).

    Raises:
        ServelabError: a required field missing (named), or a generic config without an MLP width.
        KeyError, TypeError, ValueError: a family's own field missing or malformed (the caller,
            ``servelab.plan.model_spec.load_model``, turns these into one line).
    """
    meta = cfg.get("_servelab", {})
    native = cfg.get("quantization_config")
    cfg = text_config(cfg)
    mt = str(cfg.get("model_type", ""))
    try:
        H, V, nh, _ = (cfg[k] for k in ("hidden_size", "vocab_size", "num_attention_heads", "num_hidden_layers"))
    except KeyError as exc:
        raise ServelabError(f"config of {name} lacks {exc.args[0]!r}; give a Hugging Face config.json") from None
    nkv = _get(cfg, "num_key_value_heads", default=nh)
    hd = _get(cfg, "head_dim", default=H // nh)
    tied = bool(cfg.get("tie_word_embeddings", False))
    fam, source = family(cfg)
    spec = ModelSpec(
        name=meta.get("id", name), model_type=mt, hidden_size=H, vocab_size=V, layers=[], num_heads=nh, num_kv_heads=nkv,
        head_dim=hd, tied_embeddings=tied, max_position_embeddings=cfg.get("max_position_embeddings"),
        reference=meta.get("reference", {}), published_sizes=meta.get("published_checkpoint_sizes", {}),
        published=meta.get("published_checkpoints", {}), native_quant=native if isinstance(native, dict) else None,
        family=fam, family_source=source,
    )  # fmt: skip
    p = {"embed": V * H, "lm_head": 0 if tied else V * H, "attn": 0, "recurrent": 0, "mlp": 0, "experts": 0, "shared": 0, "router": 0, "norms": H, "mtp": 0}
    spec.intermediate_size = cfg.get("intermediate_size") or 0
    spec.params = p
    if mt in DECODERS:
        _decoder(spec, p, cfg, DECODERS[mt])
    elif mt == "gpt_oss":
        _gpt_oss(spec, p, cfg)
    elif mt in ("gemma3_text", "gemma3", "gemma2"):
        _gemma(spec, p, cfg, qk_norm=mt != "gemma2")
    elif mt == "gemma4_text":
        _gemma4(spec, p, cfg)
    elif mt in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"):
        _gated_deltanet(spec, p, cfg)
    elif mt == "nemotron_h":
        _nemotron_h(spec, p, cfg)
    else:
        if not (cfg.get("intermediate_size") or cfg.get("moe_intermediate_size")):
            raise ServelabError(f"config of {name}: model_type {mt!r} is read as a generic decoder, which needs 'intermediate_size' (the MLP width); give a config.json that has it")
        if _experts(cfg) and _top_k(cfg) is None:
            raise ServelabError(f"config of {name}: model_type {mt!r} has experts but no experts per token (num_experts_per_tok); give a config.json that has it")
        spec.assumptions = list(GENERIC_ASSUMPTIONS)
        width = next((k for k in ("moe_intermediate_size", "expert_hidden_dim") if cfg.get(k)), "intermediate_size")  # HY V3: expert_hidden_dim (vllm hy_v3.py)
        dense = "dense_intermediate_size" if cfg.get("dense_intermediate_size") else "intermediate_size"
        _decoder(spec, p, cfg, Decoder(source, expert_width=width, dense_width=dense))
    return spec


def _decoder(spec: ModelSpec, p: dict[str, int], cfg: dict, d: Decoder) -> None:
    """A llama-like decoder (dense, MoE or MLA), per :class:`Decoder`'s switches; its MLPs gated but with ``hidden_act`` relu2 (Nemotron's ``NemotronMLP``)."""
    H, nh, nkv, hd = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
    mlp = 2 if cfg.get("hidden_act") == "relu2" else 3  # matrices an MLP has
    bias = bool(cfg.get("attention_bias", False))
    qkv_bias = bias if d.qkv_bias is None else d.qkv_bias
    o_bias = bias if d.o_bias is None else d.o_bias
    qk_norm = "head" if d.qk_norm == "config" and cfg.get("use_qk_norm") else d.qk_norm
    if cfg.get("kv_lora_rank"):
        attn = _mla(spec, cfg)
    else:
        attn = 2 * H * nh * hd + 2 * H * nkv * hd
        attn += (nh * hd + 2 * nkv * hd if qkv_bias else 0) + (H if o_bias else 0)
        attn += {"head": 2 * hd, "full": nh * hd + nkv * hd}.get(qk_norm, 0)
    norm = H * (2 if d.norm_bias else 1)
    p["norms"] = norm
    if d.lm_head_bias and cfg.get("lm_head_bias", True):
        p["lm_head"] += spec.vocab_size
    moe = _experts(cfg)
    spec.sliding_window, chunk = _window(cfg)
    types = cfg.get("layer_types")
    first_dense, freq = _get(cfg, "first_k_dense_replace", "moe_layer_start_index", default=0), cfg.get("moe_layer_freq") or 1
    last_moe = _get(cfg, "moe_layer_end_index", default=cfg["num_hidden_layers"] - 1)  # ERNIE 4.5 (ernie45_moe.py: layer_idx <= end)
    first_dense = min(first_dense) if isinstance(first_dense, list) else first_dense  # ERNIE-4.5-VL: per modality, the widest span (vLLM)
    last_moe = max(last_moe) if isinstance(last_moe, list) else last_moe
    step = _get(cfg, "decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_interval", default=1)
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    dense_width = cfg.get(d.dense_width) or cfg.get("intermediate_size") or 0
    for i in range(cfg["num_hidden_layers"]):
        every = bool(freq[i]) if isinstance(freq, list) else i % freq == 0  # a list: one flag per layer (MiniMax-M3, MiMo-V2)
        is_moe = bool(moe) and i not in mlp_only and first_dense <= i <= last_moe and every and (i + 1) % step == 0
        kind = "mla" if cfg.get("kv_lora_rank") else "full"
        if types and types[i] in ("sliding_attention", "chunked_attention") and spec.sliding_window:
            kind = "sliding"
        elif chunk and (i + 1) % 4:  # Llama 4: three chunked-attention layers, then one global (no RoPE)
            kind = "sliding"
        spec.layers.append(Layer(kind, "moe" if is_moe else "dense"))
        p["attn"] += attn
        p["norms"] += d.norms * norm
        if is_moe:
            _moe(spec, p, cfg, H, gated=mlp == 3, width=d.expert_width, shared_width=d.shared_width)
        else:
            p["mlp"] += mlp * H * dense_width
    spec.mtp_layers = _get(cfg, "num_nextn_predict_layers", default=0)
    if spec.mtp_layers:  # eh_proj (2H→H), 2 norms, one decoder layer, a norm (embedding and head shared)
        layer = (p["attn"] + p["experts"] + p["shared"] + p["router"]) // max(1, spec.moe_layers) if moe else attn + mlp * H * dense_width
        p["mtp"] = spec.mtp_layers * (2 * H * H + 3 * H + layer)


def _window(cfg: dict) -> tuple[int | None, bool]:
    """(sliding window in tokens, whether it is Llama 4's chunked attention): the config's ``sliding_window`` where
    ``use_sliding_window`` is not false and ``layer_types`` names sliding layers, or ``attention_chunk_size``."""
    chunk = cfg.get("attention_chunk_size")
    if chunk:
        return chunk, not cfg.get("layer_types")
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", True) and "sliding_attention" in (cfg.get("layer_types") or []):
        return window, False
    return None, False


def _mla(spec: ModelSpec, cfg: dict) -> int:
    """Parameters of one MLA attention (module docstring); sets the latent cache and head size."""
    H, nh = spec.hidden_size, spec.num_heads
    ql, kl, nope, rope, vd = (cfg.get(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    spec.mla_latent = kl + rope
    spec.head_dim = nope + rope
    q = H * ql + ql * nh * (nope + rope) + ql if ql else H * nh * (nope + rope)
    return q + H * (kl + rope) + kl * nh * (nope + vd) + nh * vd * H + kl


def _moe(spec: ModelSpec, p: dict[str, int], cfg: dict, H: int, *, gated: bool, width: str = "moe_intermediate_size", shared_width: str | None = None) -> None:
    """Add one MoE FFN (routed experts, router, shared experts) to the counts."""
    E = _experts(cfg)
    mi = _text(cfg[width])
    latent = cfg.get("moe_latent_size")  # Nemotron 3 Super/Ultra: experts work in a latent space, projected H→latent→H per layer
    per = (3 if gated else 2) * (latent or H) * mi
    spec.num_experts, spec.experts_per_token, spec.expert_params, spec.expert_matrices = E, _top_k(cfg), per, 3 if gated else 2
    spec.moe_intermediate_size = mi
    p["experts"] += E * per
    no_bias = cfg.get("topk_method") in ("greedy", "group_limited_greedy")  # DeepSeek-V2: no e_score_correction_bias
    p["router"] += H * E + (E if (cfg.get("n_routed_experts") and not no_bias) or cfg.get("use_routing_bias") else 0)
    if latent:
        p["shared"] += 2 * H * latent
    if shared_width:
        p["shared"] += 3 * H * cfg[shared_width]
        return
    shared_i = _get(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "shared_intermediate_size")
    n_shared = _get(cfg, "n_shared_experts", "num_shared_experts", "moe_num_shared_experts", default=1 if shared_i else 0)
    if shared_i is None and n_shared:
        shared_i = n_shared * mi
        n_shared = 1
    if n_shared:
        p["shared"] += (3 if gated else 2) * H * shared_i + (H if cfg.get("shared_expert_intermediate_size") else 0)


def _top_k(cfg: dict) -> int | None:
    """Routed experts per token, under any of its usual names."""
    return _get(cfg, "num_experts_per_tok", "top_k_experts", "experts_per_token", "num_experts_per_token", "moe_topk", "moe_k")


def _gpt_oss(spec: ModelSpec, p: dict[str, int], cfg: dict) -> None:
    H, nh, nkv, hd, L = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, cfg["num_hidden_layers"]
    gqa = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
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


def _gemma(spec: ModelSpec, p: dict[str, int], cfg: dict, *, qk_norm: bool) -> None:
    """Gemma 2 and 3: four norms per layer, sliding-window layers (Gemma 2 every other one, Gemma 3
    five of six); Gemma 3 adds q/k norms."""
    H, nh, nkv, hd, L, I = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, cfg["num_hidden_layers"], spec.intermediate_size  # noqa: E741
    gqa = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
    spec.sliding_window = cfg.get("sliding_window")
    pattern = cfg.get("sliding_window_pattern", 6 if qk_norm else 2)
    default = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(L)]
    for t in cfg.get("layer_types") or default:
        spec.layers.append(Layer("sliding" if t == "sliding_attention" else "full", "dense"))
        p["attn"] += gqa + (2 * hd if qk_norm else 0)
        p["mlp"] += 3 * H * I
        p["norms"] += 4 * H


def _gemma4(spec: ModelSpec, p: dict[str, int], cfg: dict) -> None:
    """Gemma 4: sliding-window layers at ``head_dim`` with ``num_key_value_heads``; global layers at
    ``global_head_dim`` with ``num_global_key_value_heads`` and, under ``attention_k_eq_v``, no
    v_proj (K is reused as V); four norms and q/k norms per layer; with ``enable_moe_block`` the
    dense MLP runs beside the routed experts (``moe_intermediate_size``, ``top_k_experts``). The
    spec's KV shape is the global layers' (the cache that grows with context); vLLM's hybrid
    layout takes the sliding layers' pages at that shape too."""
    H, nh, nkv, hd, I = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.intermediate_size  # noqa: E741
    ghd = cfg.get("global_head_dim") or hd
    k_eq_v = bool(cfg.get("attention_k_eq_v"))
    gkv = (cfg.get("num_global_key_value_heads") or nkv) if k_eq_v else nkv
    spec.sliding_window = cfg.get("sliding_window")
    L = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)]
    moe = bool(cfg.get("enable_moe_block") and cfg.get("num_experts"))
    for t in types:
        sliding = t == "sliding_attention"
        spec.layers.append(Layer("sliding" if sliding else "full", "moe" if moe else "dense"))
        if sliding:
            p["attn"] += 2 * H * nh * hd + 2 * H * nkv * hd + 2 * hd
        else:
            p["attn"] += 2 * H * nh * ghd + (1 if k_eq_v else 2) * H * gkv * ghd + 2 * ghd
        p["mlp"] += 3 * H * I
        p["norms"] += 4 * H
        if moe:
            _moe(spec, p, cfg, H, gated=True)
    spec.num_kv_heads, spec.head_dim = gkv, ghd


def _gated_deltanet(spec: ModelSpec, p: dict[str, int], cfg: dict) -> None:
    H, nh, nkv, hd, L, I = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, cfg["num_hidden_layers"], spec.intermediate_size  # noqa: E741
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


def _nemotron_h(spec: ModelSpec, p: dict[str, int], cfg: dict) -> None:
    H, nh, nkv, hd, I = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.intermediate_size  # noqa: E741
    gqa = H * nh * hd + 2 * H * nkv * hd + nh * hd * H
    blocks = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}
    pattern = cfg.get("hybrid_override_pattern") or "".join(blocks[b] for b in cfg["layers_block_type"])
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
