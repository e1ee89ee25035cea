"""Reading a user's YAML file (workloads, mixes, hardware profiles, recipes) with one-line errors.

Aliases (``*name``) are refused: an alias "bomb" expands exponentially and a self-referencing
alias is a cycle, and servelab's files need neither (anchors alone are harmless and allowed).
Nesting deeper than ``MAX_DEPTH`` is refused too (PyYAML's composer recurses per level).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from servelab.errors import ServelabError
from servelab.guards.files import MAX_YAML, read_bytes

MAX_DEPTH = 64  # nesting levels read (the composer recurses once per level)
Lines = dict[tuple, int]  # key path (e.g. ("bench", "concurrency", 0)) → 1-based line in the file


def read_yaml(path: Path, option: str) -> Any:
    """The parsed YAML document at ``path`` (None for an empty file), given with ``option``.

    Raises:
        ServelabError: unreadable file, or invalid YAML (naming ``option``, the file and the line).
    """
    return read_yaml_lines(path, option)[0]


def read_yaml_lines(path: Path, option: str) -> tuple[Any, Lines]:
    """Like :func:`read_yaml`, plus the line of every mapping key and sequence item, so a
    validation error can name the line it is about.

    Raises:
        ServelabError: as :func:`read_yaml`.
    """
    try:
        text = read_bytes(path, option, MAX_YAML).decode("utf-8")
        level = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the event parser is iterative: checks before the recursive composer
            if isinstance(event, yaml.AliasEvent):
                raise ServelabError(f"{option} {path}: line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not supported; write the value out")
            level += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if level > MAX_DEPTH:
                raise ServelabError(f"{option} {path}: line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels; servelab reads no such file")
        return yaml.safe_load(text), _lines(yaml.compose(text, Loader=yaml.SafeLoader), ())
    except OSError as exc:
        raise ServelabError(f"{option} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ServelabError(f"{option} {path}: not a text file (not UTF-8); give a YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ServelabError(f"{option} {path}: not valid YAML{where}") from None


def _lines(node: yaml.Node | None, prefix: tuple) -> Lines:
    out: Lines = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, key.value)
            out[path] = key.start_mark.line + 1
            out.update(_lines(value, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = (*prefix, i)
            out[path] = item.start_mark.line + 1
            out.update(_lines(item, path))
    return out


def line_of(lines: Lines, loc: tuple) -> int | None:
    """The line of ``loc`` or of its nearest enclosing key (None when the file has no such key)."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None
