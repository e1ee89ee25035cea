"""Commands bound to the settings models: each option of a :class:`~servelab.settings.Load` or
:class:`~servelab.settings.Target` setting is generated from its declaration (flag, default,
bounds, help), never written again in a command (``docs/architecture.md``, "One load model").

``@bind(load=LOAD_ALL, target=TARGET_ALL)`` on a command whose parameters include ``load: Load``
and ``target: Target`` gives it one option per named setting and calls it with the two models
built from them. A value the model refuses ends as one line naming the option.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from servelab.errors import ServelabError
from servelab.settings import Load, Target, cli_facts

F = TypeVar("F", bound=Callable[..., Any])

LOAD_ALL = tuple(Load.model_fields)
TARGET_ALL = tuple(Target.model_fields)
SEARCHED = ("concurrency", "workers", "rates", "sessions", "repeats", "time_scale", "closed_loop")  # capacity's own: the dimension searched, how
CAPACITY_LOAD = tuple(n for n in LOAD_ALL if n not in SEARCHED)  # servelab capacity's and tune's load settings
EMBEDDED = ("parallel", "ctx_size", "llama_server")  # the embedded server's settings (serve-local)


def _cli_type(model: type[BaseModel], name: str) -> Any:
    """The option's Python type: ``str`` for a setting given as text, else the field's type."""
    return str | None if cli_facts(model, name)["text"] else model.model_fields[name].annotation


def _cli_default(model: type[BaseModel], name: str) -> Any:
    """The option's default as the command line writes it: a list as ``1,2,4``."""
    default = model.model_fields[name].default
    return ",".join(str(v) for v in default) if isinstance(default, list) else default


def option(model: type[BaseModel], name: str) -> inspect.Parameter:
    """The Typer option of setting ``name`` of ``model``, as a keyword-only parameter."""
    facts = cli_facts(model, name)
    kwargs = {k: facts[k] for k in ("min", "max", "envvar") if facts.get(k) is not None}
    annotated = Annotated[_cli_type(model, name), typer.Option(facts["flag"], help=facts["help"], **kwargs)]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotated, default=_cli_default(model, name))


def build(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """``model`` from option values.

    Raises:
        ServelabError: a value it refuses, naming the option (its flag).
    """
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        flag = cli_facts(model, name)["flag"].split("/")[0] if name in model.model_fields else name
        raise ServelabError(f"{flag}: {err['msg']}") from None


def bind(**groups: tuple[type[BaseModel], Collection[str]]) -> Callable[[F], F]:
    """Bind a command's ``load``/``target`` parameters (the keys of ``groups``) to options of the
    named settings of their models: ``bind(load=(Load, names), target=(Target, names))``."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in groups]
        added = [option(model, name) for model, names in groups.values() for name in names]

        @functools.wraps(command)
        def bound(*args: Any, **kwargs: Any) -> Any:
            for group, (model, names) in groups.items():
                kwargs[group] = build(model, {name: kwargs.pop(name) for name in names})
            return command(*args, **kwargs)

        parameters = own + added
        bound.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        bound.__annotations__ = {p.name: p.annotation for p in parameters}
        return bound  # type: ignore[return-value]

    return decorate
