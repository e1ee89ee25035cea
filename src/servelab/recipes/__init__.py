"""Recipes: a server described in YAML, and its variants resolved to exact argument lists.

- ``format``: the YAML format, its validation and file loading (``load_recipe``);
- ``spark_vllm_docker``: the community's DGX Spark format, converted on load;
- ``variants``: ``--set`` / ``--vary`` assignments, combinations, labels, directories;
- ``resolve``: placeholders filled in and the engine's flags added (``Recipe.resolve``);
- ``flags``: reading and adding flags of an argument list, and redacting secrets.

What a flag means for an engine, and which flags it needs, is the engine's (``servelab.engines``).
"""

from servelab.recipes.flags import flag_value, has_flag, is_secret, redact
from servelab.recipes.format import Container, Recipe, load_recipe, with_hosts
from servelab.recipes.resolve import Resolved
from servelab.recipes.variants import expand, parse_assignments, variant_dir, variant_label

__all__ = [
    "Container", "Recipe", "Resolved", "expand", "flag_value", "has_flag", "is_secret", "load_recipe", "parse_assignments",
    "redact", "variant_dir", "variant_label", "with_hosts",
]  # fmt: skip
