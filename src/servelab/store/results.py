"""What a run leaves on disk: the per-request record, the run document, and the writer that keeps both safe.

A run directory holds:

- ``run.json``: a :class:`RunResult` (versioned schema), rewritten atomically (temp file +
  ``os.replace``) at the start, after each concurrency level and at the end. It says ``"partial"``
  until the run finishes, so a crash, a Ctrl-C or a dead server leaves a valid, clearly marked run.
- ``records.jsonl``: one :class:`RequestRecord` per line, appended and flushed as each request
  completes, so nothing measured is lost.
- ``server.log``: the embedded server's log, when servelab started the server.

Times in a record are seconds on the client's monotonic clock (``time.perf_counter``) relative to
the run's origin, whose wall-clock time is ``RunResult.started_at``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, TypeVar

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field, ValidationError

from servelab import __version__
from servelab.server.endpoint import EndpointInfo
from servelab.engines.bootfacts import BootFacts
from servelab.errors import ServelabError, writing
from servelab.metrics.slo import Objective
from servelab.metrics.summary import LevelSummary
from servelab.values.records import RequestRecord
from servelab.guards import jsonfile
from servelab.guards.redaction import dump, scrub
from servelab.guards.files import read_bytes

SCHEMA_VERSION = 1
ABANDONED_FILE = "records.abandoned.jsonl"  # records of levels a resumed run measured again
Doc = TypeVar("Doc", bound=BaseModel)

class Environment(BaseModel):
    """Where the client ran."""

    servelab_version: str
    host: str
    platform: str
    python: str
    cpu_count: int | None
    client_procs: int = Field(1, description="Client processes that streamed the requests (servelab bench --client-procs).")

    @classmethod
    def current(cls) -> Environment:
        """The environment of this process."""
        return cls(
            servelab_version=__version__,
            host=socket.gethostname(),
            platform=platform.platform(),
            python=platform.python_version(),
            cpu_count=os.cpu_count(),
        )


class LoadSpec(BaseModel):
    """The load that was asked for: closed-loop ``concurrency`` levels, or open-loop ``rates``."""

    concurrency: list[int]
    rates: list[float] | None = Field(None, description="Open loop: arrival rates, requests/s, one level each.")
    closed_loop: Literal["stagger", "burst"] = Field(
        "burst", description="Closed loop: streams ramped up over one request's duration (stagger) or started together (burst; runs before this field)."
    )
    burstiness: float = Field(1.0, description="Open loop: gamma shape of the arrival gaps (1 = Poisson).")
    max_concurrency: int | None = Field(None, description="Open loop: cap on requests in flight.")
    mix: dict[str, float] | None = Field(None, description="Workload name → weight, when requests were drawn from a mix.")
    requests: int | None = Field(None, description="Measured requests per level (None with a duration).")
    duration_s: float | None = Field(None, description="Measured duration per level (None with a request count).")
    warmup: int | None = Field(description="Warm-up requests per level, not counted; None = one per slot (the concurrency).")
    input_tokens: int = Field(description="Prompt tokens per request, chat template included.")
    output_tokens: int = Field(description="max_tokens per request (the middle of the range under output_spread).")
    output_spread: float = Field(0.0, description="Each request's max_tokens uniform in [⌊n·(1−s)⌋, ⌈n·(1+s)⌉] (vllm bench serve's --random-range-ratio); 0 = exact.")
    prefix_cache: Literal["cold", "warm", "shared-prefix"]
    shared_prefix_tokens: int | None = Field(None, description="shared-prefix: tokens of the text every prompt starts with.")
    ignore_eos: bool
    chat_template_kwargs: dict | None = None
    seed: int
    request_timeout_s: float
    slo: list[Objective] | None = Field(None, description="--slo: the objectives each level was checked against.")
    endpoint: str = Field("chat", description="The API the requests used (--endpoint): chat (/v1/chat/completions), completions (/v1/completions, raw prompts, no chat template), completions-ids (token-id prompts) or responses (/v1/responses).")
    sessions: bool = Field(False, description="Each concurrency level is that many sessions kept open (--sessions, or a multi-turn workload in the mix: servelab.run.sessions).")
    turns: int = Field(1, description="--sessions: requests per session.")
    turn_input_tokens: int | None = Field(None, description="--sessions: text tokens of each later user message (None: input_tokens).")
    think_time: str | None = Field(None, description="--sessions: pause before each later turn, as given (2s, exp:2s).")
    trace: TraceInfo | None = Field(None, description="--trace: the trace replayed as one open-loop level.")

    @property
    def traffic(self) -> str:
        """The API and the kind of load in a few words: ``chat``, ``completions``, ``chat sessions``,
        ``chat trace mooncake`` (the runs database's ``traffic`` column)."""
        kind = " sessions" if self.sessions else f" trace {self.trace.format}" if self.trace is not None else ""
        return self.endpoint + kind

    @property
    def reuse_expected(self) -> bool:
        """The load reuses prompt prefixes on purpose: sessions resend their conversation (and may
        share a system prompt), a trace's requests share the blocks it says they share. Prefix-cache
        hits are then measured, not contamination."""
        return self.sessions or (self.trace is not None and bool(self.trace.prefix_share))


class TraceInfo(BaseModel):
    """The trace a run replayed (servelab.workloads.traces); the file's name only, never its directory."""

    file: str
    format: Literal["mooncake", "azure", "servelab"]
    time_scale: float = Field(description="Trace times were divided by this (2: twice as fast).")
    requests: int
    skipped_lines: int = Field(0, description="Malformed lines skipped (--skip-bad).")
    duration_s: float = Field(description="First to last scheduled arrival after time scaling, s.")
    prefix_share: float | None = Field(None, description="The trace's own share of repeated prompt tokens (docs/metrics.md \"Trace replay\"); None without block ids.")
    over_context: int = Field(0, description="Requests whose prompt + output tokens exceed the server's context: replayed all the same (finding trace_over_context).")
    context_tokens: int | None = Field(None, description="The server's context per request (max_model_len, llama.cpp's per-slot context) the trace was checked against.")


class PromptCheck(BaseModel):
    """How exact the prompts were: built length versus what the server reported."""

    template_overhead_tokens: int = Field(description="Tokens the chat template adds around the user text.")
    overhead_source: str = Field(description="How the overhead was measured.")
    checked_requests: int = 0
    mismatched_requests: int = 0
    max_abs_deviation_tokens: int = 0
    mean_deviation_tokens: float = 0.0
    trace_deviation_tokens: float | None = Field(
        None, description="--trace: mean |built − trace| prompt tokens (block seams, the chat template's minimum); measured, so not part of the load a resume compares."
    )


class Finding(BaseModel):
    """One diagnosis (``servelab/rules/diagnose.py``): what, how bad, in words, with the evidence."""

    kind: str
    severity: Literal["info", "warning", "error"]
    message: str
    evidence: dict


class CeilingInfo(BaseModel):
    """What the "% of ceiling" column was computed from (``servelab plan``'s roofline)."""

    model: str
    hardware: str
    quant: str
    context_tokens: int = Field(description="Context assumed during decode: prompt + half the output.")


class RecipeInfo(BaseModel):
    """The recipe variant that launched the server (``servelab sweep`` / ``launch``); secrets redacted."""

    name: str
    engine: str
    path: str | None = None
    sha256: str = Field(description="Hash of the recipe's content (recipes.Recipe.sha256).")
    variant: str = Field(description="The variant's name: its placeholder values, or 'default'.")
    values: dict[str, str] = Field(default_factory=dict)
    command: list[str] = Field(description="The server's argument list as launched.")
    image: str | None = None
    hosts: list[str] = Field(default_factory=list)


class VariantStatus(BaseModel):
    """``variant.json`` in a sweep's variant directory: how the variant ended (``servelab sweep``)."""

    variant: str
    status: Literal["complete", "partial", "failed-to-start"]
    error: str | None = Field(None, description="Why it failed or stopped early (with the server's last log lines).")
    recipe: RecipeInfo


class SweepIndex(BaseModel):
    """``sweep.json`` at the top of a sweep directory: the recipe and its variants in run order."""

    recipe: str
    sha256: str
    variants: list[str] = Field(description="Variant names, in order.")
    directories: list[str] = Field(description="Their directories, relative to the sweep directory.")


def default_run_dir(label: str) -> Path:
    """A new run directory under ``servelab-runs/``: the UTC time, then ``label`` made a safe name."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] or "run"
    return Path("servelab-runs") / f"{stamp}-{slug}"


class RunResult(BaseModel):
    """The run document (``run.json``)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["bench"] = "bench"
    status: Literal["partial", "complete"] = "partial"
    partial_reason: str | None = "the run did not finish (still running, interrupted, or crashed)"
    started_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    ended_at: str | None = None
    environment: Environment = Field(default_factory=Environment.current)
    endpoint: EndpointInfo
    load: LoadSpec
    settings: dict | None = Field(None, description="The load as given (servelab.settings.Load's dump: every setting, defaults included), to reproduce the run.")
    prompt_check: PromptCheck | None = None
    ceiling: CeilingInfo | None = None
    findings: list[Finding] = Field(default_factory=list)
    boot: BootFacts | None = Field(None, description="Facts from the server's startup log, when the run knows it.")
    recipe: RecipeInfo | None = Field(None, description="The recipe variant, when servelab launched the server from one.")
    notes: list[str] = Field(default_factory=list, description="What the run changed from what was asked (e.g. workloads left out).")
    levels: list[LevelSummary] = Field(default_factory=list)
    records_file: str = "records.jsonl"

    @property
    def failed(self) -> bool:
        """True when any measured request failed or the run is partial."""
        return self.status != "complete" or any(lv.failed for lv in self.levels)


class RunWriter:
    """Owns a run directory: appends records as they complete and rewrites ``run.json`` atomically.

    Raises:
        ServelabError: via the caller, when the directory cannot be created (OSError is wrapped there).
    """

    def __init__(self, directory: Path, run: RunResult) -> None:
        self.directory = directory
        self.run = run
        directory.mkdir(parents=True, exist_ok=True)
        self._records = open(directory / run.records_file, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.save()

    def append(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS, so a crash cannot lose it."""
        with writing(self.directory / self.run.records_file):
            self._records.write(dump(record, exclude_none=True) + "\n")
            self._records.flush()

    def save(self) -> None:
        """Write ``run.json`` atomically (a reader never sees a half-written file)."""
        write_document(self.directory / "run.json", self.run)

    def finish(self, *, complete: bool, reason: str | None = None) -> None:
        """Mark the run complete or partial (with its reason, secrets masked), save, and close the records file."""
        self.run.status = "complete" if complete else "partial"
        self.run.partial_reason = None if complete or reason is None else scrub(reason)
        self.run.ended_at = datetime.now(timezone.utc).isoformat()
        self.save()
        with writing(self.directory / self.run.records_file):
            self._records.close()


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir/.lock`` (filelock) while a run writes there: a second run given the same
    ``--output`` is refused instead of interleaving its records with the first's. Folders this
    call created are removed again when nothing was written to them.

    Raises:
        ServelabError: another process holds the lock, or the directory cannot be created.
    """
    created = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # leaf first
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(run_dir / ".lock", timeout=0)
        lock.acquire()
    except Timeout:
        raise ServelabError(f"another servelab run is writing to {run_dir}; wait for it to end or use another --output") from None
    except OSError as exc:
        raise ServelabError(f"--output {run_dir}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield
    finally:
        lock.release()
        if created and [p.name for p in run_dir.iterdir()] == [".lock"]:  # nothing was written: leave nothing behind
            (run_dir / ".lock").unlink()
            for folder in created:
                folder.rmdir()


def resume_run(run_dir: Path, load: LoadSpec, model: str, notes: list[str]) -> tuple[RunResult, int] | None:
    """An earlier run of the same load and model in ``run_dir``, kept with its finished levels
    (neither failed nor cut short), so that rerunning an interrupted run measures only what is
    missing; with the next free record index. The records of what is measured again (levels not
    kept, earlier calibrations) move to ``records.abandoned.jsonl``: kept on disk, out of the run's
    reports. A note saying so is appended to ``notes``.

    Returns:
        (the run document to continue, the first record index to use), or None for a fresh directory.

    Raises:
        ServelabError: the directory holds something else, or a run of a different load or model
            (it is never overwritten).
    """
    path = run_dir / "run.json"
    if not path.exists():
        return None
    try:
        earlier = read_document(RunResult, path)
    except ServelabError:
        raise ServelabError(f"{path} is not a servelab run; use another --output") from None
    if earlier.load != load or earlier.endpoint.model != model:
        raise ServelabError(f"{run_dir} holds a run of another load or model; use another --output")
    earlier.levels = [lv for lv in earlier.levels if not lv.failed]
    records = _read_records(run_dir / earlier.records_file)
    spans = [lv.record_span for lv in earlier.levels]
    if all(spans):  # runs written before record_span keep every record
        keep = [any(a <= r.index <= b for a, b in spans) for r in records]
        kept = [r for r, k in zip(records, keep, strict=True) if k]
        abandoned = [r for r, k in zip(records, keep, strict=True) if not k]
        if abandoned:
            with open(run_dir / ABANDONED_FILE, "a", encoding="utf-8") as out:
                out.writelines(dump(r, exclude_none=True) + "\n" for r in abandoned)
            tmp = run_dir / (earlier.records_file + ".tmp")
            tmp.write_text("".join(dump(r, exclude_none=True) + "\n" for r in kept), encoding="utf-8")
            os.replace(tmp, run_dir / earlier.records_file)
    earlier.status, earlier.partial_reason = "partial", "resumed: still running"
    notes.append(f"resumed {run_dir}: {len(earlier.levels)} finished levels kept")
    earlier.notes = list(dict.fromkeys([*earlier.notes, *notes]))
    every = records + _read_records(run_dir / ABANDONED_FILE)  # indices set aside earlier are taken too
    return earlier, max((r.index for r in every), default=-1) + 1


def levels_to_run(asked: list[tuple[float | None, int]], done: list[LevelSummary]) -> list[int]:
    """Positions in ``asked`` ((rate, concurrency) per level, in order) that ``done`` has not
    finished yet. A level asked several times (``grid --runs 3`` asks ``[c, c, c]``) counts once
    per finished summary, so a resumed run keeps as many as it was asked for."""
    left = Counter((lv.rate_rps, lv.concurrency) for lv in done)
    todo = []
    for i, key in enumerate(asked):
        if left[key]:
            left[key] -= 1
        else:
            todo.append(i)
    return todo


def write_document(path: Path, doc: BaseModel) -> None:
    """Write one of servelab's documents (run.json, sweep.json, variant.json, tune.json, launch.json)
    atomically: a temporary file beside it, then ``os.replace``, so a reader never sees a
    half-written file; secrets masked (``servelab.guards.redaction.dump``); its folder made.

    Raises:
        ServelabError: the file cannot be written (``servelab.errors.writing``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with writing(tmp):
        tmp.write_text(dump(doc, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def read_document(model: type[Doc], path: Path) -> Doc:
    """``path`` (a run.json, variant.json or sweep.json) parsed as ``model``.

    Raises:
        ServelabError: unreadable, or not that kind of servelab document (naming the file), or
            holding a number that is not finite (NaN, Infinity: servelab writes none), or a value
            of another type than servelab writes (``true`` or ``1e30`` for an integer: validated strictly).
    """
    try:
        text = read_bytes(path, "document").decode("utf-8")
        jsonfile.loads(text, str(path), "it is not a servelab run (give a run directory or its run.json)", finite=True)  # size, depth, no NaN
        return model.model_validate_json(text, strict=True)  # strict: true is not 1, 1e30 is not an integer
    except ValidationError as exc:
        raise ServelabError(f"{path}: not a servelab {path.name} document ({exc.errors()[0]['msg']})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ServelabError(f"{path}: cannot read it ({exc})") from None


def load_run(directory: Path) -> tuple[RunResult, list[RequestRecord]]:
    """Read a run directory back: the run document and every record in it.

    A truncated last line (the process died mid-write) is skipped.

    Raises:
        ServelabError: no readable ``run.json`` in ``directory`` (:func:`read_document`).
    """
    run = read_document(RunResult, directory / "run.json")
    return run, _read_records(directory / run.records_file)


def _read_records(path: Path) -> list[RequestRecord]:
    """The records in a ``records.jsonl`` (none if it is missing); unreadable lines are skipped."""
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(RequestRecord.model_validate(json.loads(line)))
            except ValueError:
                continue
    return records
