"""A server's argument list read as flags: whether one is given, and its value or values.

Flags are matched with ``_`` and ``-`` alike (``--max_num_seqs`` is ``--max-num-seqs``), in both
spellings ``--x v`` and ``--x=v``. Which flag means what for an engine is the engine's
(``servelab.engines``: ``Engine.flags``); adding flags and hiding secret values is ``servelab.recipes.flags``.
"""

from __future__ import annotations


def _flag_name(arg: str) -> str:
    """``--max_num_seqs=8`` → ``--max-num-seqs``; a short flag or a value is kept as it is."""
    return arg.split("=", 1)[0].replace("_", "-") if arg.startswith("--") else arg


def has_flag(argv: list[str], *names: str) -> bool:
    """True when ``argv`` gives any of ``names`` (``--x v``, ``--x=v``; ``_`` and ``-`` alike)."""
    wanted = {n.replace("_", "-") for n in names}
    return any(_flag_name(a) in wanted for a in argv)


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``--x v`` or ``--x=v``), or None."""
    wanted = {n.replace("_", "-") for n in names}
    found = None
    for i, a in enumerate(argv):
        if _flag_name(a) in wanted:
            found = a.split("=", 1)[1] if "=" in a and a.startswith("--") else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def flag_values(argv: list[str], name: str) -> list[str]:
    """Every value after ``name`` up to the next flag (``--x 1 2 4``, ``--x=1,2,4``, ``--x 1,2``)."""
    for i, a in enumerate(argv):
        if a == name or a.startswith(name + "="):
            tail = [a.split("=", 1)[1]] if "=" in a else _until_flag(argv[i + 1 :])
            return [v for t in tail for v in t.replace(",", " ").split()]
    return []


def _until_flag(args: list[str]) -> list[str]:
    out = []
    for a in args:
        if a.startswith("-"):
            break
        out.append(a)
    return out
