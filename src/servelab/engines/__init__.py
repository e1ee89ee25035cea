"""What servelab knows about each engine, one module per engine.

So far each module holds its boot-log knowledge: the line prefix its logs use and one table of
patterns (``RULES``), each with the versions it was seen in, the line that says the server is ready
(``READY``) and lines worth keeping as warnings (``NOTABLE``); ``strip_prefix`` reads its line
prefix. ``servelab.metrics.bootlog`` applies them; it knows no engine itself.
"""

from __future__ import annotations

from types import ModuleType


def bootlog_engines() -> list[ModuleType]:
    """The engine modules with boot-log tables, in the order their line prefixes are tried."""
    from servelab.engines import llamacpp, sglang, vllm

    return [vllm, sglang, llamacpp]
