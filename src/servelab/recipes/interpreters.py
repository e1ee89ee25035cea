"""Where a value would run as code: the script argument of a shell or an interpreter in a recipe's command.

A ``{placeholder}`` in such an argument would hand its value to the interpreter as code
(``--set 'v=$(touch F)'``); ``servelab.recipes.format`` refuses it when the recipe is read.

- Shells (sh, bash, dash, zsh, ksh, mksh, ash, fish, csh, tcsh, yash; also after ``env …``,
  ``exec`` or ``busybox``): with a ``c`` among the options before the first operand, that operand is
  the script, whatever other options come first (``-o pipefail``, ``+e``, ``-lc``, ``-O extglob``).
  Without ``-c`` the first operand is a script file and the rest are data (``$1`` …).
- Interpreters whose option takes the code as its argument: ``python -c CODE``, ``perl -e/-E CODE``,
  ``ruby -e CODE``, ``node -e/-p/--eval/--print CODE`` (every such option's argument).
"""

from __future__ import annotations

import re

SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash"}
SHELL_OPTIONS_WITH_ARGUMENT = {"-o", "+o", "-O", "+O"}  # bash/zsh/ksh: -o pipefail
CODE_OPTIONS = {  # interpreter (basename pattern) → options whose argument is code
    re.compile(r"python[0-9.]*"): ("c",),
    re.compile(r"perl[0-9.]*"): ("e", "E"),
    re.compile(r"ruby[0-9.]*"): ("e",),
    re.compile(r"node(?:js)?"): ("e", "p", "-eval", "-print"),
}
OPTIONS_WITH_ARGUMENT = {"-W", "-X", "-I", "-M", "-r", "--require", "--import", "--loader"}  # skipped with their argument


def script_indices(command: list[str]) -> list[int]:
    """Indices of the arguments of ``command`` that an interpreter runs as code (module docstring)."""
    out: list[int] = []
    for i, arg in enumerate(command):
        name = arg.rsplit("/", 1)[-1]
        if name in SHELLS:
            out += _shell_script(command, i)
        else:
            letters = next((v for k, v in CODE_OPTIONS.items() if k.fullmatch(name)), None)
            if letters:
                out += _code_arguments(command, i, letters)
    return sorted(set(out))


def _shell_script(command: list[str], i: int) -> list[int]:
    """The script of the shell at ``i``: the first operand after options that include ``c``."""
    has_c, j = False, i + 1
    while j < len(command):
        a = command[j]
        if a == "--":
            j += 1
            break
        if a.startswith("--"):  # --login, --norc …
            j += 1
            continue
        if len(a) > 1 and a[0] in "-+":
            has_c = has_c or "c" in a[1:]
            j += 2 if a in SHELL_OPTIONS_WITH_ARGUMENT else 1
            continue
        break
    return [j] if has_c and j < len(command) else []


def _code_arguments(command: list[str], i: int, letters: tuple[str, ...]) -> list[int]:
    """The arguments of the code options of the interpreter at ``i`` (``-c CODE``, ``-e CODE``,
    ``--eval CODE``, and ``-Xc CODE`` clusters), up to its first operand (a script file)."""
    out, j = [], i + 1
    while j < len(command):
        a = command[j]
        if not a.startswith("-") or a == "-":
            break
        option = a[2:].split("=", 1)[0] if a.startswith("--") else a[-1]
        if ("-" + option if a.startswith("--") else option) in letters:
            if "=" in a:
                out.append(j)  # --eval=CODE
            elif j + 1 < len(command):
                out.append(j + 1)
                j += 1
        elif a in OPTIONS_WITH_ARGUMENT:
            j += 1
        j += 1
    return out
