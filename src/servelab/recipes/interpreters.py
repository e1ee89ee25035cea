"""Where a value would run as code: the script argument of a shell in a recipe's command.

A ``{placeholder}`` in such an argument would hand its value to the interpreter as code
(``--set 'v=$(touch F)'``); ``servelab.recipes.format`` refuses it when the recipe is read.
"""

from __future__ import annotations

SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "fish"}


def script_index(command: list[str]) -> int | None:
    """Index of the script of a ``SHELL -c SCRIPT`` in the command (also after ``env``/``exec``
    wrappers and with combined flags such as ``-lc``), or None."""
    for i, arg in enumerate(command):
        if arg.rsplit("/", 1)[-1] in SHELLS:
            for j in range(i + 1, len(command) - 1):
                flag = command[j]
                if not flag.startswith("-"):
                    break
                if "c" in flag.lstrip("-") and not flag.startswith("--"):
                    return j + 1
    return None
