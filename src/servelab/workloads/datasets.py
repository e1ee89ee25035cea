"""Prompt datasets: JSONL of prompts, or ShareGPT-style conversations.

One JSON object per line, either

- ``{"prompt": "...", "output_tokens": 200}`` (``output_tokens`` or ``max_tokens`` optional), or
- ShareGPT: ``{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}``:
  the first human turn is the prompt; the reply that follows it sets the output length in tokens
  when no ``output_tokens`` is given (as vLLM's ShareGPT dataset does).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servelab.guards import jsonfile
from servelab.errors import ServelabError
from servelab.guards.files import read_bytes


@dataclass(frozen=True)
class DatasetEntry:
    """One prompt; ``reply`` is the reference answer whose token count sets the output length, if any."""

    prompt: str
    output_tokens: int | None = None
    reply: str | None = None


def load_dataset(path: Path) -> list[DatasetEntry]:
    """Entries of a JSONL dataset, in file order.

    Raises:
        ServelabError: unreadable file, a line that is not a JSON object of one of the two shapes
            (naming the line), or no entries at all.
    """
    try:
        lines = read_bytes(path, "--dataset").decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ServelabError(f"--dataset {path}: not a text file (not UTF-8); give JSONL") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = jsonfile.loads(line, f"--dataset {path} line {n}")
        if not isinstance(obj, dict):
            raise ServelabError(f"--dataset {path} line {n}: expected a JSON object")
        limit = obj.get("output_tokens", obj.get("max_tokens"))
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ServelabError(f"--dataset {path} line {n}: output_tokens must be a positive integer")
        if isinstance(obj.get("prompt"), str) and obj["prompt"]:
            out.append(DatasetEntry(obj["prompt"], limit))
        elif isinstance(obj.get("conversations"), list):
            turns = [t for t in obj["conversations"] if isinstance(t, dict) and isinstance(t.get("value"), str)]
            human = next((i for i, t in enumerate(turns) if t.get("from") in ("human", "user") and t.get("value")), None)
            if human is None:
                raise ServelabError(f"--dataset {path} line {n}: a conversation with no human turn")
            reply = next((t.get("value") for t in turns[human + 1 :] if t.get("from") in ("gpt", "assistant")), None)
            out.append(DatasetEntry(turns[human]["value"], limit, reply))
        else:
            raise ServelabError(f"--dataset {path} line {n}: needs a \"prompt\" or ShareGPT \"conversations\"")
    if not out:
        raise ServelabError(f"--dataset {path}: no entries")
    return out
