"""Named workloads (the prompts owners measure with) and mixes of them; user additions from YAML.

A workload is a task instruction, a slice of the corpus (English or Hungarian) and a question,
built to exactly ``input_tokens`` prompt tokens (chat template included) with ``max_tokens`` of
output at temperature 0. Built-ins follow ../shared/MISSION.md ("single-stream suite": short Q&A,
code, JSON extraction, a non-English summary, RAG at 8K, 32K and 128K of context), plus ``agentic``,
a multi-turn session of a coding agent (issue 31: a long system prompt with tool definitions
shared by every session, then short tool-result turns, the context growing each turn). A mix is a
weighted choice of workloads (``servelab bench --mix``); a session workload in a mix is played as a
whole session when drawn.

User file (``--workloads-file FILE``)::

    workloads:
      contract_review: {input_tokens: 6000, max_tokens: 400, lang: en,
                        instruction: "Review this contract clause.", question: "List the risks.",
                        purpose: "legal review"}
    mixes:
      office: {qa: 3, contract_review: 1}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from servelab.errors import ServelabError, first_problem
from servelab.guards.yamlfile import read_yaml


class Workload(BaseModel, extra="forbid"):
    """One named workload (temperature 0).

    A single request (``turns`` 1, no system prompt) is built to exactly ``input_tokens`` prompt
    tokens, chat template included. A session (``turns`` > 1 or a system prompt: servelab.run.sessions)
    sizes each message in text tokens: a system prompt of ``system_tokens`` shared by every session
    of the run, a first user message of ``input_tokens``, then per later turn the previous answer and
    a user message of ``turn_input_tokens``; the server's template adds its own tokens, counted
    exactly per request.
    """

    name: str = ""
    purpose: str = ""
    input_tokens: int = Field(gt=0, le=10_000_000, description="Prompt tokens, chat template included (a session: the first user message's text tokens).")
    max_tokens: int = Field(gt=0, le=10_000_000)
    lang: Literal["en", "hu"] = "en"
    instruction: str = Field("", description="Text before the corpus slice.")
    question: str = Field("", description="Text after the corpus slice.")
    turns: int = Field(1, ge=1, le=1000, description="Requests per session; each later one resends the conversation plus a new message.")
    system_tokens: int = Field(0, ge=0, le=10_000_000, description="Text tokens of a system prompt shared by every session of a run; 0: none.")
    system: str = Field("", description="Text that opens the system prompt (tool definitions, rules); corpus text fills it to system_tokens.")
    turn_input_tokens: int | None = Field(None, gt=0, le=10_000_000, description="Text tokens of each later user message (default input_tokens).")
    turn_instruction: str = Field("", description="Text that opens each later user message, e.g. 'Tool result:'.")

    @property
    def multi_turn(self) -> bool:
        """Played as a session (servelab.run.sessions), not as one request."""
        return self.turns > 1 or self.system_tokens > 0


# The agentic workload's system prompt: a coding agent's rules and tool definitions (JSON schema, as
# OpenAI-style tool lists carry them), written for servelab; corpus text then fills it to size.
AGENT_TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository.", "parameters": {"path": "string", "start_line": "integer", "end_line": "integer"}},
    {"name": "write_file", "description": "Replace a file's content.", "parameters": {"path": "string", "content": "string"}},
    {"name": "search", "description": "Search the repository for a regular expression.", "parameters": {"pattern": "string", "glob": "string"}},
    {"name": "run", "description": "Run a shell command in the repository and return its output.", "parameters": {"command": "string", "timeout_s": "number"}},
]  # fmt: skip
AGENT_SYSTEM = (
    "You are a coding agent working in a software repository. Call one tool at a time by answering with one JSON object "
    '{"tool": NAME, "arguments": {...}}; after the last tool result, answer the user in one short paragraph.\n\nTools:\n'
    + json.dumps(AGENT_TOOLS, indent=1)
    + "\n\nRepository notes:\n"
)


BUILTIN: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(name="qa", purpose="short question about a short text", input_tokens=256, max_tokens=256,
                 instruction="Read the text and answer the question briefly.\n\nText:\n", question="\n\nQuestion: What is the main point of the text?"),
        Workload(name="code", purpose="write a small function", input_tokens=256, max_tokens=300,
                 instruction="Write a small, documented Python function that counts how often each word occurs in a text like the one below, with one example call.\n\n",
                 question="\n\nReturn only the code."),
        Workload(name="json_kie", purpose="extract invoice fields into JSON", input_tokens=512, max_tokens=300,
                 instruction="Extract the supplier, invoice number, dates, line items (description, quantity, unit price) and totals from the document below. Answer with one JSON object only.\n\nDocument:\n",
                 question="\n\nJSON:"),
        Workload(name="multilingual", purpose="summarise a Hungarian text in Hungarian (~200 words)", input_tokens=1024, max_tokens=300, lang="hu",
                 instruction="Foglald össze magyarul, körülbelül 200 szóban, a következő szöveget.\n\nSzöveg:\n", question="\n\nÖsszefoglalás:"),
        Workload(name="rag_8k", purpose="retrieved context of 8K tokens plus a question", input_tokens=8192, max_tokens=256,
                 instruction="Use only the retrieved passages to answer.\n\nPassages:\n", question="\n\nQuestion: What do the passages say about keeping records?"),
        Workload(name="rag_32k", purpose="retrieved context of 32K tokens plus a question", input_tokens=32768, max_tokens=256,
                 instruction="Use only the retrieved passages to answer.\n\nPassages:\n", question="\n\nQuestion: What do the passages say about keeping records?"),
        Workload(name="rag_128k", purpose="retrieved context of 128K tokens plus a question", input_tokens=131072, max_tokens=256,
                 instruction="Use only the retrieved passages to answer.\n\nPassages:\n", question="\n\nQuestion: What do the passages say about keeping records?"),
        Workload(name="agentic", purpose="a coding agent's session: shared system prompt and tools, then short tool-result turns",
                 system=AGENT_SYSTEM, system_tokens=1024, input_tokens=96, instruction="Task: the test suite fails after the change described below; find the cause and fix it.\n\n",
                 turns=6, turn_input_tokens=256, turn_instruction="Tool result:\n", max_tokens=64),
    )  # fmt: skip
}
BUILTIN_MIXES: dict[str, dict[str, float]] = {
    "uniform_short": {"qa": 1, "code": 1, "json_kie": 1, "multilingual": 1},
    "mixed_typical": {"qa": 4, "code": 2, "json_kie": 2, "multilingual": 1, "rag_8k": 1},
    "long_only": {"rag_8k": 2, "rag_32k": 1},
    "agentic": {"agentic": 1},  # coding agents' sessions only
    "chat_and_agents": {"qa": 2, "code": 1, "agentic": 1},  # single requests beside agents' sessions
}


class WorkloadFile(BaseModel, extra="forbid"):
    """The user's YAML file."""

    workloads: dict[str, Workload] = Field(default_factory=dict)
    mixes: dict[str, dict[str, float]] = Field(default_factory=dict)

    @field_validator("mixes")
    @classmethod
    def _weights(cls, mixes: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """Each weight finite and ≥ 0, each mix's sum > 0 (a draw needs one)."""
        for name, weights in mixes.items():
            if any(not math.isfinite(w) or w < 0 for w in weights.values()) or not sum(weights.values()) > 0:
                raise ValueError(f"mix {name!r}: give finite weights ≥ 0 with a sum above 0")
        return mixes


def read_workload_file(path: Path, option: str = "--workloads-file") -> WorkloadFile:
    """The user's workloads and mixes from the YAML file at ``path`` (given with ``option``).

    Raises:
        ServelabError: unreadable or malformed file, in one line naming the field.
    """
    try:
        return WorkloadFile.model_validate(read_yaml(path, option) or {})
    except ValidationError as exc:
        raise ServelabError(f"{option} {path}: {first_problem(exc, 'the file')}") from None


def with_builtins(parsed: WorkloadFile) -> tuple[dict[str, Workload], dict[str, dict[str, float]]]:
    """Built-in workloads and mixes, plus (overriding) those of a user file.

    Raises:
        ServelabError: a mix that names an unknown workload.
    """
    workloads, mixes = dict(BUILTIN), dict(BUILTIN_MIXES)
    for name, w in parsed.workloads.items():
        workloads[name] = w.model_copy(update={"name": name})
    mixes.update(parsed.mixes)
    for mix, weights in mixes.items():
        unknown = [w for w in weights if w not in workloads]
        if unknown:
            raise ServelabError(f"mix {mix!r} names unknown workloads: {', '.join(unknown)}; known: {', '.join(workloads)}")
    return workloads, mixes


def load_workloads(path: Path | None) -> tuple[dict[str, Workload], dict[str, dict[str, float]]]:
    """Built-in workloads and mixes, plus (overriding) those of the ``--workloads-file`` at ``path``.

    Raises:
        ServelabError: as :func:`read_workload_file` and :func:`with_builtins`.
    """
    return with_builtins(read_workload_file(path) if path is not None else WorkloadFile())


def pick(names: str | None, workloads: dict[str, Workload]) -> list[Workload]:
    """Workloads by comma-separated names (default: all but the 128K one).

    Raises:
        ServelabError: an unknown name.
    """
    if not names:
        return [w for n, w in workloads.items() if n != "rag_128k"]
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in workloads]
    if unknown:
        raise ServelabError(f"--only {', '.join(unknown)}: unknown workloads; known: {', '.join(workloads)}")
    return [workloads[n] for n in chosen]
