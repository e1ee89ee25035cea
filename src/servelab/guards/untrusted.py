"""Text from outside (model ids, versions, server errors, imported files, boot-log lines, names read
from files) made safe for each place it goes: one function per sink. What is kept of it (a
record's error, a boot log's warnings) passes :func:`outside` when it is read.

- terminal: :func:`plain` (C0 and C1 control characters, DEL and bidirectional overrides removed:
  no escape sequence retitles or clears a terminal) with secrets masked; the CLI's consoles apply it
  to every string they render (``servelab.cli.common``), and Rich markup in it is escaped where a
  message is built (``rich.markup.escape``);
- HTML: Jinja2's autoescape (``servelab.report.html``), over :func:`plain`;
- plots: math text off (``text.parse_math``, ``servelab.report.plots``) and :func:`plain`;
- CSV: :func:`for_csv` (a cell a spreadsheet would run as a formula gets a leading ``'``, the
  OWASP "CSV injection" advice);
- file names: :func:`for_filename` (never a path component: no separator, no ``..``).
"""

from __future__ import annotations

import re

from servelab.guards.redaction import scrub

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # tab and newline kept
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._=,+-]+")


def plain(text: str) -> str:
    """``text`` without control characters (C0 but tab and newline, DEL, C1) or bidirectional
    overrides: what a terminal, a page or a plot may show."""
    return CONTROL.sub("", text)


def for_terminal(text: str) -> str:
    """``text`` for a terminal: :func:`plain`, secrets masked (``servelab.guards.redaction.scrub``)."""
    return scrub(plain(text))


def outside(text: str, limit: int) -> str:
    """Text read from outside (a server's error body, a boot-log line, a header, a model name) as
    servelab keeps it: :func:`for_terminal` (control characters removed, secrets masked by shape and
    by the environment's secret names) and at most ``limit`` characters (``…`` marks a cut)."""
    text = for_terminal(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def for_csv(value: object) -> object:
    """A CSV cell: a string that starts like a formula (``=``, ``+``, ``-``, ``@``, tab, CR) gets a
    leading ``'`` so that a spreadsheet shows it as text; other values unchanged. Numbers are not
    strings here, so a negative number stays a number."""
    if isinstance(value, str):
        value = for_terminal(value)
        if value.startswith(FORMULA_START):
            return "'" + value
    return value


def for_filename(name: str, fallback: str = "unnamed") -> str:
    """``name`` as one file or directory name: characters other than letters, digits and
    ``. _ = , + -`` become ``_``, leading dots are dropped (no ``..``, no hidden file), at most 120
    characters; ``fallback`` when nothing is left."""
    return _UNSAFE_NAME.sub("_", name).lstrip(".")[:120] or fallback
