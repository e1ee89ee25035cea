"""JSON from outside (options, dataset lines, config.json files, imported results) read with bounds.

Python's ``json`` recurses once per nesting level: a 20,000-deep document raises ``RecursionError``
(a traceback) and a deep one that parses still makes every later walk over it slow. :func:`loads`
refuses a document larger than ``MAX_BYTES`` or nested deeper than ``MAX_DEPTH`` with one line that
names the input; servelab's own files nest a few levels, real configs and results under 20.
"""

from __future__ import annotations

import json
import re
from typing import Any

from servelab.errors import ServelabError

MAX_DEPTH = 64
MAX_BYTES = 256 << 20  # 256 MiB: the largest results file servelab reads whole


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


def loads(text: str | bytes, what: str, hint: str = "") -> Any:
    """``text`` parsed as JSON; ``what`` names the input in errors (``--chat-template-kwargs``,
    ``data.jsonl line 3``), ``hint`` ends the invalid-JSON one (what to give instead).

    Raises:
        ServelabError: larger than ``MAX_BYTES``, nested deeper than ``MAX_DEPTH``, or not valid JSON.
    """
    if len(text) > MAX_BYTES:
        raise ServelabError(f"{what}: {len(text):,} bytes of JSON, more than servelab reads ({MAX_BYTES >> 20} MiB)")
    if depth(text) > MAX_DEPTH:
        raise ServelabError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels; servelab reads no such document")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServelabError(f"{what}: not JSON ({exc.msg} at line {exc.lineno}){hint and '; ' + hint}") from None
    except UnicodeDecodeError:
        raise ServelabError(f"{what}: not a text file (not UTF-8){hint and '; ' + hint}") from None
