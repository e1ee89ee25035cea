"""The model a user names, found as vLLM finds it, and read into a :class:`~servelab.values.specs.ModelSpec`.

``--model`` may be (in this order):

1. a ``config.json`` or a directory holding one (a checkpoint on disk);
2. a name of the bundled catalog (``qwen3-8b``; ``Qwen/Qwen3-8B`` matches by its last part, and
   ``mistralai/Mixtral-8x7B-Instruct-v0.1`` the entry whose config it shares), the configs of the
   field's common models converted from ../shared/reference/models.yaml, and of the models
   servelab's predict was validated on (validation/configs);
3. a Hugging Face Hub id (``org/name``, ``--revision``): its ``config.json`` from the local Hugging
   Face cache (``HF_HOME`` / ``HF_HUB_CACHE``), else fetched with ``huggingface_hub`` when online
   (config.json, and the quantization sidecar, never the weights). The token is the Hub's own
   (``HF_TOKEN`` or ``hf auth login``): servelab never reads, stores or prints it.

The architecture itself is read by ``servelab.plan.families``.
"""

from __future__ import annotations

import difflib
import json
from importlib.resources import files
from pathlib import Path

import huggingface_hub
from huggingface_hub.utils import validate_repo_id
from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError

from servelab.guards import jsonfile
from servelab.errors import ServelabError, first_problem
from servelab.plan import hub
from servelab.plan.families import parse_config, text_config
from servelab.values.specs import ModelSpec
from servelab.guards.files import read_bytes

HUB_FILES = ("config.json", "hf_quant_config.json")  # what servelab takes from a Hub repository (no weights)


class CoreConfig(BaseModel):
    """The fields every supported config.json has, checked before a user's file is parsed, within
    physical bounds (the largest published models are 10–100× below each: a config with
    ``num_hidden_layers: 1e30`` is refused, not planned for ever). Strict: an integer is an integer,
    not ``true`` (which lax validation would read as 1 layer) nor ``"32"``."""

    model_config = ConfigDict(strict=True)
    hidden_size: PositiveInt = Field(le=1_000_000)
    num_hidden_layers: PositiveInt = Field(le=100_000)
    vocab_size: PositiveInt = Field(le=100_000_000)
    num_attention_heads: PositiveInt = Field(le=100_000)
    num_key_value_heads: PositiveInt | None = Field(None, le=100_000)
    head_dim: PositiveInt | None = Field(None, le=100_000)
    intermediate_size: NonNegativeInt | None = Field(None, le=100_000_000)
    max_position_embeddings: PositiveInt | None = Field(None, le=1 << 40)


def catalog() -> dict[str, Path]:
    """Bundled model configs: {short name: path}."""
    root = files("servelab.data").joinpath("models")
    return {Path(str(p)).stem: Path(str(p)) for p in root.iterdir() if str(p).endswith(".json")}


def _catalog_key(key: str, names: dict[str, Path]) -> str | None:
    """The catalog name that ``key`` (a lower-case name, or the last part of a Hub id) stands for:
    the name itself, else an entry whose Hub id or one of its ``same_config`` ids (published repositories
    with an identical config.json, e.g. a model's instruct release) ends in it; None when none does."""
    if key in names:
        return key
    for name, path in names.items():
        meta = json.loads(path.read_text(encoding="utf-8")).get("_servelab", {})
        if key in {i.lower().rsplit("/", 1)[-1] for i in [meta.get("id", ""), *meta.get("same_config", [])]}:
            return name
    return None


def load_model(ref: str, revision: str | None = None, *, online: bool = True) -> ModelSpec:
    """A model from a config.json file, a directory holding one, a catalog name (``qwen3-8b``,
    ``Qwen/Qwen3-8B``; case-insensitive) or a Hub id (module docstring); with ``online`` False a
    Hub id is looked up in the local cache only (lint, and bench's served name: no network mid-run).

    Raises:
        ServelabError: nothing by that name (with the closest catalog names), a Hub id neither
            cached nor reachable (with the two ways to fix it), or a config servelab cannot read.
    """
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return _read(path, ref, name=path.parent.name if path.name == "config.json" else path.stem)
    names = catalog()
    key = ref.lower().rsplit("/", 1)[-1]
    if (name := _catalog_key(key, names)) is not None and revision is None:
        return parse_config(json.loads(names[name].read_text(encoding="utf-8")), name=name)
    if _is_hub_id(ref):
        spec = _read(hub_config(ref, revision, online=online), ref, name=ref)
        spec.hub_id, spec.revision = ref, revision
        return spec
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.4)
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(sorted(names))}"
    raise ServelabError(f"--model {ref!r} is neither a config.json, a catalog model nor a Hub id (org/name); {hint}")


def _is_hub_id(ref: str) -> bool:
    try:
        validate_repo_id(ref)
    except hub_errors.HFValidationError:
        return False
    return ref.count("/") == 1


def hub_config(repo_id: str, revision: str | None = None, *, online: bool = True) -> Path:
    """The local path of a Hub repository's ``config.json``: the cached copy, else (``online``)
    downloaded, with ``hf_quant_config.json`` when the repository has one, into the Hugging Face
    cache; within the bounds of ``servelab.plan.hub`` (no call offline, a deadline, the cache's own files only).

    Raises:
        ServelabError: offline and not cached, not found, gated, the Hub unreachable or too slow,
            or a damaged cache entry: one line naming the id and the fixes.
    """
    where = f"--model {repo_id}" + (f"@{revision}" if revision else "")
    if (found := hub.cached(repo_id, "config.json", revision, where)) is not None:
        return found
    fixes = f"download it once where the Hub is reachable (hf download {repo_id} config.json) or give --model the path of its config.json"
    if not online:
        raise ServelabError(f"{where}: not in the Hugging Face cache; {fixes}")
    try:
        path = Path(hub.call(where, huggingface_hub.hf_hub_download, repo_id, "config.json", revision=revision))
    except (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError):  # before EntryNotFoundError, its base
        why = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else f"the Hub ({hub.host()}) could not be reached"
        raise ServelabError(f"{where}: not in the Hugging Face cache and {why}; {fixes}") from None
    except hub_errors.GatedRepoError:
        raise ServelabError(f"{where}: a gated repository; accept its terms on the Hub and log in (hf auth login or HF_TOKEN), or {fixes.split(' or ', 1)[1]}") from None
    except hub_errors.RepositoryNotFoundError:
        raise ServelabError(f"{where}: no such repository on the Hub (or it is private: log in with hf auth login or HF_TOKEN)") from None
    except hub_errors.RevisionNotFoundError:
        raise ServelabError(f"{where}: no such revision; give a branch, tag or commit of {repo_id}") from None
    except hub_errors.EntryNotFoundError:
        raise ServelabError(f"{where}: the repository has no config.json; give --model the path of one") from None
    except hub_errors.HfHubHTTPError as exc:
        raise ServelabError(f"{where}: not in the Hugging Face cache and the Hub did not answer ({type(exc).__name__}); {fixes}") from None
    try:
        hub.call(where, huggingface_hub.hf_hub_download, repo_id, "hf_quant_config.json", revision=revision)
    except (hub_errors.HfHubHTTPError, hub_errors.EntryNotFoundError, ServelabError):
        pass  # most checkpoints have none
    return path


def _read(path: Path, ref: str, name: str) -> ModelSpec:
    try:
        text = read_bytes(path, "--model").decode("utf-8")
    except UnicodeDecodeError:
        raise ServelabError(f"--model {ref}: not a text file (not UTF-8); give a config.json") from None
    cfg = jsonfile.loads(text, f"--model {ref}")
    try:
        CoreConfig.model_validate(text_config(cfg) if isinstance(cfg, dict) else cfg)
        spec = parse_config(cfg, name=name)
    except ValidationError as exc:
        raise ServelabError(f"--model {ref}: {first_problem(exc, 'the file')}; give a Hugging Face config.json") from None
    except KeyError as exc:
        raise ServelabError(f"--model {ref}: the config lacks {exc.args[0]!r}, which its model_type needs; give a Hugging Face config.json") from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # a model-specific field of the wrong type
        raise ServelabError(f"--model {ref}: a field servelab needs is not a number ({type(exc).__name__}: {exc}); give a Hugging Face config.json") from None
    spec.config_path = str(path)
    return spec
