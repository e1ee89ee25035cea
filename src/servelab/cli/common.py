"""What every ``servelab`` command shares: the consoles, the one-line error exit, signals, the
event loop, run directories, the runs database, and a measurement under a progress bar.

Exit codes: 0 success; 1 the run finished but requests failed or the run is partial; 2 bad input
or an unusable server (one clear line, no traceback); 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import signal
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from servelab.errors import ServelabError
from servelab.store.imports import read_results
from servelab.run.measure import Served, measure
from servelab.metrics.summary import LevelSummary
from servelab.run.options import BenchOptions
from servelab.values.records import RequestRecord
from servelab.guards.redaction import scrub
from servelab.store.results import RunResult, default_run_dir
from servelab.settings import Target
from servelab.plan import hub
from servelab.plan.model_spec import load_model
from servelab.values.specs import ModelSpec
from servelab.store.database import Store, database_url
from servelab.guards.untrusted import for_terminal

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
    ``servelab.guards.untrusted.for_terminal``: no control character from a model id, a server error or a
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


DOCUMENTS = ("run.json", "records.jsonl", "sweep.json", "variant.json", "tune.json", "launch.json")  # servelab's own documents: never the target of an output
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of an SQLite database (sqlite.org/fileformat.html, 1.3)


def _refuse_target(path: Path, option: str) -> None:
    """Refuse an output path that is not a place for a new file: a directory, a device, FIFO or
    socket (os.replace would put a regular file in its place), or one of servelab's own documents
    (a run's run.json or records, a sweep's, the runs database), which an output must never replace.

    Raises:
        ServelabError: naming ``option``, the path and what it is.
    """
    if not path.name or path.is_dir():
        raise ServelabError(f"{option} {str(path)!r}: give a file name")
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # nothing there yet (or nothing readable: the write says so)
    if not stat.S_ISREG(mode):
        raise ServelabError(f"{option} {path}: not a regular file (a device, FIFO or socket); give a file path")
    with contextlib.suppress(OSError), path.open("rb") as f:
        database = f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    if path.name in DOCUMENTS or database:
        what = "the runs database" if database else f"servelab's {path.name}"
        raise ServelabError(f"{option} {path}: holds {what}, which an output never replaces; give another file")


def write_file(path: Path, data: str | bytes, option: str) -> None:
    """The one writer of every output a command writes where the user says (``--output``,
    ``--markdown``, ``--plot``, ``--out``): atomically (a temporary file beside it, then
    ``os.replace``), so a failure never leaves a half-written file; text with secrets masked
    (``servelab.guards.redaction.scrub``); never over a directory, a device or one of servelab's own
    documents (:func:`_refuse_target`).

    Raises:
        ServelabError: no file name, a path that is no place for the output, or cannot write there,
            naming ``option`` and the path.
    """
    _refuse_target(path, option)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(scrub(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise ServelabError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None


OUTPUT_MARKERS = {"run": "run.json", "sweep": "sweep.json", "grid": "grid.csv", "tune": "tune.json"}  # what each command leaves at the top of its --output


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


def sigterm_as_sigint() -> None:
    """Treat SIGTERM and SIGHUP (a dropped ssh session) like Ctrl-C, so a killed servelab still
    stops its server and saves the partial run. (SIGKILL cannot be caught: the servers' lifelines,
    ``servelab.server.process``, stop them then.)

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


def remember(path: Path, display: Console | None = None) -> None:
    """Store the runs under ``path`` in the runs database, saying so on ``display`` (default the
    console; stderr for a command printing JSON). A failure is only a warning: the run directory on
    disk is the source of truth, and ``servelab import`` can add it later."""
    if not any(path.rglob("run.json")):
        return  # nothing measured (every variant failed to start, every cell failed)
    try:
        runs = read_results(path)
        Store(database_url()).add(runs)
        (display or console).print(f"[dim]{len(runs)} run(s) stored in the runs database (servelab runs, servelab ui)[/]", highlight=False)
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


class ProgressHooks:
    """Draws a Rich progress bar per phase and prints each level's row as it finishes."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: int | None = None

    def phase_started(self, concurrency: int, phase: str, total: int | None, duration_s: float | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        what = f"{duration_s:.0f} s" if duration_s else f"{total} requests"
        self.task = self.progress.add_task(f"c={concurrency} {phase} ({what})", total=total)

    def record_done(self, record: RequestRecord) -> None:
        if self.task is not None:
            self.progress.advance(self.task)

    def prompt_built(self, done: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=done)

    def level_done(self, summary: LevelSummary) -> None:
        ok, bad = summary.ok, summary.failed_requests + summary.incomplete
        tput = summary.output_throughput_tok_s or 0.0
        level = f"rate={summary.rate_rps}/s" if summary.rate_rps else f"c={summary.concurrency}"
        self.progress.console.print(f"{level}: {ok} ok, {bad} failed/incomplete, {tput:,.1f} output tok/s")


def read_model(model: str, revision: str | None = None) -> ModelSpec:
    """``servelab.plan.model_spec.load_model`` under a status line on stderr saying what it waits
    for: a Hub id not in the cache is fetched within ``servelab.plan.hub.DEADLINE_S``."""
    with err_console.status(f"reading {escape(model)} (from the Hugging Face Hub if it is not cached: at most {hub.DEADLINE_S:.0f} s)…"):
        return load_model(model, revision)


def warn(message: str) -> None:
    """A warning line on stderr, in yellow (what leaves a figure out without being an error)."""
    err_console.print(f"[yellow]{escape(message)}[/]", soft_wrap=True)


def measured(runner: asyncio.Runner, served: Served, target: Target, options: BenchOptions, run_dir: Path | None, api_key_env: str,
             display: Console | None = None) -> tuple[RunResult, Path]:  # fmt: skip
    """``servelab.run.measure.measure`` under a progress bar on ``display`` (default the console;
    stderr for a command printing JSON): the run and its directory."""
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=display or console, transient=True,
    ) as progress:  # fmt: skip
        return runner.run(measure(served, target, options, run_dir, ProgressHooks(progress), warn, api_key_env))
