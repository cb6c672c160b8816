"""The one error type users see: the CLI turns it into a single line (traceback with PERFCAST_DEBUG=1)."""


class PerfcastError(Exception):
    """A user-facing error whose message names the bad value and the fix."""


class UnknownNameError(PerfcastError, ValueError):
    """A registry lookup with a name that is not registered."""

    def __init__(self, kind: str, name: str, known: list[str], hint: str = ""):
        msg = f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)
