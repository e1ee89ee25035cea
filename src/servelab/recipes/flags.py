"""Server argument lists: adding flags, and hiding secret values (reading them: ``servelab.values.argv``)."""

from __future__ import annotations

import shlex


from servelab.errors import ServelabError
from servelab.guards.redaction import scrub, secret_name


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


def _words(arg: str) -> list[str] | None:
    """``arg`` split as a shell would (``shlex``) when it holds several words, else None."""
    if not any(c.isspace() for c in arg):
        return None
    try:
        words = shlex.split(arg)
    except ValueError:
        return None
    return words if len(words) > 1 else None


def secret_values(argv: list[str], env: dict[str, str]) -> list[str]:
    """The values of ``argv``'s secret-looking flags (``--api-key X``, ``--hf-token=X``) and of
    ``env``'s secret-named variables (``HF_TOKEN``, ``DB_PASSWORD``): what a server may echo back in
    its log, for ``servelab.guards.redaction.remember``."""
    out = [v for k, v in env.items() if secret_name(k)]
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if a.startswith("-") and secret_name(name):
            out.append(value if eq else argv[i + 1] if i + 1 < len(argv) else "")
    return [v for v in out if v]


def redact(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking flags and variables (``--api-key X``,
    ``--hf-token=X``, ``HF_TOKEN=X``) replaced by ``***``, and every known secret value or
    credential-shaped text (``Bearer …``, ``sk-…``: ``servelab.guards.redaction.scrub``) masked; for
    anything stored or printed. An argument holding a command line of its own (ssh's remote
    command, ``env K=V …``) is redacted word by word."""
    out: list[str] = []
    hide = False
    for a in argv:
        name, eq, _ = a.partition("=")
        inner = _words(a) if not hide else None
        if inner is not None and (red := redact(inner)) != [scrub(w) for w in inner]:  # a command line in one argument (ssh's remote command) with secret flags or variables
            out.append(shlex.join(red))
        elif hide:
            out.append("***")
            hide = False
        elif secret_name(name) and eq:
            out.append(name + "=***")
        else:
            hide = a.startswith("-") and secret_name(name)
            out.append(scrub(a))
    return out
