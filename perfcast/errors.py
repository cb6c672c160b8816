"""The one error type users see: the CLI turns it into a single line (traceback with PERFCAST_DEBUG=1)."""

from __future__ import annotations

import os
import sys


class PerfcastError(Exception):
    """A user-facing error whose message names the bad value and the fix."""


class UnknownNameError(PerfcastError, ValueError):
    """A registry lookup with a name that is not registered."""

    def __init__(self, kind: str, name: str, known: list[str], hint: str = ""):
        msg = f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


def run_with_one_line_errors(fn, *args, **kwargs):
    """fn(*args, **kwargs), with a PerfcastError printed as one line `error: ...` on stderr and exit status 2 (the
    traceback with PERFCAST_DEBUG=1): the `perfcast` CLI and the bench scripts end the same way."""
    try:
        return fn(*args, **kwargs)
    except PerfcastError as e:
        if os.environ.get("PERFCAST_DEBUG") == "1":
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
