"""Recipes on an allowlist: where a placeholder's value may go.

A value (``--set``, ``--vary``, a variant, a default) reaches a server's command only

- as a whole argument, as the VALUE of a whole ``--flag=VALUE`` argument, or as a plain word
  (letters, digits, ``. _ / : + -``) inside a longer argument (``'{"num_speculative_tokens": {k}}'``:
  no quote, comma, brace or space that would change the text around it),
- of a program servelab knows how to launch: the recipe's engine's ``launchers`` (``vllm serve``,
  ``python -m vllm.entrypoints.openai.api_server``, ``python -m sglang.launch_server``,
  ``llama-server``, ``trtllm-serve``; ``servelab.engines``), matched on the filled command, so a
  ``{embedded_llama_server}`` program must still be a llama-server,
- never starting with ``-`` unless it is a number (the program would read it as an option).

A value for a name the command does not use becomes ``--name VALUE`` (``recipes.flags``): whole
arguments too, of a known program only. ``{port}`` and ``{tensor_parallel}`` are integers, checked
before anything runs: allowed anywhere. No environment variable takes a placeholder: too many load
code (``LD_PRELOAD``, ``CUDA_INJECTION64_PATH``, ``NCCL_NET_PLUGIN``, ``RAY_RUNTIME_ENV_HOOK`` …) for
a list of safe ones to hold. The container image takes one when the filled text is an image
reference.

Anything else (``env -S "sh -c '… {v}'"``, ``awk 'BEGIN{system("{v}")}'``, ``python -c``, a wrapper
such as ``nice`` or ``timeout`` in front of the server, any interpreter) is refused by ``lint``,
``launch`` and ``sweep`` in one line naming the file and line. A user who wrote such a recipe
trusts it with ``--trust-recipe``: its values then go where it says, and each command prints what
it trusted.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

CHECKED = frozenset({"port", "tensor_parallel"})  # integers, validated in Recipe.resolve before a command exists
FLAG_VALUE = re.compile(r"(--?[A-Za-z0-9][A-Za-z0-9_.-]*=)\{([A-Za-z_][A-Za-z0-9_]*)\}")  # --flag={name}
WHOLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
WORD = re.compile(r"[A-Za-z0-9._/:+-]+")  # a value inside a longer argument (a JSON number, a model name): no quote, comma, brace or space
NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")  # docker's image reference characters, never an option
PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")
TRUST = "if you wrote this recipe and trust it, pass --trust-recipe"


def names(text: str) -> set[str]:
    """The placeholder names in ``text`` (its syntax was checked when the recipe was read)."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _program(arg: str) -> str:
    """The name a launcher lists for ``arg``: its base name, ``python`` for any python3.X."""
    base = arg.rsplit("/", 1)[-1]
    return "python" if PYTHON.fullmatch(base) else base


def launcher_length(argv: Sequence[str], launchers: Sequence[tuple[str, ...]]) -> int | None:
    """How many leading arguments of ``argv`` are one of ``launchers`` (program by base name), or None."""
    for launcher in launchers:
        head = list(argv[: len(launcher)])
        if len(head) == len(launcher) and [_program(head[0]), *head[1:]] == list(launcher):
            return len(launcher)
    return None


def _shown(launchers: Sequence[tuple[str, ...]]) -> str:
    return ", ".join(" ".join(launcher) for launcher in launchers) or "none for this engine: use engine vllm, sglang, llama.cpp or trtllm"


def template_problem(command: Sequence[str], env: Mapping[str, str], launchers: Sequence[tuple[str, ...]]) -> tuple[tuple, str] | None:
    """Where a recipe's text would put a value outside the allowlist (module docstring): (its key
    path, one phrase naming the fix), or None.

    ``command`` is the recipe's argument list before filling in, ``env`` its variables, ``launchers``
    its engine's. A whole ``{name}`` as the program is allowed here; :func:`values_problem` checks
    the program it names once filled.
    """
    free = [i for i, arg in enumerate(command) if names(arg) - CHECKED]
    if free and not (launcher_length(command, launchers) or (launchers and WHOLE.fullmatch(command[0]))):
        return ("command", free[0]), (f"placeholders fill arguments of a server servelab knows how to launch ({_shown(launchers)}), "
                                      f"not of {command[0]!r}; {TRUST}")
    for key, value in env.items():
        if names(value) - CHECKED:
            return ("env", key), (f"a placeholder in the environment variable {key}: a variable can load code into the server "
                                  f"(CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN, LD_PRELOAD …), so servelab fills none; {TRUST}")
    return None


def values_problem(argv: Sequence[str], command: Sequence[str], values: Mapping[str, str], appended: Sequence[Sequence[str]],
                   image: str | None, launchers: Sequence[tuple[str, ...]]) -> str | None:
    """What a filled command would do outside the allowlist, or None.

    Args:
        argv: the filled command.
        command: the recipe's command before filling in (where each placeholder stands).
        values: every placeholder's value.
        appended: the flags appended for names the command does not use (``[--name, VALUE]`` or ``[--name]``).
        image: the filled container image, or None.
        launchers: the engine's.
    """
    placed = [values[m.group(1)] for arg in command if (m := WHOLE.fullmatch(arg)) and m.group(1) not in CHECKED]
    placed += [v for added in appended for v in added[1:]]
    inside = [values[n] for arg in command if not WHOLE.fullmatch(arg) and not FLAG_VALUE.fullmatch(arg) for n in names(arg) - CHECKED]
    reached = any(names(arg) - CHECKED for arg in command) or any(appended)
    if reached and launcher_length(argv, launchers) is None:
        return f"values reach {argv[0]!r}, which is not a server servelab knows how to launch ({_shown(launchers)}); {TRUST}"
    dash = next((v for v in placed if v.startswith("-") and not NUMBER.fullmatch(v)), None)
    if dash is not None:
        return f"the value {dash!r} starts with '-': the server would read it as an option; give the flag itself (--set name=true) or {TRUST}"
    odd = next((v for v in inside if not WORD.fullmatch(v)), None)
    if odd is not None:
        return (f"the value {odd!r} goes inside a longer argument, where only a plain word may go (letters, digits and . _ / : + -: "
                f"no quotes, spaces, commas or braces); {TRUST}")
    if image is not None and not IMAGE.fullmatch(image):
        return f"container image {image!r} is not an image reference (letters, digits and . _ / : @ -, not starting with '-')"
    return None
