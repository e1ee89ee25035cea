"""The one error type that reaches users as a single clear line (never a traceback), and
:func:`writing`, which makes a failed write name its file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError


class ServelabError(Exception):
    """A problem the user can fix: bad input, an unreachable server, a request that cannot fit.

    The message is one line that names the input and the fix. The CLI prints it and exits with
    code 2; library callers may catch it like any exception.
    """


def first_problem(exc: ValidationError, whole: str) -> str:
    """The first thing pydantic found wrong, as ``"field.path: message"`` (``whole`` in place of the
    path when the document itself is wrong, e.g. a list where a mapping belongs)."""
    err = exc.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(str(p) for p in err['loc']) or whole}: {err['msg']}"


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Name ``path`` in an ``OSError`` raised inside (a full disk, ENOSPC, is raised by a write
    with no file name), so that the one-line error says which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
