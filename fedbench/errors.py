"""Errors that the CLI turns into a one-line message and exit status 2, and the bounded
way such a message shows a value (:func:`shown`)."""

from __future__ import annotations

import reprlib
from typing import Any


class UserError(ValueError):
    """Bad input from the user: unknown key, malformed option, missing data.

    The CLI prints ``str(err)`` on one line and exits with status 2, no traceback.
    """


class _Short(reprlib.Repr):
    """A repr that stops early: a few levels, items and characters (a YAML document of
    aliases nested 70 deep has a repr of 10**20 characters; this one has at most a few hundred)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 4, 6, 6, 6
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # repr() of a 5000-digit integer raises; this never does
            return f"<{x.bit_length()}-bit integer>"
        return super().repr_int(x, level)


_SHORT = _Short()


def shown(value: Any, n: int = 60) -> str:
    """``repr(value)`` for a one-line message: built with limits (never the whole repr of a
    huge value), control characters escaped, at most about ``n`` characters."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 -- a value whose repr raises is still named
        text = f"<{type(value).__name__}>"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= n else text[: n - 3] + "..."


def user_failure(e: BaseException) -> str:
    """One line saying how user code (a plugin, a callback) failed; a ``SystemExit`` is
    reported as the call it was, never obeyed."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({shown(e.code)}) (not obeyed)"
    text = (str(e).strip().splitlines() or [""])[0]
    text = "".join(c if c.isprintable() else " " for c in text)[:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


__all__ = ["UserError", "shown", "user_failure"]
