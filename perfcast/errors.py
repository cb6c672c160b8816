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


def _one_line_warning(message, category, filename, lineno, line=None, _default=None) -> str:
    """A perfcast UserWarning as `warning: ...` (what the user should know, not the library line that said it);
    any other category as Python formats it."""
    if issubclass(category, UserWarning):
        return f"warning: {message}\n"
    return _default(message, category, filename, lineno, line)


def run_with_one_line_errors(fn, *args, **kwargs):
    """fn(*args, **kwargs), with a PerfcastError printed as one line `error: ...` on stderr and exit status 2 (the
    traceback with PERFCAST_DEBUG=1): the `perfcast` CLI and the bench scripts end the same way. Meanwhile a
    UserWarning (a device without data, a build that timed out, ...) prints as one line `warning: ...` instead of
    Python's two with the library's file, line and source (those with PERFCAST_DEBUG=1)."""
    import functools
    import warnings

    debug = os.environ.get("PERFCAST_DEBUG") == "1"
    default = warnings.formatwarning
    if not debug:
        warnings.formatwarning = functools.partial(_one_line_warning, _default=default)
    try:
        return fn(*args, **kwargs)
    except PerfcastError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    finally:
        warnings.formatwarning = default
