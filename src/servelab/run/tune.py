"""``servelab tune``: the configuration of a recipe that serves the most streams within an SLO, in a
few launches.

1. **The grid** is every combination of ``--vary`` values (at most ``MAX_POINTS``). A key is a
   placeholder of the recipe or a flag servelab reads for its engine (``Engine.known_flags``); a
   value the engine refuses whatever the others are (``Engine.refused``) ends the command before any
   launch. Each point is resolved to its server command, and the settings ``servelab predict``
   prices are read from it (``Engine.tuned``).
2. **Pricing** (with a model and a hardware profile; ``servelab.plan.pricing``): plan says whether the point fits
   (memory, a TP that does not divide the heads, a context the KV cannot hold, a combination the
   engine refuses: ``Engine.point_problem``), and predict gives its capacity within the SLO (the
   largest closed-loop concurrency whose predicted level meets every objective:
   ``servelab.plan.curves.within``), its band and its bottleneck. Without a model or hardware the
   points are not priced and are launched in grid order.
3. **Launches**: the best predicted point not yet launched is launched (``RecipeServer``), its
   capacity measured by ``servelab capacity``'s search started at the prediction, and the server
   stopped. A launch that fails (start or measurement) is recorded with the server's reason and
   does not count against ``--launches``.
4. **After each measurement** the calibration is fitted on every probe measured so far
   (``servelab.plan.fit.fit``, as ``servelab calibrate``: predict's means, with the calibration tune started from as the
   prior, ``Pricer.refit``), and each objective's
   factor, its measured percentile ÷ the calibrated mean at the same probe (median over the
   probes: a TPOT p99 sits above the mean TPOT predict models), divides its target when the points
   are priced again (``TuneDocument.factors``). The band becomes the largest relative error of the
   launched points' capacities so predicted (at least ``FLOOR_BAND``; after one launch half the
   prior band, the model's family class's from ``servelab.plan.band``), and every point whose band's top is below the best measured capacity is
   pruned. What the refit still cannot explain is attributed to the grid's values
   (``servelab.plan.pricing.value_effects``) and scales the candidates' predictions. The next
   launch is the best predicted candidate, except after a launch measured further from its
   prediction than the band while more than one launch is left: then the best predicted candidate
   at least ``EXPLORE_DISTANCE`` values away from every launched point. The search ends after
   ``--launches`` measurements or when no candidate is left.
5. **The winner** is the launched point with the largest measured capacity; why: the objective its
   smallest missing probe missed, and for each value that differs from the recipe's own what
   predict says it moved.

Everything is kept in the tune's directory (``servelab.store.tuning``): a rerun with the same
directory reads back each finished launch (``launch.json``) and each finished probe of an
unfinished one, and makes the same choices again. The server is stopped on every path out of a
launch, Ctrl-C included.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from servelab import engines
from servelab.errors import ServelabError
from servelab.guards import jsonfile
from servelab.launch.server import RecipeServer
from servelab.plan.pricing import FLOOR_BAND, Pricer, apply_effects, price_points, value_effects
from servelab.recipes import Recipe, Resolved, expand, variant_dir, variant_label
from servelab.recipes.flags import flag_args
from servelab.recipes.format import parse_recipe
from servelab.rules.lint import quant_of
from servelab.run.capacity import Capacity
from servelab.store.results import read_document, write_document
from servelab.store.tuning import TuneDocument, TuneLaunch, TunePoint

MAX_POINTS = 10_000  # a larger grid is refused: its pricing alone takes minutes
BEST_RECIPE = "best-recipe.yaml"
EXPLORE_DISTANCE = 2  # after a surprise, explore at least this many values away from every launched point (the farthest before: the H100 grid's replay named its best in 4 of 8 orders, 6 with 2; validation/RESULTS-tune.md)


def grid(recipe: Recipe, vary: dict[str, list[str]], fixed: dict[str, str]) -> list[dict[str, str]]:
    """The grid's points: every combination of ``vary`` with ``fixed`` (``--set``) applied.

    Raises:
        ServelabError: no ``--vary``, more than ``MAX_POINTS`` points, or a key that is neither a
            placeholder of the recipe nor a flag servelab reads for its engine (with the closest).
    """
    if not vary:
        raise ServelabError("tune needs --vary KEY=V1,V2,… (e.g. --vary max_num_seqs=64,128,256): the grid it searches")
    count = math.prod(len(v) for v in vary.values())
    if count > MAX_POINTS:
        raise ServelabError(f"--vary gives {count:,} points; tune searches at most {MAX_POINTS:,}: give fewer values")
    engine = engines.get(recipe.engine)
    known = recipe.placeholders() | engine.known_flags() | {"tensor_parallel"}  # the recipe's TP size (Recipe.resolve)
    for key in vary:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ServelabError(f"--vary {key}: not a placeholder of {recipe.source} nor a flag servelab reads for {engine.title}{hint} "
                                "(to vary another flag, write it as a {placeholder} in the recipe)")  # fmt: skip
    return expand(recipe, vary, fixed)


def points(recipe: Recipe, combos: list[dict[str, str]], fixed: dict[str, str], request_tokens: int) -> list[TunePoint]:
    """Each combination resolved to its server command: its label, the settings predict prices, and
    whether the engine refuses it (``unfit`` with why).

    Raises:
        ServelabError: a value the engine refuses whatever the others are (naming the point and the
            flag), or one that does not resolve (``Recipe.resolve``).
    """
    engine, out = engines.get(recipe.engine), []
    for values in combos:
        label = variant_label(values, fixed)
        resolved = recipe.resolve(values, label)
        if problem := engine.refused(resolved.argv):
            raise ServelabError(f"--vary: {label}: {engine.title} refuses it: {problem}")
        why = engine.point_problem(resolved.argv, request_tokens)
        out.append(TunePoint(label=label, values=values, settings=settings_of(recipe, resolved), status="unfit" if why else "not priced", why=why))
    return out


def settings_of(recipe: Recipe, resolved: Resolved) -> dict[str, str | None]:
    """The settings predict prices, as a resolved command gives them (``Engine.tuned``), with its
    weight format (``servelab.rules.lint.quant_of``) and TP size."""
    return {**engines.get(recipe.engine).tuned(resolved.argv), "quantization": quant_of(recipe, resolved.argv), "tp": str(resolved.tensor_parallel)}


def earlier(out: Path, doc: TuneDocument) -> list[str]:
    """Check that ``out`` holds no tune, or one of the same recipe, grid, SLO and lengths (resumed:
    ``doc`` carries its wall time on, s); returns the labels of its launches in order (the
    ``Tuner``'s ``history``), empty when there is none.

    Raises:
        ServelabError: it holds another tune.
    """
    path = out / "tune.json"
    if not path.is_file():
        return []
    before = read_document(TuneDocument, path)
    same = ("sha256", "grid", "slo", "input_tokens", "output_tokens")
    if any(getattr(before, k) != getattr(doc, k) for k in same):
        raise ServelabError(f"--output {out} holds a tune of another recipe, grid, SLO or load; give a new --output, or the same command to resume it")
    doc.wall_s = before.wall_s
    return [launch.label for launch in before.launches]


@dataclass
class Tuner:
    """One tune (module docstring): ``measure(server, directory, start)`` runs capacity's search
    against a started server into ``directory`` (its probes there), ``say`` prints one line,
    ``waiting`` shows that a server is starting, ``write(path, text)`` writes the winner's recipe
    (the command's one output writer); ``history``: a resumed tune's launches in order (``earlier``),
    launched again in that order (read back where finished), whatever the rules would choose now
    with another ``--launches``."""

    recipe: Recipe
    out: Path
    doc: TuneDocument
    pricer: Pricer | None
    measure: Callable[[RecipeServer, Path, float | None], Capacity]
    say: Callable[[str], None]
    waiting: Callable[[str], AbstractContextManager]
    write: Callable[[Path, str], None]
    history: list[str] = field(default_factory=list)

    def run(self) -> TuneDocument:
        """Launch, measure, recalibrate and prune until the budget is spent (module docstring).

        Raises:
            KeyboardInterrupt: after stopping the server; ``tune.json`` says partial.
        """
        started, doc = time.monotonic() - self.doc.wall_s, self.doc  # a resumed tune's clock goes on
        measured, iteration = 0, 0
        try:
            while measured < doc.launches_budget:
                point = self._next()
                if point is None:
                    break
                iteration += 1
                launch = self._launch(point, iteration)
                doc.launches.append(launch)
                if launch.status == "failed":
                    point.status, point.why = "failed", launch.error
                    self.say(f"[{iteration}] {point.label}: failed to launch or measure, not counted: {launch.error}")
                    continue
                measured += 1
                point.status, point.measured, point.capped = "launched", launch.capacity, launch.capped
                self.say(f"[{iteration}] {point.label}: capacity {_streams(launch.capacity, launch.capped)} (predicted {_streams(launch.predicted)})")
                self._recalibrate()
                if doc.effects:
                    self.say("    left unexplained by the refit, by value: " + ", ".join(f"{k} {math.exp(v) - 1:+.0%}" for k, v in sorted(doc.effects.items())))
                write_document(self.out / "tune.json", doc)
            doc.status = "complete"
        except BaseException:  # Ctrl-C, or a failure that is not a launch's: what was measured stays, marked as such
            doc.status = "partial"
            raise
        finally:
            doc.wall_s = round(time.monotonic() - started, 1)
            self._conclude()
            write_document(self.out / "tune.json", doc)
        return doc

    def _measured(self) -> list[TunePoint]:
        """The launched points whose capacity was found."""
        return [p for p in self.doc.points if p.status == "launched" and p.measured is not None]

    def _best(self) -> TunePoint | None:
        launched = self._measured()
        return max(launched, key=lambda p: p.measured or 0.0) if launched else None

    def _next(self) -> TunePoint | None:
        """The next point to launch, after pruning those whose band's top is below the best measured:
        the best predicted candidate (grid order without pricing), except after a launch measured
        further from the prediction that chose it than the current band while more than one launch
        is left. Then predict is wrong about something the grid varies, so the best predicted
        candidate at least ``EXPLORE_DISTANCE`` values away from every launched point is launched (the
        farthest where none is that far; a launched point's neighbours are what the value effects
        already moved)."""
        best = self._best()
        candidates = [p for p in self.doc.points if p.status in ("priced", "not priced")]
        for p in candidates:
            if best is not None and p.band is not None and p.band[1] < (best.measured or 0):
                p.status, p.why = "pruned", f"its band's top, {p.band[1]:g} streams, is below the best measured, {best.measured:g} ({best.label})"
        candidates = [p for p in candidates if p.status != "pruned"]
        if not candidates:
            return None
        if len(self.doc.launches) < len(self.history):  # resumed: what this tune launched before, in order
            again = next((p for p in candidates if p.label == self.history[len(self.doc.launches)]), None)
            if again is not None:
                return again
        if not self.pricer:
            return candidates[0]
        doc = self.doc
        last = doc.launches[-1] if doc.launches else None
        surprised = last is not None and last.capacity and last.predicted and abs(last.capacity / last.predicted - 1) > doc.band
        launched = self._measured()  # not empty when surprised: the last launch measured a capacity
        left = doc.launches_budget - sum(x.status == "complete" for x in doc.launches)  # as run() counts them
        if surprised and left > 1:
            return max(candidates, key=lambda p: (min(EXPLORE_DISTANCE, *(_differing(p, q) for q in launched)), p.predicted or 0.0))
        return max(candidates, key=lambda p: p.predicted or 0.0)

    def _launch(self, point: TunePoint, iteration: int) -> TuneLaunch:
        """Launch ``point`` and measure its capacity, or read back a finished launch of an earlier run."""
        directory = self.out / variant_dir(point.label)
        done = directory / "launch.json"
        best = self._best()
        if done.is_file():  # what depends on this tune's course is its own: the same as before on a resume
            launch = read_document(TuneLaunch, done)
            self.say(f"[{iteration}] {point.label}: measured already ({directory})")
            point.predicted_at_launch = point.predicted
            return launch.model_copy(update={"iteration": iteration, "predicted": point.predicted, "change": _change(point, best),
                                             "delta_pct": _delta(launch.capacity, best)})  # fmt: skip
        for log in directory.glob("*.log"):
            log.replace(log.with_suffix(".log.prev"))
        start, t0 = point.predicted or None, time.monotonic()
        server = RecipeServer(self.recipe, self.recipe.resolve(point.values, point.label), directory)
        base = {"iteration": iteration, "label": point.label, "directory": directory.name, "predicted": point.predicted, "start": start,
                "change": _change(point, best), "status": "failed"}  # fmt: skip
        self.say(f"[{iteration}] {point.label}: starting {self.recipe.engine}" + (f", predicted {_streams(point.predicted)} streams" if self.pricer else ""))
        try:
            with self.waiting(f"{point.label}: waiting for {server.resolved.ready_url}…"):
                server.start()
            found = self.measure(server, directory, start)
        except ServelabError as exc:
            launch = TuneLaunch(**base, error=str(exc), wall_s=round(time.monotonic() - t0, 1))
        else:
            launch = TuneLaunch(**{**base, "status": "complete"}, capacity=found.capacity, capped=found.capped is not None, delta_pct=_delta(found.capacity, best),
                                binding=_binding(found), wall_s=round(time.monotonic() - t0, 1))  # fmt: skip
        finally:
            server.stop()
        point.predicted_at_launch = point.predicted
        write_document(done, launch)
        return launch

    def _recalibrate(self) -> None:
        """Refit the calibration and the objectives' factors on the launches, set the band, reprice,
        and scale the candidates by the grid values' effects."""
        if self.pricer is None:
            return
        doc = self.doc
        launched = [p for p in doc.points if p.status == "launched"]
        self.pricer.refit([(p, self.out / variant_dir(p.label)) for p in launched])
        errors = []
        for p in launched:
            got = self.pricer.within(p.settings, 0.0)
            if p.measured and not p.capped and not isinstance(got, str) and got.streams:
                errors.append(abs(got.streams / p.measured - 1))
        doc.factors = self.pricer.factors
        doc.band = round(max(FLOOR_BAND, *errors) if len(errors) > 1 else self.pricer.prior_band / 2, 3)
        doc.calibration = self.pricer.cal.model_dump()
        price_points(doc, self.pricer)
        for p in launched:  # their own prediction, after the calibration, beside what was measured
            got = self.pricer.within(p.settings, doc.band)
            if not isinstance(got, str):
                p.predicted, p.band, p.bottleneck = got.streams or 0, got.band, got.bottleneck
        doc.effects = value_effects(doc)  # what the calibration could not explain, on the candidates
        apply_effects(doc, doc.effects)

    def _conclude(self) -> None:
        """The winner, why it wins, and its recipe written beside the tune."""
        doc, best = self.doc, self._best()
        if best is None:
            doc.winner, doc.why = None, ["no launched point met the SLO at any load" if doc.launches else "nothing was launched"]
            return
        doc.winner = best.label
        launch = next(x for x in doc.launches if x.label == best.label and x.status == "complete")
        doc.why = [f"{best.label}: {_streams(best.measured, best.capped)} streams within the SLO"
                   + (f"; the objective that binds: {launch.binding}" if launch.binding else "; no probe missed up to the search's bound")]  # fmt: skip
        others = sorted((p for p in doc.points if p.status == "launched" and p is not best), key=lambda p: -(p.measured or 0))
        if others:
            doc.why.append(f"the next best measured: {others[0].label}, {_streams(others[0].measured, others[0].capped)} streams")
        doc.why += self._moved(best)
        self.write(self.out / BEST_RECIPE, best_recipe(self.recipe, best.values))
        doc.best_recipe = BEST_RECIPE

    def _moved(self, best: TunePoint) -> list[str]:
        """For each value of the winner that differs from the recipe's own: what predict says it moved."""
        if self.pricer is None:
            return []
        mine = self.pricer.within(best.settings, 0.0)
        if isinstance(mine, str):
            return []
        lines = []
        for key, value in best.values.items():
            own = {k: v for k, v in best.values.items() if k != key}
            default = self.recipe.defaults.get(key)
            if default is not None:
                own[key] = default
            if own.get(key) == value:
                continue
            if key in self.recipe.placeholders() and default is None:
                continue  # no value of the recipe's own to compare with
            other = self.pricer.within(settings_of(self.recipe, self.recipe.resolve(own, "recipe's own")), 0.0)
            was = f"{key} {value} (the recipe: {default if default is not None else 'unset'})"
            if isinstance(other, str):
                lines.append(f"{was}: with the recipe's value it does not fit ({other})")
                continue
            lines.append(f"{was}: predicted {_streams(mine.streams)} streams against {_streams(other.streams)}"
                         + (f"; with the recipe's value the bottleneck is {other.bottleneck}" if other.bottleneck and other.bottleneck != mine.bottleneck else ""))  # fmt: skip
        return lines


def _streams(value: float | None, capped: bool = False) -> str:
    return "none" if value is None else (f"at least {value:g}" if capped else f"{value:g}")


def _change(point: TunePoint, best: TunePoint | None) -> str:
    """What differs from the best point measured before (its values), or "first launch"."""
    if best is None:
        return "first launch"
    changed = [f"{k} {best.values.get(k)} → {v}" for k, v in point.values.items() if best.values.get(k) != v]
    return ", ".join(changed) or "same values"


def _differing(p: TunePoint, q: TunePoint) -> int:
    """How many of the grid's keys two points set differently."""
    return sum(v != q.values.get(k) for k, v in p.values.items())


def _delta(capacity: float | None, best: TunePoint | None) -> float | None:
    """Capacity Δ% against the best measured before, or None (the first launch, or nothing measured)."""
    return 100 * (capacity / best.measured - 1) if best is not None and best.measured and capacity is not None else None


def _binding(found: Capacity) -> str | None:
    """The objective(s) the smallest missing probe missed, with the measured values, or None (no probe missed)."""
    missed = [p for p in found.probes if not p.passed and not p.repeat]
    if not missed:
        return None
    probe = min(missed, key=lambda p: p.load)
    checks = [c for c in probe.slo.checks if not c.passed]
    words = ", ".join(f"{c.key} {c.measured_ms:,.1f} ms > {c.target_ms:g} ms" if c.measured_ms is not None else f"{c.key} (no value)" for c in checks)
    return f"{words or 'no request met the SLO'} at {probe.load:g} streams"


def best_recipe(recipe: Recipe, values: dict[str, str]) -> str:
    """The recipe with the winner's values: placeholders' as defaults, the others as flags appended
    to the command (``max_num_seqs=64`` → ``--max-num-seqs 64``), its variants dropped; YAML text
    that servelab reads back as a recipe.

    Raises:
        ServelabError: the result is not a valid recipe (should not happen: a bug).
    """
    data = recipe.model_dump(mode="json", exclude_unset=True, exclude={"variants"})
    used = recipe.placeholders()
    data["defaults"] = {**data.get("defaults", {}), **{k: v for k, v in values.items() if k in used}}
    data["command"] = [*recipe.command, *(a for k, v in values.items() if k not in used for a in flag_args(k, v))]
    text = f"# servelab tune's winner: {variant_label(values)}\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    parse_recipe(yaml.safe_load(text), {}, None, trusted=True)
    return text


def document_json(doc: TuneDocument) -> str:
    """``doc`` as strict JSON text (``--json``)."""
    return jsonfile.dumps(doc.model_dump(mode="json"), indent=1)
