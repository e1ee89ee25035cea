"""The one error type that reaches users as a single clear line (never a traceback)."""


class ServelabError(Exception):
    """A problem the user can fix: bad input, an unreachable server, a request that cannot fit.

    The message is one line that names the input and the fix. The CLI prints it and exits with
    code 2; library callers may catch it like any exception.
    """
