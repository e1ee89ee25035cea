"""Secrets never reach results, logs or reports: known values and secret-shaped text are masked.

A secret is known by value once servelab reads it (the API key from ``--api-key-env``, the values
of a recipe's ``pass_env`` variables): :func:`remember`. :func:`scrub` replaces every known value,
and text shaped like a credential whatever its source (``Bearer …``, ``Basic …``, OpenAI-style ``sk-…`` keys,
Hugging Face ``hf_…`` tokens, the password of a ``user:password@host`` URL), with ``***``. It is
applied to everything servelab writes or prints that a server or a user could have filled:
request error texts, error messages, stored commands and endpoint URLs.
"""

from __future__ import annotations

import re

MASK = "***"
MIN_SECRET_LEN = 4  # shorter values would mask ordinary words and numbers
SHAPES = re.compile(
    r"(?i)(?<=\bbearer )\S+"  # Authorization: Bearer <token>
    r"|(?<=\bbasic )[A-Za-z0-9+/]{8,}={0,2}"  # Authorization: Basic <base64 user:password>
    r"|\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI-style API keys
    r"|\bhf_[A-Za-z0-9]{8,}"  # Hugging Face tokens
)
URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+(?=@)")  # the password of user:password@ in a URL
_known: set[str] = set()


def remember(value: str | None) -> None:
    """Treat ``value`` as a secret from now on (ignored when empty or shorter than ``MIN_SECRET_LEN``)."""
    if value and len(value) >= MIN_SECRET_LEN:
        _known.add(value)


def scrub(text: str) -> str:
    """``text`` with every credential-shaped part and every known secret value replaced by ``***``
    (a URL's ``user:password@`` becomes ``user:***@``)."""
    text = URL_PASSWORD.sub(r"\1" + MASK, SHAPES.sub(MASK, text))
    for value in sorted(_known, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def mask_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by ``***`` (the user kept)."""
    return URL_PASSWORD.sub(r"\1" + MASK, url)
