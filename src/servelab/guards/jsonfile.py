"""JSON from outside (options, dataset lines, config.json files, imported results) read with bounds,
and JSON servelab writes kept strict (:func:`dumps`: ``null``, never ``NaN`` or ``Infinity``, which
RFC 8259 has not and ``jq`` refuses).

Python's ``json`` recurses once per nesting level: a 20,000-deep document raises ``RecursionError``
(a traceback) and a deep one that parses still makes every later walk over it slow. :func:`loads`
refuses a document larger than ``MAX_BYTES`` or nested deeper than ``MAX_DEPTH`` with one line that
names the input; servelab's own files nest a few levels, real configs and results under 20.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from servelab.errors import ServelabError
from servelab.guards.files import MAX_FILE

MAX_DEPTH = 64
MAX_BYTES = MAX_FILE  # 256 MiB: the largest results file servelab reads whole


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def depth(text: str | bytes) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text``, strings skipped: linear in its length."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    level = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        level += 1 if m.group() in "[{" else -1
        deepest = max(deepest, level)
    return deepest


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number of strict JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is beyond a double")
    return value


def loads(text: str | bytes, what: str, hint: str = "", *, finite: bool = False) -> Any:
    """``text`` parsed as JSON; ``what`` names the input in errors (``--chat-template-kwargs``,
    ``data.jsonl line 3``), ``hint`` ends the invalid-JSON one (what to give instead). With
    ``finite``, strict JSON: ``NaN``, ``Infinity`` and numbers beyond a double (``1e400``) are refused
    (servelab's own documents never hold them: they are written with :func:`dumps` or pydantic).

    Raises:
        ServelabError: larger than ``MAX_BYTES``, nested deeper than ``MAX_DEPTH``, not valid JSON,
            or (``finite``) a number that is not finite.
    """
    if len(text) > MAX_BYTES:
        raise ServelabError(f"{what}: {len(text):,} bytes of JSON, more than servelab reads ({MAX_BYTES >> 20} MiB)")
    if depth(text) > MAX_DEPTH:
        raise ServelabError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels; servelab reads no such document")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float) if finite else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServelabError(f"{what}: not JSON ({exc.msg} at line {exc.lineno}){hint and '; ' + hint}") from None
    except ValueError as exc:  # finite: NaN, Infinity, 1e400
        raise ServelabError(f"{what}: {exc}; it was not written by servelab or was changed since") from None
    except UnicodeDecodeError:
        raise ServelabError(f"{what}: not a text file (not UTF-8){hint and '; ' + hint}") from None


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``value`` as strict JSON (``json.dumps(allow_nan=False)``): a NaN or infinite float is ``null``.
    ``kwargs`` as ``json.dumps``'s (``indent``)."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)
