"""The Hugging Face Hub, asked within bounds: what servelab reads of it (a config.json, safetensors
headers) comes in time or not at all, and every failure is one line naming the model id.

- **Offline means no call.** With ``HF_HUB_OFFLINE`` set, or the Hub's host name not resolving,
  :func:`call` refuses before any request (huggingface_hub would retry for ~25 s).
- **Bounded.** Each request has huggingface_hub's connect and read timeouts
  (``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``: 10 s); the whole call a deadline,
  :data:`DEADLINE_S` (30 s, or ``$SERVELAB_HUB_DEADLINE_S``), so that a server which trickles a
  byte a second is cut off. The call runs in a
  daemon thread, left behind at the deadline (the command ends; nothing is written by it).
- **The cache stays the cache.** :func:`cached` accepts a cached file only when it resolves inside
  ``HF_HUB_CACHE``: a ``refs/main`` naming ``../../..`` is a damaged cache, not a path.
- **One line.** Any error of huggingface_hub or its HTTP client that the caller does not name
  itself (a dropped connection, a header nested too deep to parse) becomes a ``ServelabError``
  naming the id.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import huggingface_hub
from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors
from huggingface_hub.utils import logging as hub_logging

from servelab.errors import ServelabError

DEADLINE_ENV = "SERVELAB_HUB_DEADLINE_S"


def _deadline(default: float = 30.0) -> float:
    """``$SERVELAB_HUB_DEADLINE_S`` when it is a number of seconds in (0, 3600), else ``default``."""
    try:
        value = float(os.environ.get(DEADLINE_ENV) or default)
    except ValueError:
        return default
    return value if 0 < value < 3600 else default


DEADLINE_S = _deadline()  # one Hub call (a config.json; the headers of every shard) from start to end
T = TypeVar("T")


def host() -> str:
    """The Hub's host name (``HF_ENDPOINT``'s), for messages."""
    return urlsplit(hub_constants.ENDPOINT).hostname or hub_constants.ENDPOINT


def reachable() -> bool:
    """Whether the Hub can be asked: ``HF_HUB_OFFLINE`` is not set and its host name resolves. Quiets
    huggingface_hub's retry warnings (the caller says the outcome in one line)."""
    hub_logging.set_verbosity_error()
    if hub_constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.getaddrinfo(host(), None)
    except OSError:
        return False
    return True


def call(what: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)``, a huggingface_hub call, within :data:`DEADLINE_S`.

    Args:
        what: what is asked, for the messages (``--model acme/tiny``).

    Raises:
        ServelabError: offline or unreachable (no request made), past the deadline, a dropped
            connection or an answer that cannot be parsed (one line naming ``what``).
        huggingface_hub's ``HfHubHTTPError`` family: the Hub's own answers (not found, gated …),
            which the caller names.
    """
    if not reachable():
        why = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else f"the Hub ({host()}) could not be reached"
        raise hub_errors.OfflineModeIsEnabled(why)
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread as it is
            box["error"] = exc

    worker = threading.Thread(target=run, name="servelab-hub", daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    if worker.is_alive():
        raise ServelabError(f"{what}: the Hub ({host()}) did not answer within {DEADLINE_S:.0f} s; try again, "
                            "or give the path of a local config.json / checkpoint directory")  # fmt: skip
    error = box.get("error")
    if isinstance(error, hub_errors.HfHubHTTPError | hub_errors.EntryNotFoundError | hub_errors.OfflineModeIsEnabled
                  | hub_errors.NotASafetensorsRepoError | hub_errors.SafetensorsParsingError):  # fmt: skip
        raise error
    if isinstance(error, Exception):  # the transport's (a dropped connection), a header nested too deep to parse …
        raise ServelabError(f"{what}: asking the Hub ({host()}) failed ({type(error).__name__}: {str(error)[:160]}); try again, "
                            "or give the path of a local config.json / checkpoint directory") from None  # fmt: skip
    if error is not None:
        raise error  # KeyboardInterrupt and the like
    return box["value"]  # type: ignore[return-value]


def cached(repo_id: str, filename: str, revision: str | None, what: str) -> Path | None:
    """The Hugging Face cache's copy of ``filename`` of ``repo_id`` (at ``revision``), or None when it
    has none; never a path outside ``HF_HUB_CACHE``.

    Raises:
        ServelabError: the cache entry is damaged (a ref naming a path outside the cache, or one
            huggingface_hub cannot read), naming the folder to remove.
    """
    try:
        found = huggingface_hub.try_to_load_from_cache(repo_id, filename, revision=revision)
    except (ValueError, OSError) as exc:
        found, damage = None, f"{type(exc).__name__}"
    else:
        damage = None
    root = Path(hub_constants.HF_HUB_CACHE)
    if isinstance(found, str) and not Path(found).resolve().is_relative_to(root.resolve()):
        damage = "it points outside the cache"
    if damage:
        folder = root / f"models--{repo_id.replace('/', '--')}"
        raise ServelabError(f"{what}: the Hugging Face cache's entry is damaged ({damage}); remove {folder} and download it again")
    return Path(found) if isinstance(found, str) else None
