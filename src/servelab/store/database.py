"""The runs database: every run servelab measures or imports, for listing, comparing and the leaderboard.

SQLite by default (``servelab.db`` in the per-user data directory, ``platformdirs.user_data_dir``),
or any SQLAlchemy URL (``postgresql+psycopg://user@host/db``) given with ``--db`` or the
``SERVELAB_DB`` environment variable (a plain path means an SQLite file). The schema is created and
upgraded with Alembic migrations (``servelab/migrations``) when the database is opened.

The run directories on disk stay the source of truth: a row keeps the whole run document
(``document``) and a summary per level for filtering and sorting. Every run has a stable id
(``imports.py``), so importing the same run again replaces its row instead of adding one.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs
from filelock import FileLock, Timeout
from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from pydantic import ValidationError
from sqlalchemy import Float, ForeignKey, Integer, String, Text, create_engine, make_url, select
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, selectinload, validates

from servelab.errors import ServelabError
from servelab.guards.redaction import mask_url, scrub
from servelab.store.results import RunResult

DB_ENV = "SERVELAB_DB"
MIGRATION_WAIT_S = 60  # another process creating or migrating the same database
# Per-level figures kept in the database (docs/metrics.md defines each; *_mean for tools that report means only).
METRICS = ["output_tok_s", "request_rps", "ttft_ms_p50", "ttft_ms_p99", "ttft_ms_mean", "tpot_ms_p50", "tpot_ms_p99", "tpot_ms_mean",
           "itl_ms_p50", "itl_ms_p99", "e2e_ms_p50", "e2e_ms_p99", "e2e_ms_mean", "decode_tok_s_p50", "decode_tok_s_mean",
           "goodput_rps", "goodput_tok_s", "slo_attainment"]  # fmt: skip


class Base(DeclarativeBase):
    """Declarative base of the runs database (tables made by the migrations)."""


def is_figure(key: str, value: object) -> bool:
    """Whether ``value`` may stand in the level column ``key``: a number (not a boolean), finite, ≥ 0,
    at most 1e18 (a share, ``slo_attainment``, at most 1). NaN fails both comparisons."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= (1 if key == "slo_attainment" else 1e18)


class Level(Base):
    """One load level of a run: concurrency (or rate) and its summary figures (ms, tok/s, req/s)."""

    __tablename__ = "levels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(Text)
    concurrency: Mapped[int] = mapped_column(Integer)
    rate_rps: Mapped[float | None] = mapped_column(Float)
    ok: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    output_tok_s: Mapped[float | None] = mapped_column(Float)
    request_rps: Mapped[float | None] = mapped_column(Float)
    ttft_ms_p50: Mapped[float | None] = mapped_column(Float)
    ttft_ms_p99: Mapped[float | None] = mapped_column(Float)
    ttft_ms_mean: Mapped[float | None] = mapped_column(Float)
    tpot_ms_p50: Mapped[float | None] = mapped_column(Float)
    tpot_ms_p99: Mapped[float | None] = mapped_column(Float)
    tpot_ms_mean: Mapped[float | None] = mapped_column(Float)
    itl_ms_p50: Mapped[float | None] = mapped_column(Float)
    itl_ms_p99: Mapped[float | None] = mapped_column(Float)
    e2e_ms_p50: Mapped[float | None] = mapped_column(Float)
    e2e_ms_p99: Mapped[float | None] = mapped_column(Float)
    e2e_ms_mean: Mapped[float | None] = mapped_column(Float)
    decode_tok_s_p50: Mapped[float | None] = mapped_column(Float)
    decode_tok_s_mean: Mapped[float | None] = mapped_column(Float)
    goodput_rps: Mapped[float | None] = mapped_column(Float)  # with --slo (migration 0002)
    goodput_tok_s: Mapped[float | None] = mapped_column(Float)
    slo_attainment: Mapped[float | None] = mapped_column(Float)
    run: Mapped[Run] = relationship(back_populates="levels")

    @validates("concurrency", "rate_rps", "ok", "failed", *METRICS)
    def _a_figure(self, key: str, value: float | None) -> float | None:
        """Every number stored is a figure: finite, ≥ 0, not a boolean, a share ≤ 1 (an imported
        file's NaN, Infinity, negative or ``true`` is refused, never listed).

        Raises:
            ServelabError: naming the level and the field.
        """
        if value is not None and not is_figure(key, value):
            raise ServelabError(f"level {str(getattr(self, 'label', '?'))[:40]!r}: {key} = {value!r} is not a figure (a finite number ≥ 0{', ≤ 1' if key == 'slo_attainment' else ''})")
        return value


class Run(Base):
    """One run: where it came from, what was measured, and the full document."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    source: Mapped[str] = mapped_column(String(32))  # servelab, vllm-bench-serve, llama-benchy
    origin: Mapped[str] = mapped_column(Text)  # the file or directory it was read from
    imported_at: Mapped[str] = mapped_column(String(40))
    started_at: Mapped[str | None] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(Text)
    engine: Mapped[str] = mapped_column(String(32))
    engine_version: Mapped[str | None] = mapped_column(Text)
    hardware: Mapped[str] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(Text)
    recipe: Mapped[str | None] = mapped_column(Text)
    variant: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    prefix_cache: Mapped[str | None] = mapped_column(String(16))
    traffic: Mapped[str | None] = mapped_column(Text)  # API and kind of load: chat, completions, chat sessions, chat trace mooncake (migration 0003)
    document: Mapped[str] = mapped_column(Text)  # JSON: run.json, or the imported file's content
    levels: Mapped[list[Level]] = relationship(back_populates="run", order_by=Level.position, cascade="all, delete-orphan")

    @validates("document", "origin", "host", "recipe", "variant")
    def _no_secrets(self, key: str, value: str | None) -> str | None:
        """Every text stored is scrubbed (servelab.guards.redaction): an imported file's secrets never reach the database."""
        return None if value is None else scrub(value)

    def doc(self) -> dict:
        """The stored document as a JSON object.

        Raises:
            ServelabError: it is damaged (not a JSON object), naming the run and how to repair it.
        """
        try:
            doc = json.loads(self.document)
        except (TypeError, ValueError):
            doc = None
        if not isinstance(doc, dict):
            raise ServelabError(f"run {self.id} in the database is damaged (its document is not a JSON object); import {self.origin} again")
        return doc

    def result(self) -> RunResult:
        """A servelab run's stored document as a :class:`RunResult`.

        Raises:
            ServelabError: it is damaged or not a servelab run document.
        """
        try:
            return RunResult.model_validate(self.doc())
        except ValidationError as exc:
            raise ServelabError(f"run {self.id} in the database is damaged ({exc.errors()[0]['msg']}); import {self.origin} again") from None


def database_url(db: str | None = None) -> str:
    """The database to use: ``db``, else ``$SERVELAB_DB``, else the per-user SQLite file.

    A value with ``://`` is a SQLAlchemy URL; anything else is an SQLite file path.

    Raises:
        ServelabError: the SQLite file's folder cannot be created.
    """
    value = db or os.environ.get(DB_ENV)
    if value and "://" in value:
        return value
    path = (Path(value) if value else Path(platformdirs.user_data_dir("servelab")) / "servelab.db").expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServelabError(f"--db {path}: cannot create its folder ({exc.strerror}); give another file or a database URL") from None
    return f"sqlite:///{path.resolve()}"


class Store:
    """The open runs database (migrated to the newest schema on open).

    Args:
        url: a SQLAlchemy URL (see :func:`database_url`).

    Raises:
        ServelabError: the URL is malformed, its driver is missing, or the database cannot be
            reached or migrated (the message names the URL without its password).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = create_engine(url)
            cfg = Config()
            cfg.set_main_option("script_location", str(files("servelab") / "migrations"))
            with FileLock(_lock_path(url), timeout=MIGRATION_WAIT_S), self.engine.begin() as conn:  # one creation or migration at a time
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except Timeout:
            raise ServelabError(f"--db {mask_url(url)}: another servelab has been creating or migrating it for {MIGRATION_WAIT_S} s; try again") from None
        except (ArgumentError, NoSuchModuleError, ModuleNotFoundError) as exc:
            raise ServelabError(f"--db {mask_url(url)}: not a usable database URL ({exc})") from None
        except CommandError as exc:  # a revision this servelab does not know: written by a newer one
            raise ServelabError(f"--db {mask_url(url)}: its schema is not one this servelab knows ({exc}); upgrade servelab or use another --db") from None
        except DBAPIError as exc:
            raise self._error("cannot open it", exc) from None

    def _error(self, what: str, exc: DBAPIError) -> ServelabError:
        """One line for a database error: the URL (password masked), what failed, the driver's first line."""
        return ServelabError(f"--db {mask_url(self.url)}: {what} ({str(exc.orig).strip().splitlines()[0]}); the run directories on disk are kept")

    def add(self, runs: list[Run]) -> list[bool]:
        """Store ``runs`` in one transaction, each replacing a stored run with the same id.

        Returns:
            For each run, True when it was new, False when it replaced an earlier import.

        Raises:
            ServelabError: the database refused the write (read-only, full); nothing is stored.
        """
        try:
            return self._store(runs, last=False)
        except IntegrityError:  # another process stored the same run between our read and our write: replace it now
            return self._store(runs, last=True)

    def _store(self, runs: list[Run], last: bool) -> list[bool]:
        """One transaction of :meth:`add`; an ``IntegrityError`` (a run stored meanwhile) is raised
        as it is unless ``last``."""
        new = []
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                for run in runs:
                    old = session.get(Run, run.id)
                    new.append(old is None)
                    if old is not None:
                        session.delete(old)
                        session.flush()
                    session.add(run)
        except IntegrityError as exc:
            if not last:
                raise
            raise self._error("cannot store runs in it", exc) from None
        except DBAPIError as exc:  # read-only file, full disk, lost connection
            raise self._error("cannot store runs in it", exc) from None
        return new

    def runs(self, **filters: str | None) -> list[Run]:
        """Stored runs, newest first, with their levels; ``filters`` (model, engine, hardware,
        source, status) keep runs whose field contains the value (case-insensitive)."""
        query = select(Run).options(selectinload(Run.levels)).order_by(Run.started_at.desc(), Run.id)
        for name, value in filters.items():
            if value:  # autoescape: % and _ in a filter are text, not LIKE patterns
                query = query.where(getattr(Run, name).icontains(value, autoescape=True))
        try:
            with Session(self.engine) as session:
                return _sound(list(session.scalars(query)))
        except DBAPIError as exc:
            raise self._error("cannot read it", exc) from None

    def get(self, run_id: str) -> Run:
        """The run whose id is or starts with ``run_id``.

        Raises:
            ServelabError: no such run, the prefix is ambiguous, or the database cannot be read.
        """
        query = select(Run).options(selectinload(Run.levels)).where(Run.id.startswith(run_id, autoescape=True)).limit(2)
        try:
            with Session(self.engine) as session:
                found = list(session.scalars(query))
        except DBAPIError as exc:
            raise self._error("cannot read it", exc) from None
        if not found:
            raise ServelabError(f"no run {run_id!r} in {mask_url(self.url)}; `servelab runs` lists them")
        if len(found) > 1:
            raise ServelabError(f"run id {run_id!r} is ambiguous; give more of it (`servelab runs` lists them)")
        return _sound(found)[0]


def _sound(runs: list[Run]) -> list[Run]:
    """``runs`` as read, each level's figures checked (a database edited by hand or damaged: a text
    where a number belongs).

    Raises:
        ServelabError: naming the run, the field and how to repair it.
    """
    for run in runs:
        for lv in run.levels:
            for key in ("concurrency", "ok", "failed", "rate_rps", *METRICS):
                value = getattr(lv, key)
                if value is not None and not is_figure(key, value):
                    raise ServelabError(f"run {run.id} in the database is damaged (levels.{key} holds {str(value)[:40]!r}); "
                                        f"import {run.origin} again, or delete the database file")  # fmt: skip
    return runs


def _lock_path(url: str) -> str:
    """The lock file that serialises creating and migrating the database at ``url``: beside an
    SQLite file (its path as SQLAlchemy reads the URL; of a ``file:`` URI with ``uri=true``, the
    URI's path), else in servelab's data folder (one per URL)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and parsed.query.get("uri") == "true":
        database = urlsplit(database).path  # file:/dir/runs.db (mode=ro in the query) → /dir/runs.db
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:"):
        return database + ".lock"
    folder = Path(platformdirs.user_data_dir("servelab"))
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"migrate-{hashlib.sha256(url.encode()).hexdigest()[:16]}.lock")
