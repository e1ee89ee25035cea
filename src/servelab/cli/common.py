"""What every ``servelab`` command shares: the consoles, the one-line error exit, option parsers,
signals, the event loop, run directories and the runs database.

Exit codes: 0 success; 1 the run finished but requests failed or the run is partial; 2 bad input
or an unusable server (one clear line, no traceback); 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.text import Text

from servelab import jsonfile
from servelab.errors import ServelabError
from servelab.imports import read_results
from servelab.redaction import scrub
from servelab.store import Store, database_url
from servelab.untrusted import for_terminal

class _Survivable:
    """A console's file that outlives its reader: after the pipe closes (``servelab bench | head``)
    or the terminal goes (SIGHUP), writes go to /dev/null, so the run still finishes, is stored,
    and exits with its own code (Python's advice for SIGPIPE: point the descriptor at devnull)."""

    GONE = (errno.EPIPE, errno.EIO)

    def __init__(self, file: object) -> None:
        self._file = file

    def write(self, text: str) -> int:
        try:
            return self._file.write(text)
        except OSError as exc:
            self._gone(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as exc:
            self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        if exc.errno not in self.GONE:
            raise exc
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._file.fileno())

    def __getattr__(self, name: str) -> object:
        return getattr(self._file, name)


class SafeConsole(Console):
    """A console that renders every string it is given (a message, a table cell, a title) through
    ``servelab.untrusted.for_terminal``: no control character from a model id, a server error or a
    file reaches the terminal, and no secret is printed; a string whose Rich markup does not parse
    is printed as text instead of raising. Its output survives a closed pipe (:class:`_Survivable`)."""

    @property
    def file(self) -> object:
        return _Survivable(Console.file.fget(self))

    @file.setter
    def file(self, new_file: object) -> None:
        Console.file.fset(self, new_file)

    def render_str(self, text: str, **kwargs: object) -> Text:
        text = for_terminal(text)
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:
            return super().render_str(text, **{**kwargs, "markup": False})


# Tables are wide; when output is not a terminal (a file, CI) do not squeeze them to 80 columns.
console = SafeConsole(width=None if Console().is_terminal else 200)
err_console = SafeConsole(stderr=True, width=None if Console(stderr=True).is_terminal else 200)
DbOpt = Annotated[str | None, typer.Option("--db", help="Runs database: an SQLite file or a SQLAlchemy URL (postgresql+psycopg://…); default $SERVELAB_DB or the per-user data directory.")]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear error line and exit."""
    err_console.print(f"[bold red]error:[/] {escape(scrub(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def one_line_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Wrap a command so that what the library raises ends as one line, never a traceback:
    ``ServelabError`` (exit 2) and file-system errors (a full disk, a read-only or missing folder;
    exit 2, naming the file)."""

    @functools.wraps(command)
    def wrapped(*args: object, **kwargs: object) -> None:
        try:
            command(*args, **kwargs)
        except ServelabError as exc:
            fail(str(exc))
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}; check the path, its permissions and free space")

    return wrapped


def read_text(path: Path, option: str) -> str:
    """A text file's content (``-``: standard input); bytes that are not UTF-8 are replaced.

    Raises:
        ServelabError: it cannot be read, naming ``option`` and the path.
    """
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ServelabError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None


def write_file(path: Path, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then ``os.replace``), so a
    failure never leaves a half-written file; secrets masked (``servelab.redaction.scrub``).

    Raises:
        ServelabError: no file name, a directory, or cannot write there, naming ``option`` and the path.
    """
    if not path.name or path.is_dir():
        raise ServelabError(f"{option} {str(path)!r}: give a file name")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(scrub(text), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise ServelabError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None


OUTPUT_MARKERS = {"run": "run.json", "sweep": "sweep.json", "grid": "grid.csv"}  # what each command leaves at the top of its --output


def check_output_kind(path: Path | None, kind: str) -> None:
    """Refuse an ``--output`` that already holds another command's results (a sweep directory for
    bench, a bench run for grid …): resuming there would mix them.

    Raises:
        ServelabError: naming the directory, what it holds and what was asked.
    """
    for other, marker in OUTPUT_MARKERS.items():
        if path is not None and other != kind and (path / marker).is_file():
            raise ServelabError(f"--output {path}: holds a {other} ({marker}), not a {kind}; give another directory")


def output_dir(path: Path | None, kind: str, label: str | None = None) -> Path:
    """The directory a ``kind`` command writes to: ``path`` (``--output``, refused when it holds another
    command's results: :func:`check_output_kind`), else a new one under servelab-runs/ named by
    ``label`` (default ``kind``).

    Raises:
        ServelabError: ``path`` holds another command's results.
    """
    check_output_kind(path, kind)
    return path or default_run_dir(label or kind)


MAX_STREAMS = 100_000  # concurrency: streams one run keeps in flight (10,000 measured on one host, README)


def parse_int_list(value: str, option: str, minimum: int = 1, maximum: int = 10_000_000) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``; every item an integer from ``minimum`` (0 or 1) to ``maximum``
    (tokens: 10 million; ``--concurrency``: :data:`MAX_STREAMS`).

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or not all(v.isdecimal() and len(v) <= 9 and minimum <= int(v) <= maximum for v in items):  # isdecimal: '²' is a digit int() refuses
        kind = "positive integers" if minimum > 0 else "integers ≥ 0"
        raise ServelabError(f"{option} {value!r}: give {kind} up to {maximum:,} separated by commas, e.g. {minimum},2,4")
    return [int(v) for v in items]


def parse_float_list(value: str, option: str) -> list[float]:
    """``"0.5,1,2"`` → ``[0.5, 1.0, 2.0]``; every item a positive finite number (not nan or inf).

    Raises:
        ServelabError: naming ``option`` and the bad item.
    """
    try:
        items = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        items = []
    if not items or any(not math.isfinite(v) or v <= 0 for v in items):
        raise ServelabError(f"{option} {value!r}: give positive finite numbers separated by commas, e.g. 0.5,1,2")
    return items


def parse_duration(value: str) -> float:
    """``"90"``, ``"90s"``, ``"2m"``, ``"1h"`` → seconds.

    Raises:
        ServelabError: not a positive duration.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
    if not m or float(m.group(1)) <= 0:
        raise ServelabError(f"--duration {value!r}: give a positive duration such as 90s, 2m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_json_object(value: str | None, option: str) -> dict | None:
    """Parse a JSON object option (``--chat-template-kwargs``).

    Raises:
        ServelabError: not a JSON object.
    """
    if value is None:
        return None
    obj = jsonfile.loads(value, option)
    if not isinstance(obj, dict):
        raise ServelabError(f"{option}: give a JSON object, e.g. '{{\"enable_thinking\": false}}'")
    return obj


def sigterm_as_sigint() -> None:
    """Treat SIGTERM and SIGHUP (a dropped ssh session) like Ctrl-C, so a killed servelab still
    stops its server and saves the partial run. (SIGKILL cannot be caught: the servers' lifelines,
    ``servelab.process``, stop them then.)

    A job a script starts in the background (``servelab bench … &``) inherits SIGINT ignored; SIGINT
    (and so SIGTERM, forwarded as SIGINT) would then do nothing, so servelab takes SIGINT back."""
    if threading.current_thread() is threading.main_thread():  # (signals can only be set there)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: os.kill(os.getpid(), signal.SIGINT))


def event_loop_runner() -> asyncio.Runner:
    """An asyncio runner on uvloop where available (lower per-chunk cost, see benchmarks/)."""
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        return asyncio.Runner()


def default_run_dir(label: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] or "run"
    return Path("servelab-runs") / f"{stamp}-{slug}"


def remember(path: Path) -> None:
    """Store the runs under ``path`` in the runs database. A failure is only a warning: the run
    directory on disk is the source of truth, and ``servelab import`` can add it later."""
    if not any(path.rglob("run.json")):
        return  # nothing measured (every variant failed to start, every cell failed)
    try:
        runs = read_results(path)
        Store(database_url()).add(runs)
        console.print(f"[dim]{len(runs)} run(s) stored in the runs database (servelab runs, servelab ui)[/]", highlight=False)
    except ServelabError as exc:
        err_console.print(f"[yellow]not stored in the runs database:[/] {escape(str(exc))}", soft_wrap=True)


def serve_until_ctrl_c(url: str, where: str, wait: Callable[[], str], stop: Callable[[], None]) -> None:
    """Say where a started server is, block in ``wait`` until it exits (its message, exit code 1)
    or until Ctrl-C (exit 0), and stop it either way."""
    try:
        console.print(f"serving at [bold]{escape(url)}[/] {escape(where)}", soft_wrap=True)
        console.print(f"try: servelab bench --url {url}", soft_wrap=True, markup=False)
        console.print("press Ctrl-C to stop")
        fail(wait(), 1)
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        stop()


def store_at(db: str | None) -> Store:
    """The runs database at ``--db`` (default ``$SERVELAB_DB`` or the per-user one)."""
    return Store(database_url(db))
