"""``servelab sweep``: for each variant of a recipe, launch the server, run the bench plan, stop.

A sweep directory holds ``sweep.json`` (the variants in order) and one directory per variant
with ``server.log`` (and the other nodes' logs), the run (``run.json``, ``records.jsonl``) and
``variant.json`` (complete, partial, or failed-to-start with the error and the log's last lines).

Rerunning the same command resumes: variants whose run is complete are skipped; the others run
again (a partial run keeps its finished levels, as ``servelab bench --output`` does; logs of the
earlier attempt are kept as ``*.log.prev``). A variant that fails to start is recorded and the
sweep goes on with the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.recipes import Recipe, variant_dir, variant_label
from servelab.store.results import RunResult, SweepIndex, VariantStatus, write_document


def is_complete(directory: Path) -> bool:
    """True when ``directory`` holds a complete run."""
    try:
        return json.loads((directory / "run.json").read_text(encoding="utf-8")).get("status") == "complete"
    except (OSError, ValueError, AttributeError):
        return False


def run_sweep(
    recipe: Recipe,
    variants: list[dict[str, str]],
    fixed: dict[str, str],
    out: Path,
    bench: Callable[[RecipeServer, Path], RunResult],
    say: Callable[[str], None],
    waiting: Callable[[str], AbstractContextManager] = lambda _: nullcontext(),
) -> list[VariantStatus]:
    """Run every variant (see the module docstring) and return how each ended.

    Args:
        recipe: the validated recipe.
        variants: placeholder values per variant (``recipes.expand``).
        fixed: the ``--set`` values (applied to every variant, left out of its name).
        out: the sweep directory.
        bench: runs the recipe's bench plan against a started server, writing into the directory.
        say: prints one progress line.
        waiting: shows that the server is starting (a spinner), as a context manager.

    Raises:
        ServelabError: a variant does not resolve (a placeholder without a value).
        KeyboardInterrupt: after stopping the server; the current run is saved as partial.
    """
    labels = [variant_label(v, fixed) for v in variants]
    if len(set(labels)) != len(labels):
        raise ServelabError("two variants have the same values; give each variant different values")
    dirs = [variant_dir(label) for label in labels]
    write_document(out / "sweep.json", SweepIndex(recipe=recipe.name, sha256=recipe.sha256(), variants=labels, directories=dirs))
    outcomes = []
    for i, (values, label, name) in enumerate(zip(variants, labels, dirs, strict=True), 1):
        vdir = out / name
        if is_complete(vdir):
            say(f"[{i}/{len(variants)}] {label}: already complete, skipped")
            continue
        for log in vdir.glob("*.log"):
            log.replace(log.with_suffix(".log.prev"))
        server = RecipeServer(recipe, recipe.resolve(values, label), vdir)
        say(f"[{i}/{len(variants)}] {label}: starting {recipe.engine} (ready timeout {server.resolved.ready_timeout_s:.0f} s)")
        try:
            status = _variant(server, label, vdir, bench, lambda text: say(f"[{i}/{len(variants)}] {label}: {text}"), waiting)
        except KeyboardInterrupt:  # the variant says so too; a rerun measures it again
            write_document(vdir / "variant.json", VariantStatus(variant=label, status="partial", error="interrupted by the user (Ctrl-C)", recipe=server.info()))
            raise
        write_document(vdir / "variant.json", status)
        outcomes.append(status)
    return outcomes


def _variant(
    server: RecipeServer, label: str, vdir: Path, bench: Callable[[RecipeServer, Path], RunResult], say: Callable[[str], None],
    waiting: Callable[[str], AbstractContextManager],
) -> VariantStatus:
    """Start one variant's server, run the bench plan against it, stop it; how it ended."""
    try:
        with waiting(f"{label}: waiting for {server.resolved.ready_url}…"):
            server.start()
    except ServelabError as exc:
        say(f"failed to start: {exc}")
        return VariantStatus(variant=label, status="failed-to-start", error=str(exc), recipe=server.info())
    try:
        say(f"ready at {server.url}; running the bench plan")
        run = bench(server, vdir)
        return VariantStatus(variant=label, status=run.status, error=run.partial_reason, recipe=server.info())
    except ServelabError as exc:
        say(f"stopped early: {exc}")
        return VariantStatus(variant=label, status="partial", error=str(exc), recipe=server.info())
    finally:
        server.stop()
