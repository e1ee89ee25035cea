"""Startup-log facts of vLLM, SGLang and llama.cpp: what the server decided while it booted.

This module is engine-independent: each registered engine (``servelab.engines``) gives its line
prefix (``strip_prefix``), one table of patterns with the versions each was seen in (``rules``),
its ready line (``ready``) and its notable lines (``notable``). Lines are cleaned first: ANSI
colours, a syslog/journald or docker-compose prefix, process prefixes such as
``(EngineCore_DP0 pid=123)`` or ``(Worker_TP0 pid=9)`` (nested, as under Ray); then the first
engine whose prefix matches strips its own. Every rule that matches a line applies (one line may
hold two facts); a fact keeps its first value unless its rule says otherwise (tensor-parallel
ranks repeat lines). Lines no pattern knows are kept (up to ``KEEP_UNRECOGNISED``) and counted.
A line whose time or numbers only look like them (``99-99 99:99:99``, ``1.2.3 GiB``) sets nothing
from them. A line is read up to ``MAX_LINE`` characters (the facts sit in their first few hundred; the
patterns stay linear in the log's size however long a line is).
Formats and the real logs they come from: tests/fixtures/bootlogs/INDEX.yaml.
"""

from __future__ import annotations

import re

from servelab.engines import all_engines
from servelab.engines.bootfacts import BootFacts
from servelab.guards.redaction import mask_keys
from servelab.guards.untrusted import outside

KEEP_UNRECOGNISED = 200
KEPT_LINE = 2_000  # characters kept of a warning or an unrecognised line (servelab.guards.untrusted.outside)
MAX_LINE = 16_384  # characters read of one log line (vLLM's longest, its config dump, is ~6,000)

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PROCESS_PREFIX = re.compile(r"^(?:\([\w:.\-]+ pid=\d+\)\s*)+")
HOST_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.\-]+\[\d+\]: "  # syslog/journald: "Dec 02 11:57:01 host llama-server[24689]: "
    r"|[\w.\-]+-\d+\s+\| )"  # docker compose: "runner-llm-1  | "
)


def _clean(line: str, engines: list) -> tuple[str, str | None, float | None, str]:
    """(message, engine hint, timestamp in s if any, level) of one raw log line."""
    line = PROCESS_PREFIX.sub("", HOST_PREFIX.sub("", ANSI.sub("", line).strip()))
    for engine in engines:
        try:
            found = engine.strip_prefix(line)
        except ValueError:  # a prefix of its shape whose time is no time ("99-99 99:99:99"): read as an unprefixed line
            continue
        if found:
            msg, ts, level = found
            return msg, engine.name, ts, level
    return line, None, None, "WARNING" if "WARNING" in line[:20] or line.startswith("W ") else "INFO"


def parse_bootlog(text: str) -> BootFacts:
    """Facts from a startup log's text (see the module docstring); never raises on odd lines."""
    engines = [e for e in all_engines() if e.rules]
    facts = BootFacts()
    hints: dict[str, int] = {}
    first_ts = last_ts = None
    for raw in text.splitlines():
        raw = raw[:MAX_LINE]
        if not raw.strip():
            continue
        msg, hint, ts, level = _clean(raw, engines)
        if hint:
            hints[hint] = hints.get(hint, 0) + 1
        if ts is not None and first_ts is None:
            first_ts = ts
        ts = last_ts = ts if ts is not None else last_ts  # uvicorn's own lines carry no time: the latest seen
        known = False
        for engine in engines:
            for rule in engine.rules:  # every rule that matches (one line may hold two facts)
                if m := rule.pattern.search(msg):
                    try:
                        rule.apply(facts, m)
                    except ValueError:  # a number of the pattern's shape that is none ("1.2.3"): the line sets nothing
                        continue
                    hints[engine.name] = hints.get(engine.name, 0) + 2
                    known = True
            if engine.ready and engine.ready.search(msg):
                known = True
                if ts is not None and first_ts is not None and facts.ready_s is None:
                    facts.ready_s = round(ts - first_ts, 3)
        if level in ("WARNING", "ERROR") or any(engine.notable and engine.notable.search(msg) for engine in engines):
            known = True
            if msg not in facts.warnings:
                facts.warnings.append(msg)
        if known:
            facts.recognised_lines += 1
        else:
            facts.unrecognised_lines += 1
            if len(facts.unrecognised) < KEEP_UNRECOGNISED:
                facts.unrecognised.append(msg)
    if hints:
        facts.engine = max(hints, key=hints.get)
    facts.non_default_args = mask_keys(facts.non_default_args)  # api_key, hf_token … (servelab.guards.redaction)
    facts.warnings, facts.unrecognised = [outside(w, KEPT_LINE) for w in facts.warnings], [outside(u, KEPT_LINE) for u in facts.unrecognised]
    return facts
