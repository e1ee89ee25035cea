"""Files from outside read with a bound: never more than a limit into memory, whatever the path
names (``/dev/zero``, a FIFO that never ends, a 50 GB file given by mistake).

- :func:`read_bytes`: a whole file (a config.json, an import, a recipe, a dataset) up to a limit;
  a larger one is one line naming it, read no further than the limit plus one byte.
- :func:`head_text`: the first bytes of a log (a server's boot log, ``servelab bootlog``): what a
  boot log says is at its start, and a log that went on for days is read no further;
  :func:`head_bytes` the same as bytes (the start of a weights file).
"""

from __future__ import annotations

import sys
from pathlib import Path

from servelab.errors import ServelabError

MAX_FILE = 256 << 20  # 256 MiB: the largest document servelab reads whole (guards.jsonfile's bound too)
MAX_YAML = 16 << 20  # a recipe, a hardware profile, a workload file: kilobytes; PyYAML is slow on megabytes
MAX_LOG = 64 << 20  # of a log, the first 64 MiB: a boot log is a few hundred KB


def read_bytes(path: Path, what: str, limit: int = MAX_FILE) -> bytes:
    """The bytes of ``path``, at most ``limit``.

    Raises:
        ServelabError: it cannot be read, or it holds more than ``limit`` bytes (naming ``what``
            and the path).
    """
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ServelabError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ServelabError(f"{what} {path}: larger than {limit >> 20} MiB; servelab reads no such file (is it the right one?)")
    return data


def head_text(path: Path, what: str, limit: int = MAX_LOG) -> str:
    """The first ``limit`` bytes of a text file (``-``: standard input) as text, bytes that are not
    UTF-8 replaced.

    Raises:
        ServelabError: it cannot be read, naming ``what`` and the path.
    """
    if str(path) == "-":
        return sys.stdin.buffer.read(limit).decode("utf-8", "replace")
    return head_bytes(path, what, limit).decode("utf-8", "replace")


def head_bytes(path: Path, what: str, limit: int) -> bytes:
    """The first ``limit`` bytes of a file (fewer where it is shorter).

    Raises:
        ServelabError: it cannot be read, naming ``what`` and the path.
    """
    try:
        with path.open("rb") as f:
            return f.read(limit)
    except OSError as exc:
        raise ServelabError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
