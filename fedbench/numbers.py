"""Numbers written by a user (``--roc 6:3:1``, ``--devices phone:0.6,...``, the ``k`` of
``--setting 20/1.0``), parsed without computing anything absurd first.

``fractions.Fraction("1e999999999")`` builds 10**(10**9) (minutes of CPU and gigabytes)
and ``int`` of a 5000-digit string raises a ValueError that Python words for developers;
both are refused here, before any arithmetic: at most :data:`MAX_CHARS` characters and an
exponent of at most :data:`MAX_EXPONENT` in magnitude. Callers turn the ``ValueError``
into their own one-line :class:`~fedbench.errors.UserError`.

Only the standard library: the CLI imports this before torch.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["MAX_CHARS", "MAX_EXPONENT", "exact_number", "whole_number"]

#: the longest number accepted, in characters (a share, a count)
MAX_CHARS = 40
#: the largest power of ten a share may be written with (``6e3`` is fine, ``1e999999999`` is not)
MAX_EXPONENT = 30

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?")


def _checked(text: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"not a number: {type(text).__name__}")
    t = text.strip()
    if len(t) > MAX_CHARS:
        raise ValueError(f"a number of more than {MAX_CHARS} characters")
    return t


def exact_number(text: str) -> Fraction:
    """``text`` (a decimal such as ``0.6``, ``6``, ``6e3`` or a ratio ``1/3``) as an exact
    fraction; ValueError for anything else, including an exponent beyond
    :data:`MAX_EXPONENT` or a text longer than :data:`MAX_CHARS` (checked before computing)."""
    t = _checked(text)
    if "/" in t:
        num, _, den = t.partition("/")
        d = exact_number(den)
        if d == 0:
            raise ValueError("division by zero")
        return exact_number(num) / d
    m = _DECIMAL.fullmatch(t)
    if m is None:
        raise ValueError(f"not a number: {t!r}")
    if m.group(1) is not None and abs(int(m.group(1))) > MAX_EXPONENT:
        raise ValueError(f"exponent out of range (at most {MAX_EXPONENT} in magnitude)")
    return Fraction(t)


def whole_number(text: str, lo: int, hi: int) -> int:
    """``text`` as a decimal integer ``lo <= n <= hi``; ValueError otherwise (a text longer
    than :data:`MAX_CHARS` is refused before it is converted)."""
    t = _checked(text)
    if not re.fullmatch(r"[+-]?\d+", t):
        raise ValueError(f"not a whole number: {t!r}")
    n = int(t, 10)
    if not lo <= n <= hi:
        raise ValueError(f"out of range {lo}..{hi}")
    return n
