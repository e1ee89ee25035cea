"""Recipes: a server described in YAML, and its variants resolved to exact argument lists.

- ``format``: the YAML format, its validation and file loading (``load_recipe``), and a variant
  resolved: placeholders filled in and the engine's flags added (``Recipe.resolve``);
- ``trust``: the allowlist of where a placeholder's value may go (whole arguments of a known server);
- ``spark_vllm_docker``: the community's DGX Spark format, converted on load;
- ``variants``: ``--set`` / ``--vary`` assignments, combinations, labels, directories;
- ``flags``: adding flags to an argument list, and redacting secrets (reading them: ``servelab.values.argv``).

What a flag means for an engine, and which flags it needs, is the engine's (``servelab.engines``).

Layer: recipes. May import: settings, load, workloads, plan, store, metrics, server, engines, values, guards, errors (docs/architecture.md).
"""

from servelab.recipes.flags import redact, secret_values
from servelab.recipes.format import Container, Recipe, Resolved, load_recipe, with_hosts
from servelab.recipes.variants import expand, parse_assignments, variant_dir, variant_label

__all__ = [
    "Container", "Recipe", "Resolved", "expand", "load_recipe", "parse_assignments", "secret_values",
    "redact", "variant_dir", "variant_label", "with_hosts",
]  # fmt: skip
