"""The engine registry: what servelab knows about each inference server, one module per engine.

Engines are :class:`~servelab.engines.base.Engine` instances: servelab's own are the ``ENGINE`` of
the modules ``BUILTIN`` names, imported directly (so a source checkout on ``PYTHONPATH``, with no
installed metadata, still knows every engine); another package adds one under the entry-point group
``servelab.engines``, without editing servelab. :func:`get` finds one by name; a name nobody registered is
served by the generic engine (any OpenAI-compatible server), so old results and imports still load.

Layer: engines. May import: values, guards, errors (docs/architecture.md).
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from importlib.metadata import entry_points

from servelab.engines.base import Engine
from servelab.errors import ServelabError

GROUP = "servelab.engines"
GENERIC = "generic"
BUILTIN = ("vllm", "sglang", "llamacpp", "trtllm", "generic")  # modules of servelab.engines; listed in this order, then plugins by name, then generic
PLAN_ENGINE = "vllm"  # servelab plan models this engine's memory accounting and defaults
KERNEL_NAME_CHARS = 200  # a kernel name from a server log, at most


@cache
def all_engines() -> tuple[Engine, ...]:
    """Every engine: servelab's own first (``BUILTIN``), then plugins by name, generic last.

    Raises:
        ServelabError: an entry point does not load or is not an Engine (naming it).
    """
    found: list[Engine] = [import_module(f"{__name__}.{module}").ENGINE for module in BUILTIN]
    for ep in entry_points(group=GROUP):
        try:
            engine = ep.load()
        except Exception as exc:  # a third-party plugin may fail in any way; say which one
            raise ServelabError(f"engine plugin {ep.name!r} ({ep.value}) does not load: {exc}") from None
        if not isinstance(engine, Engine):
            raise ServelabError(f"engine plugin {ep.name!r} ({ep.value}) is not a servelab.engines.base.Engine instance")
        if all(e.name != engine.name for e in found):
            found.append(engine)
    rank = {engine.name: i for i, engine in enumerate(found[: len(BUILTIN)])}
    return tuple(sorted(found, key=lambda e: (e.name == GENERIC, rank.get(e.name, len(rank)), e.name)))


def get(name: str) -> Engine:
    """The engine called ``name`` (its name or recipe name); the generic engine for an unknown name."""
    return lookup(name) or next(e for e in all_engines() if e.name == GENERIC)


def lookup(name: str) -> Engine | None:
    """The engine called ``name`` (its name or recipe name), or None."""
    return next((e for e in all_engines() if name == e.name or name in e.recipe_names), None)


def jit_kernels(log_text: str) -> list[str]:
    """The kernels a server log says were compiled while serving (every engine's ``jit_warning``),
    in order of first mention, each once, a name cut at ``KERNEL_NAME_CHARS`` (the log is untrusted text)."""
    found: dict[str, None] = {}
    for line in log_text.splitlines():
        for engine in all_engines():
            if engine.jit_warning is not None and (m := engine.jit_warning.search(line)):
                found[m.group(1)[:KERNEL_NAME_CHARS]] = None
    return list(found)


def plan_engine() -> Engine:
    """The engine whose accounting and defaults ``servelab plan`` models (``PLAN_ENGINE``)."""
    return get(PLAN_ENGINE)
