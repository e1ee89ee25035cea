"""Any OpenAI-compatible server servelab knows nothing special about (``engine: custom`` in recipes).

It is :class:`~servelab.engines.base.Engine` itself: no metrics read, ``/tokenize`` only if it
answers, readiness when ``/v1/models`` answers, no exact output length (``ignore_eos`` is not assumed).
"""

from __future__ import annotations

from servelab.engines.base import Engine


class Generic(Engine):
    """The base behaviour, registered under the names ``generic`` (results) and ``custom`` (recipes)."""

    recipe_name = "custom"


ENGINE = Generic()
