"""Variants of a recipe: ``--set`` / ``--vary`` assignments, their combinations, names and directories."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from servelab.errors import ServelabError
from servelab.recipes.format import NAME_RE, Recipe
from servelab.guards.redaction import MASK, secret_name
from servelab.guards.untrusted import for_filename


def parse_assignments(items: list[str], option: str) -> dict[str, list[str]]:
    """``["max_num_seqs=64,256", "kv_cache_dtype=fp8"]`` → ``{"max_num_seqs": ["64", "256"], …}``.

    Raises:
        ServelabError: an item is not ``NAME=V1[,V2…]`` (naming ``option``).
    """
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not NAME_RE.fullmatch(name) or not values.strip():
            raise ServelabError(f"{option} {item!r}: give NAME=VALUE (e.g. {option} max_num_seqs=64{',256' if option == '--vary' else ''})")
        out[name] = [v.strip() for v in values.split(",")] if option == "--vary" else [values]
    return out


def expand(recipe: Recipe, vary: dict[str, list[str]], fixed: dict[str, str]) -> list[dict[str, str]]:
    """The variants to run: every combination of ``vary`` (``--vary``), else the recipe's
    ``variants``, else the defaults alone; each with ``fixed`` (``--set``) applied."""
    if vary:
        combos = [dict(zip(vary, combo, strict=True)) for combo in itertools.product(*vary.values())]
    else:
        combos = [dict(v) for v in recipe.variants] or [{}]
    return [{**c, **fixed} for c in combos]


def variant_label(values: Mapping[str, str], fixed: Mapping[str, str] | None = None) -> str:
    """A variant's name: its own values as ``a=1,b=2`` (``--set`` values left out; a secret-named
    one's value as ``***``, ``servelab.guards.redaction.secret_name``), or "default"."""
    own = {k: v for k, v in values.items() if k not in (fixed or {})}
    return ",".join(f"{k}={MASK if secret_name(k) else v}" for k, v in own.items()) or "default"


def variant_dir(label: str) -> str:
    """A directory name for a variant label (never a path component: ``servelab.guards.untrusted.for_filename``)."""
    return for_filename(label)
