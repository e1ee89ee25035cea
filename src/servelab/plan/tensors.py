"""Weights as a checkpoint stores them, from its safetensors headers: bytes by dtype and by part.

Each safetensors file starts with a JSON header listing every tensor's dtype, shape and byte range
(https://huggingface.co/docs/safetensors/index#format). ``huggingface_hub`` reads it: from files on
disk (``get_local_safetensors_metadata``) or, for a Hub repository, with HTTP range requests of the
first 100 kB of each shard (``get_safetensors_metadata``, as hf-mem does): never the weights.

A tensor's bytes are its byte range (``data_offsets`` end − begin), so the total is the checkpoint's
weights to the byte, scales and packed 4-bit values included. Parts are read from the tensor names
(Hugging Face naming; :func:`part`). vLLM loads everything but the MTP/draft layers unless
speculative decoding uses them (``mtp``), so :attr:`CheckpointWeights.loaded_bytes` leaves them out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import huggingface_hub
from huggingface_hub.utils import SafetensorsRepoMetadata, TensorInfo
from huggingface_hub import errors as hub_errors

from servelab.errors import ServelabError
from servelab.guards.jsonfile import loads
from servelab.plan import hub
from servelab.values.specs import ModelSpec
from servelab.guards.files import head_bytes, read_bytes

MAX_INDEX_BYTES = 10**15  # 1 PB: a safetensors index claiming more is not a checkpoint
LFS_POINTER = b"version https://git-lfs"  # how a Git LFS pointer file starts (git-lfs docs/spec.md): a shard not downloaded
DTYPE_BITS = {  # safetensors' dtypes and their sizes (safetensors src/tensor.rs, Dtype::bitsize)
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_PARTS = (  # first match wins; names as Hugging Face checkpoints spell them
    ("vision", re.compile(r"vision|visual|vit\.|image|multi_modal_projector|mm_projector|audio|patch_embed")),
    ("mtp", re.compile(r"(?:^|\.)mtp[._]|nextn")),
    ("embed", re.compile(r"embed_tokens|word_embeddings|(?:^|\.)wte\.|tok_embeddings|(?:^|\.)embeddings\.")),
    ("lm_head", re.compile(r"lm_head|(?:^|\.)output\.weight")),
    ("shared_experts", re.compile(r"shared_expert")),
    ("experts", re.compile(r"\.experts\.")),
    ("router", re.compile(r"\.gate\.(?:weight|e_score)|\.router\.|e_score_correction_bias")),
    ("attention", re.compile(r"self_attn|attention|\.attn\.|linear_attn|\.mixer\.")),
    ("mlp", re.compile(r"\.mlp\.|feed_forward|ffn")),
    ("norms", re.compile(r"norm")),
)


def part(name: str, num_layers: int) -> str:
    """The part a tensor belongs to: ``vision``, ``mtp`` (named so, or a layer index at or past
    ``num_layers``, as DeepSeek-V3 stores its MTP layer), ``embed``, ``lm_head``,
    ``shared_experts``, ``experts``, ``router``, ``attention`` (recurrent mixers included), ``mlp``,
    ``norms`` or ``other``."""
    layer = _LAYER.search(name)
    if layer and int(layer.group(1)) >= num_layers and "vision" not in name and "visual" not in name:
        return "mtp"
    return next((p for p, pattern in _PARTS if pattern.search(name)), "other")


@dataclass
class CheckpointWeights:
    """A checkpoint's weights from its headers.

    ``total_bytes``: all tensors, bytes; ``params``: elements; ``by_dtype`` and ``by_part``:
    bytes; ``files``: safetensors files read; ``source``: where (a directory, or ``hub:org/name``).
    """

    total_bytes: int
    params: int
    files: int
    source: str
    by_dtype: dict[str, int] = field(default_factory=dict)
    by_part: dict[str, int] = field(default_factory=dict)

    @property
    def loaded_bytes(self) -> int:
        """Bytes vLLM loads without MTP speculative decoding: all but the ``mtp`` part."""
        return self.total_bytes - self.by_part.get("mtp", 0)


def tensor_bytes(name: str, info: TensorInfo, where: str) -> int:
    """The bytes of one tensor as its header gives them (``data_offsets`` end − begin), checked
    against its dtype and shape: a known dtype (:data:`DTYPE_BITS`), non-negative dimensions, an
    ordered byte range of exactly ``⌈elements × bits ÷ 8⌉`` bytes.

    Raises:
        ServelabError: a header no safetensors writer produces (negative offsets or dimensions, a
            range that does not hold the shape, an unknown dtype), naming the file and the tensor.
    """
    bits = DTYPE_BITS.get(info.dtype)
    shape, offsets = info.shape, info.data_offsets
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in [*shape, *offsets])
    problem = (f"unknown dtype {str(info.dtype)[:20]!r}" if bits is None
               else "a dimension or offset is not an integer" if not ints or len(offsets) != 2
               else f"a negative dimension in {shape}" if any(d < 0 for d in shape)
               else f"byte range {list(offsets)} is not ordered" if not 0 <= offsets[0] <= offsets[1]
               else None)  # fmt: skip
    if problem is None and offsets[1] - offsets[0] != -(-math.prod(shape) * bits // 8):
        problem = f"byte range {list(offsets)} does not hold {shape} of {info.dtype}"
    if problem:
        raise ServelabError(f"{where}: tensor {name[:80]!r}: {problem}; the checkpoint's safetensors header is damaged")
    return offsets[1] - offsets[0]


def from_metadata(meta: SafetensorsRepoMetadata, source: str, num_layers: int) -> CheckpointWeights:
    """Sum a ``SafetensorsRepoMetadata`` by dtype and part (module docstring), each tensor checked
    (:func:`tensor_bytes`).

    Raises:
        ServelabError: a damaged header, or a total that is not a checkpoint's (≥ ``MAX_INDEX_BYTES``).
    """
    out = CheckpointWeights(total_bytes=0, params=0, files=len(meta.files_metadata), source=source)
    for filename, file in meta.files_metadata.items():
        for name, info in file.tensors.items():
            size = tensor_bytes(name, info, f"{source} {filename}")
            out.total_bytes += size
            out.params += info.parameter_count
            out.by_dtype[info.dtype] = out.by_dtype.get(info.dtype, 0) + size
            kind = part(name, num_layers)
            out.by_part[kind] = out.by_part.get(kind, 0) + size
    if out.total_bytes >= MAX_INDEX_BYTES:
        raise ServelabError(f"{source}: its safetensors headers add up to {out.total_bytes:.3g} bytes, not a checkpoint's (< {MAX_INDEX_BYTES:.0e})")
    return out


def from_index(path: Path, spec: ModelSpec) -> CheckpointWeights | None:
    """A checkpoint's weights from its safetensors index alone (``metadata.total_size``, bytes),
    when the shards are not at hand; the MTP tensors the ``weight_map`` names (:func:`part`) are
    counted at the formula's size in BF16 (published checkpoints keep them so), so that
    :attr:`CheckpointWeights.loaded_bytes` leaves them out. None when ``path`` is missing or not an
    index (no total size, or a ``weight_map`` that names no shard).

    Raises:
        ServelabError: the index is not JSON (or too large or deep: ``servelab.guards.jsonfile``), or its
            total size is not a checkpoint's (0 < bytes < ``MAX_INDEX_BYTES``).
    """
    if not path.is_file():
        return None
    raw = read_bytes(path, "safetensors index")
    doc = loads(raw, str(path), "give a checkpoint directory holding its model.safetensors.index.json")
    try:
        total = int(doc["metadata"]["total_size"])
        names = dict(doc["weight_map"])
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    if not names:
        return None  # names no shard: not a checkpoint's index
    if not 0 < total < MAX_INDEX_BYTES:
        raise ServelabError(f"{path}: metadata.total_size {total} is not a checkpoint's size in bytes (0 < size < {MAX_INDEX_BYTES:.0e})")
    mtp = 2 * spec.params.get("mtp", 0) if any(part(n, len(spec.layers)) == "mtp" for n in names) else 0
    return CheckpointWeights(total_bytes=total, params=0, files=len(set(names.values())), source=f"{path} (total_size)", by_part={"mtp": mtp} if mtp else {})


def checkpoint_weights(spec: ModelSpec, *, online: bool = True, folder: Path | None = None) -> CheckpointWeights | None:
    """The headers of the checkpoint ``spec`` was read from (or of ``folder``, ``--checkpoint-config``),
    where they are at hand: the safetensors files beside its config.json (a model directory, or the
    Hugging Face cache's snapshot); without the shards, its ``model.safetensors.index.json``
    (:func:`from_index`); else, for a Hub id and ``online``, the Hub's headers by range requests.
    None for a catalog model, a bare config.json, or a checkpoint whose headers cannot be had
    (offline, not a safetensors repository, an index that names no shard): the plan then uses the
    formula. A local index is read through ``servelab.guards.jsonfile`` first (bounded), before
    huggingface_hub parses it.

    Raises:
        ServelabError: a local index that is not JSON, or whose total size is not a checkpoint's
            (:func:`from_index`); a damaged header (:func:`tensor_bytes`, or one huggingface_hub
            cannot parse: a length prefix beyond its bound, invalid JSON); the Hub too slow or
            its answer unreadable (``servelab.plan.hub``).
    """
    layers = len(spec.layers)
    folder = folder or (Path(spec.config_path).parent if spec.config_path else None)
    if folder is not None:
        index = from_index(folder / "model.safetensors.index.json", spec)
        try:
            if (local := _weights(huggingface_hub.get_local_safetensors_metadata(folder), str(folder), layers)) is not None:
                return local
        except (hub_errors.NotASafetensorsRepoError, OSError):
            pass
        except hub_errors.SafetensorsParsingError:  # shards not downloaded (Git LFS pointers, empty placeholders) read as headers too
            if index is None and not _not_downloaded(folder):
                raise ServelabError(f"{folder}: a safetensors header could not be read (its length prefix or JSON is not a safetensors file's); "
                                    "the checkpoint is damaged") from None  # fmt: skip
        except (RecursionError, ValueError, KeyError, TypeError) as exc:  # a header huggingface_hub cannot parse (nested 100,000 deep …)
            raise ServelabError(f"{folder}: a safetensors header could not be read ({type(exc).__name__}); the checkpoint is damaged") from None
        if index is not None:
            return index  # config.json and the index, shards not downloaded
    if spec.hub_id and online:
        try:  # offline or unreachable: hub.call raises OfflineModeIsEnabled before any request
            meta = hub.call(f"--model {spec.hub_id}", huggingface_hub.get_safetensors_metadata, spec.hub_id, revision=spec.revision)
        except (hub_errors.HfHubHTTPError, hub_errors.NotASafetensorsRepoError, hub_errors.SafetensorsParsingError,
                hub_errors.EntryNotFoundError, hub_errors.OfflineModeIsEnabled):  # fmt: skip
            return None
        return _weights(meta, f"hub:{spec.hub_id}", layers)
    return None


def _not_downloaded(folder: Path) -> bool:
    """Whether a ``*.safetensors`` file in ``folder`` holds no weights yet: a Git LFS pointer (a clone with
    ``GIT_LFS_SKIP_SMUDGE=1``) or a file shorter than a header's 8-byte length prefix.

    Raises:
        ServelabError: such a file cannot be read (``servelab.guards.files.head_bytes``)."""
    for path in folder.glob("*.safetensors"):
        head = head_bytes(path, "safetensors file", len(LFS_POINTER))
        if len(head) < 8 or head == LFS_POINTER:
            return True
    return False


def _weights(meta: SafetensorsRepoMetadata, source: str, num_layers: int) -> CheckpointWeights | None:
    """:func:`from_metadata`, or None when the metadata lists no safetensors file (an index with an
    empty ``weight_map``: 0 bytes would plan a model without weights)."""
    return from_metadata(meta, source, num_layers) if meta.files_metadata else None
