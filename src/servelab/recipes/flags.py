"""Server argument lists: adding flags, and hiding secret values (reading them: ``servelab.values.argv``)."""

from __future__ import annotations

import re

from servelab.errors import ServelabError
from servelab.guards.redaction import scrub

SECRET_WORDS = ("key", "token", "secret", "password")


def parse_port(value: str) -> int:
    if not value.isdecimal() or not 0 < int(value) < 65536:
        raise ServelabError(f"port {value!r} is not a TCP port; pass --set port=8000")
    return int(value)


def flag_args(name: str, value: str) -> list[str]:
    """``max_num_seqs``, ``64`` → ``["--max-num-seqs", "64"]``; true → the bare flag; false → nothing."""
    flag = "--" + name.replace("_", "-")
    if value.lower() == "true":
        return [flag]
    if value.lower() == "false":
        return []
    return [flag, value]


def is_secret(name: str) -> bool:
    """True for names like ``--api-key``, ``--hf-token``, ``HF_TOKEN`` (word match: ``--max-num-batched-tokens`` is not)."""
    return any(w in SECRET_WORDS for w in re.split(r"[-_]+", name.lower()))


def redact(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking flags and variables (``--api-key X``,
    ``--hf-token=X``, ``HF_TOKEN=X``) replaced by ``***``, and every known secret value or
    credential-shaped text (``Bearer …``, ``sk-…``: ``servelab.guards.redaction.scrub``) masked; for
    anything stored or printed."""
    out: list[str] = []
    hide = False
    for a in argv:
        name, eq, _ = a.partition("=")
        if hide:
            out.append("***")
            hide = False
        elif is_secret(name) and eq:
            out.append(name + "=***")
        else:
            hide = a.startswith("-") and is_secret(name)
            out.append(scrub(a))
    return out
