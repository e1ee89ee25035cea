"""Request traces to replay (``servelab bench --trace FILE``): timestamped requests read from a file.

Formats (``--trace-format``; by default from the file: ``.csv`` is Azure, a JSONL line with
``timestamp`` Mooncake, one with ``queued`` servelab's own):

- **mooncake**: JSONL, one request a line: ``timestamp`` (ms since the trace began),
  ``input_length``, ``output_length`` (tokens) and ``hash_ids``, the ids of the prompt's blocks of
  ``MOONCAKE_BLOCK_TOKENS`` tokens; two requests that share a block id share that block's content
  (kvcache-ai/Mooncake, ``FAST25-release/traces``, README).
- **azure**: the Azure LLM inference trace CSV (Azure/AzurePublicDataset, ``AzureLLMInferenceDataset2023``):
  ``TIMESTAMP`` (a date-time), ``ContextTokens``, ``GeneratedTokens``; every prompt is unique.
- **servelab**: a run's ``records.jsonl``: its measured requests, at their ``queued`` times, with the
  prompt (``expected_prompt_tokens``, else ``prompt_tokens``) and output (``max_tokens``) they had.

A line that cannot be read stops with a one-line error naming the file and the line; with
``skip_bad`` it is skipped and counted instead. Times are shifted so that the first request
arrives at 0 and divided by ``time_scale`` (2 replays twice as fast).
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, TextIO

from pydantic import BaseModel, Field, ValidationError, field_validator

from servelab.guards import jsonfile
from servelab.errors import ServelabError, first_problem

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id (Mooncake trace README: "block size 512")
MAX_TRACE_REQUESTS = 1_000_000
MAX_LINE = 1 << 20  # characters of one trace line (a Mooncake line with thousands of hash ids is ~50 KB)
MAX_TOKENS = 10_000_000
MAX_REPLAY_S = 7 * 86_400  # a replay longer than a week is a wrong timestamp (epoch ms beside relative ones), not a benchmark
TraceFormat = Literal["mooncake", "azure", "servelab"]
FORMATS: tuple[str, ...] = ("mooncake", "azure", "servelab")


class TraceRequest(BaseModel, frozen=True):
    """One request of a trace: its arrival (s after the first), prompt and output tokens, and the
    ids of its prompt's shared blocks (Mooncake; empty elsewhere)."""

    at_s: float = Field(ge=0, allow_inf_nan=False)
    input_tokens: int = Field(gt=0, le=MAX_TOKENS)
    output_tokens: int = Field(gt=0, le=MAX_TOKENS)
    hash_ids: tuple[int, ...] = ()


@dataclass
class Trace:
    """A trace read from ``path``: its requests in arrival order, and the lines skipped."""

    path: Path
    format: TraceFormat
    requests: list[TraceRequest] = field(default_factory=list)
    skipped_lines: int = 0

    @property
    def duration_s(self) -> float:
        """From the first arrival to the last, s."""
        return self.requests[-1].at_s if self.requests else 0.0

    @property
    def rate_rps(self) -> float | None:
        """Mean arrival rate, requests/s: requests ÷ duration (None for a single instant); the key of its replayed level."""
        return len(self.requests) / self.duration_s if self.duration_s else None

    def prefix_share(self) -> float | None:
        """The trace's own share of repeated prompt tokens: for each request, the blocks of the
        longest run of leading ``hash_ids`` that an earlier request began with too (an ideal prefix
        cache of unbounded size would hold them), × ``MOONCAKE_BLOCK_TOKENS``, summed over the
        trace, ÷ its prompt tokens (docs/metrics.md "Trace replay"). None without block ids."""
        if not any(r.hash_ids for r in self.requests):
            return None
        seen: set[tuple[int, ...]] = set()
        repeated = 0
        for r in self.requests:
            k = 0
            while k < len(r.hash_ids) and r.hash_ids[: k + 1] in seen:
                k += 1
            repeated += min(k * MOONCAKE_BLOCK_TOKENS, r.input_tokens)
            seen.update(r.hash_ids[: i + 1] for i in range(len(r.hash_ids)))
        return repeated / sum(r.input_tokens for r in self.requests)


class _Mooncake(BaseModel):
    timestamp: float = Field(ge=0, allow_inf_nan=False)
    input_length: int = Field(gt=0, le=MAX_TOKENS)
    output_length: int = Field(gt=0, le=MAX_TOKENS)
    hash_ids: list[int] = Field(default_factory=list, max_length=MAX_TOKENS // MOONCAKE_BLOCK_TOKENS)

    @field_validator("hash_ids")
    @classmethod
    def _ids(cls, ids: list[int]) -> list[int]:
        if any(i < 0 or i > 2**63 for i in ids):
            raise ValueError("hash ids must be integers from 0 to 2^63")
        return ids


class _Record(BaseModel):
    phase: str
    queued: float = Field(allow_inf_nan=False)
    expected_prompt_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    prompt_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    max_tokens: int = Field(gt=0, le=MAX_TOKENS)


def guess_format(path: Path, first_line: str) -> TraceFormat:
    """The format of a trace file by its name and first line (module docstring)."""
    if path.suffix.lower() == ".csv" or first_line.lstrip().startswith("TIMESTAMP"):
        return "azure"
    return "servelab" if '"queued"' in first_line else "mooncake"


def _azure_time(text: str) -> float:
    """Seconds since the epoch of an Azure trace TIMESTAMP (``2023-11-16 18:15:46.6805900``: 7 digits
    of fraction, which ``datetime`` reads to 6)."""
    head, dot, frac = text.strip().partition(".")
    return datetime.fromisoformat(head + (dot + frac[:6] if dot else "")).timestamp()


def _lines(path: Path, handle: TextIO) -> Iterator[tuple[int, str]]:
    """(line number, line) of an open trace, each read up to ``MAX_LINE`` characters: a file of one
    endless line (``/dev/zero``) is refused after 1 MiB, never held whole."""
    for n in itertools.count(1):
        line = handle.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:
            raise ServelabError(f"--trace {path} line {n}: longer than {MAX_LINE:,} characters; not a trace line")
        yield n, line


def _rows(fmt: TraceFormat, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, object]]:
    """(line number, the row as read) of a trace's lines: non-blank lines (JSON), or CSV dicts."""
    if fmt != "azure":
        yield from ((n, line) for n, line in lines if line.strip())
        return
    reader = csv.DictReader(line for _, line in lines)
    missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
    if missing:
        raise ServelabError(f"the Azure trace has no column {', '.join(sorted(missing))} (header: {', '.join(reader.fieldnames or ())!r:.120})")
    yield from ((reader.line_num, row) for row in reader)


def _parse(fmt: TraceFormat, row: object, where: str) -> TraceRequest | None:
    """One row as a request (None: a row that is not a measured request of a servelab run).

    Raises:
        ServelabError: the row is malformed, naming ``where`` and the field.
        ValidationError, ValueError: likewise, for the caller to word.
    """
    if fmt == "azure":
        assert isinstance(row, dict)
        return TraceRequest(at_s=_azure_time(row["TIMESTAMP"] or ""), input_tokens=row["ContextTokens"], output_tokens=row["GeneratedTokens"])
    obj = jsonfile.loads(row, where)
    if fmt == "mooncake":
        m = _Mooncake.model_validate(obj)
        return TraceRequest(at_s=m.timestamp / 1e3, input_tokens=m.input_length, output_tokens=m.output_length, hash_ids=tuple(m.hash_ids))
    r = _Record.model_validate(obj)
    tokens = r.expected_prompt_tokens or r.prompt_tokens
    if r.phase != "measured" or tokens is None:
        return None
    return TraceRequest(at_s=max(r.queued, 0.0), input_tokens=tokens, output_tokens=r.max_tokens)


def _read(path: Path, handle: TextIO, fmt: TraceFormat | None, skip_bad: bool, first: int | None) -> Trace:
    """The requests of an open trace, read line by line and no further than its ``first`` requests.

    Raises:
        ServelabError: a malformed line unless ``skip_bad``, a line over ``MAX_LINE``, more than
            ``MAX_TRACE_REQUESTS`` requests.
    """
    lines = _lines(path, handle)
    head = next(lines, None)
    fmt = fmt or guess_format(path, head[1] if head else "")
    trace = Trace(path, fmt)
    try:
        rows = _rows(fmt, itertools.chain([head] if head else [], lines))
        for n, row in rows:
            if first is not None and len(trace.requests) >= first:
                break
            if len(trace.requests) >= MAX_TRACE_REQUESTS:
                raise ServelabError(f"--trace {path}: more than {MAX_TRACE_REQUESTS:,} requests; keep its first ones (--requests N)")
            if not _take(trace, fmt, row, f"--trace {path} line {n}", skip_bad):
                trace.skipped_lines += 1
    except ServelabError as exc:
        raise ServelabError(str(exc) if str(exc).startswith("--trace") else f"--trace {path}: {exc}") from None
    return trace


def _take(trace: Trace, fmt: TraceFormat, row: object, where: str, skip_bad: bool) -> bool:
    """Add the request of one row to ``trace`` (a row that is no request is passed over); False for
    a bad row skipped (``skip_bad``).

    Raises:
        ServelabError: a bad row without ``skip_bad``, naming ``where`` and the field.
    """
    try:
        request = _parse(fmt, row, where)
    except ServelabError as exc:
        problem = str(exc).removeprefix(where).lstrip(": ")
    except ValidationError as exc:
        problem = first_problem(exc, "the line")
    except (ValueError, TypeError, KeyError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if request is not None:
            trace.requests.append(request)
        return True
    if not skip_bad:
        raise ServelabError(f"{where}: {problem} (a {trace.format} trace; pass --skip-bad to skip such lines)")
    return False


def load_trace(path: Path, fmt: TraceFormat | None = None, *, time_scale: float = 1.0, skip_bad: bool = False, first: int | None = None) -> Trace:
    """Read a trace file (module docstring) into requests ordered by arrival, the first at 0 s,
    times divided by ``time_scale``; with ``first``, its first that many in the file (``--requests N``:
    reading stops there). The file is read line by line, each line at most ``MAX_LINE`` characters.

    Raises:
        ServelabError: an unreadable file, a malformed line (its number and what is wrong) unless
            ``skip_bad``, a line longer than ``MAX_LINE``, more than ``MAX_TRACE_REQUESTS`` requests, no request at all, a
            ``time_scale`` that is not a positive finite number, or a replay of the requests kept
            longer than ``MAX_REPLAY_S``.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ServelabError(f"--time-scale {time_scale}: give a positive number (2 replays twice as fast)")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:  # a spreadsheet's CSV may open with a byte-order mark
            trace = _read(path, handle, fmt, skip_bad, first)
    except OSError as exc:
        raise ServelabError(f"--trace {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ServelabError(f"--trace {path}: not a text file (not UTF-8)") from None
    except csv.Error as exc:
        raise ServelabError(f"--trace {path}: {exc}") from None
    if not trace.requests:
        raise ServelabError(f"--trace {path}: no request in it (format {trace.format}{f', {trace.skipped_lines} bad lines skipped' if trace.skipped_lines else ''})")
    trace.requests.sort(key=lambda r: r.at_s)
    t0 = trace.requests[0].at_s
    trace.requests = [r.model_copy(update={"at_s": (r.at_s - t0) / time_scale}) for r in trace.requests]
    if trace.duration_s > MAX_REPLAY_S:
        raise ServelabError(f"--trace {path}: its {len(trace.requests):,} requests span {trace.duration_s / 86_400:.3g} days at --time-scale "
                            f"{time_scale:g}, more than a week (a timestamp far from the others?); keep its first requests (--requests N) "
                            "or replay it faster (--time-scale)")  # fmt: skip
    return trace
