"""Secrets never reach results, logs or reports: known values and secret-shaped text are masked.

A secret is known by value once servelab reads it (the API key from ``--api-key-env``, the values
of a recipe's ``pass_env`` variables): :func:`remember`. :func:`scrub` replaces every known value,
and text shaped like a credential whatever its source (``Bearer …``, ``Basic …``, a credential
header's value (``Authorization: Token …``, ``x-api-key: …``, ``Cookie: …``), OpenAI-style ``sk-…`` keys,
Hugging Face ``hf_…`` tokens, a URL's password and its secret query values, ``key=value`` and
``'key': 'value'`` pairs whose key names a secret), with ``***``.

URLs are masked by parsing them (:func:`mask_url`, ``urllib.parse``): the password of the user
info whatever it holds (an empty user, ``@`` or ``:`` in the password), and the values of query
keys that name a secret (:data:`SECRET_NAMES`, whole names: ``hf_token`` is one, ``first_token`` is not). Secret-named keys in
structured data (a boot log's arguments, a recipe's ``env``) are masked by :func:`mask_keys`.

The boundary: every document servelab writes (``run.json``, ``records.jsonl``, ``variant.json``,
database rows, reports and exports built from them) is serialised through :func:`dump`, and every
line it prints passes :func:`scrub` (``servelab.cli.common``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel

MASK = "***"
MIN_SECRET_LEN = 4  # shorter values would mask ordinary words and numbers
SECRET_NAMES = ("api_key", "apikey", "x_api_key", "token", "access_token", "auth_token", "bearer_token", "hf_token",
                "hugging_face_hub_token", "huggingface_token", "secret", "secret_key", "client_secret", "aws_secret_access_key",
                "password", "passwd", "pwd", "auth", "authorization", "credentials", "key")  # whole names only: first_token is no secret
_NAMES = "|".join(n.replace("_", "[_-]") for n in sorted(SECRET_NAMES, key=len, reverse=True))
SECRET_KEY = re.compile(rf"(?i)(?:--)?(?:{_NAMES})")  # a key (dict, query, env, flag) naming a secret, matched whole (fullmatch)
_TEXT_NAMES = "|".join(n.replace("_", "[_-]") for n in sorted(SECRET_NAMES, key=len, reverse=True) if "_" in n or n in ("apikey", "password", "passwd"))
SHAPES = re.compile(  # one \b before the prefixed tokens, not one per alternative: the regex is tried at every character of every record written
    r"(?i)(?<=\bbearer[ \t])[^\s\"'<>]+"  # Authorization: Bearer <token> (a space or a tab after it)
    r"|(?<=\bbasic )[A-Za-z0-9+/]{8,}={0,2}"  # Authorization: Basic <base64 user:password>
    r"|\b(?:sk-[A-Za-z0-9_\-]{8,}"  # OpenAI-style API keys
    r"|hf_[A-Za-z0-9]{8,}"  # Hugging Face tokens
    r"|gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|AKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|AIza[0-9A-Za-z_\-]{16,}"  # Google API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,})"  # Slack tokens
    r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)?"  # JSON web tokens (a base64url JSON header, dot-separated parts)
)
AWS_SECRET = re.compile(  # 40 characters of base64 with upper and lower case and a digit (an AWS secret key; a hex hash has no upper case)
    r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))(?=[a-z0-9/+]*[A-Z])(?=[A-Z0-9/+]*[a-z])(?=[A-Za-z/+]*[0-9])[A-Za-z0-9/+]{40}")
FREE_KEY_VALUE = re.compile(r"(?i)((?<![\w-])(?:token|key|secret|auth)=)(?=[^\s&\"'<>,;]*\d)([^\s&\"'<>,;]{8,})")  # token=… in free text: 8 characters or more, a digit among them
KEY_VALUE = re.compile(rf"(?i)((?<![\w-])(?:--)?(?:{_TEXT_NAMES})['\"]?\s*[=:]\s*\[?['\"]?)([^\s&\"'<>,;\]]+)")  # in free text the unambiguous names only ("token: 212" is a log's prose): API_KEY=…, --hf-token=…, 'api_key': '…'
HEADER = re.compile(  # an HTTP credential header as a log prints it: "Authorization: Token abc", "x-api-key: abc", "Cookie: s=abc"
    r"(?i)((?<![\w-])(?:proxy-)?(?:authorization|x-api-key|api-key|x-goog-api-key|x-auth-token|cookie|set-cookie)['\"]?\s*[:=]\s*['\"]?"
    r"(?:(?:bearer|basic|token|digest|apikey|key)\s+)?)([^\s\"'<>,;]+)")
URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>`]+")
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credentials")  # words of an environment variable's or flag's name
_known: set[str] = set()


def remember(value: str | None) -> None:
    """Treat ``value`` as a secret from now on (ignored when empty or shorter than ``MIN_SECRET_LEN``)."""
    if value and len(value) >= MIN_SECRET_LEN:
        _known.add(value)


def secret_name(name: str) -> bool:
    """True for names like ``--api-key``, ``--hf-token``, ``HF_TOKEN``, ``OPENAI_API_KEY`` (a word of
    the name, split at ``-`` and ``_``, is in :data:`SECRET_WORDS`: ``--max-num-batched-tokens`` is not)."""
    return any(w in SECRET_WORDS for w in re.split(r"[-_]+", name.lower()))


def remember_environment(environ: Mapping[str, str]) -> None:
    """Treat the values of ``environ``'s secret-named variables (:func:`secret_name`: ``HF_TOKEN``,
    ``OPENAI_API_KEY`` …) as secrets: masked wherever they turn up, whoever echoes them."""
    for name, value in environ.items():
        if secret_name(name):
            remember(value)


def mask_url(url: str) -> str:
    """``url`` with its password (user kept, empty or not) and its secret-named query values
    replaced by ``***``; parsed with ``urllib.parse``. Text that does not parse as a URL is
    returned as it is."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return url
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")  # the last @ ends the user info: a password may hold @
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}" if not user or len(user) >= 16 else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(SECRET_KEY.fullmatch(k) for k, _ in pairs):
            query = urlencode([(k, MASK if SECRET_KEY.fullmatch(k) else v) for k, v in pairs], safe="*")
    if (netloc, query) == (parts.netloc, parts.query):  # nothing to mask: as given (urlunsplit would turn sqlite:////tmp/db into sqlite://tmp/db)
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str) -> str:
    """``text`` with every URL masked (:func:`mask_url`), every credential-shaped part and every
    known secret value replaced by ``***``."""
    text = URL.sub(lambda m: mask_url(m.group(0)), text)
    text = KEY_VALUE.sub(r"\1" + MASK, HEADER.sub(r"\1" + MASK, SHAPES.sub(MASK, text)))
    text = FREE_KEY_VALUE.sub(r"\1" + MASK, AWS_SECRET.sub(MASK, text))
    for value in sorted(_known, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def mask_keys(data: object) -> object:
    """``data`` (dicts, lists, strings) with the values of secret-named keys (``api_key``,
    ``hf_token``, ``password`` …, :data:`SECRET_KEY`) replaced by ``***``; other strings scrubbed."""
    if isinstance(data, dict):
        return {k: MASK if isinstance(k, str) and SECRET_KEY.fullmatch(k) and v not in (None, "", False) else mask_keys(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [mask_keys(v) for v in data]
    return scrub(data) if isinstance(data, str) else data


def dump(doc: BaseModel, **kwargs: object) -> str:
    """``doc`` as JSON (``model_dump_json(**kwargs)``), scrubbed: the one way servelab writes a document."""
    return scrub(doc.model_dump_json(**kwargs))
