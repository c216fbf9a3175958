"""The ``--setting`` grammar: a data-split string -> :class:`Setting`.

Forms (what each means, and the paper it follows, is in :mod:`fedbench.tasks.partition`):
``iid``, ``dir(a)``, ``k/a``, ``k/-``, ``domain``, ``domain+dir(a)xm``, ``k/Dd``.

Parsing ignores case and surrounding blanks and reads numbers by value, so one split has
many spellings (``IID``, `` iid``; ``20/1``, ``20/1.00``; ``25/d1``); every spelling has one
:attr:`Setting.canonical` form (``iid``, ``20/1.0``, ``25/D1``), the name to key runs and
partitions by. Integers (k, m, d) are at most :data:`MAX_COUNT`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fedbench.errors import UserError, shown
from fedbench.numbers import whole_number

VALID_FORMS = (
    "valid forms: iid, dir(a), k/a, k/-, domain, domain+dir(a)xm, k/Dd "
    "(e.g. 20/1.0, 10/-, dir(0.5), domain+dir(0.5)x5, 25/D1)"
)

_DOMAIN_KINDS = frozenset({"domain", "domain_dir", "k_domains"})
MAX_COUNT = 100_000  # largest k (classes per client), m (clients per domain), d (domains per class)


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Setting:
    kind: str  # "iid" | "dir" | "k_alpha" | "k_path" | "domain" | "domain_dir" | "k_domains"
    raw: str  # the string as given (stripped), e.g. "20/1" (see ``canonical``)
    k: int | None = None  # classes per client
    alpha: float | None = None  # Dirichlet concentration
    m: int | None = None  # clients per domain (domain+dir(a)xm)
    d: int | None = None  # domains per class (k/Dd)

    @property
    def needs_domains(self) -> bool:
        return self.kind in _DOMAIN_KINDS

    @property
    def canonical(self) -> str:
        """The one spelling of this split: lower case (``D`` of ``k/Dd`` upper), integers in
        decimal, a concentration as Python's shortest float repr (``1.0``, ``0.5``, ``1e-05``)."""
        a = repr(self.alpha)
        return {"iid": "iid", "domain": "domain", "dir": f"dir({a})", "k_alpha": f"{self.k}/{a}",
                "k_path": f"{self.k}/-", "domain_dir": f"domain+dir({a})x{self.m}",
                "k_domains": f"{self.k}/D{self.d}"}[self.kind]


_NUM = r"([^()/x\s]+)"  # validated by float() below, so the regex can stay loose
_PATTERNS = [
    ("iid", re.compile(r"iid")),
    ("domain", re.compile(r"domain")),
    ("dir", re.compile(r"dir\(" + _NUM + r"\)")),
    ("domain_dir", re.compile(r"domain\+dir\(" + _NUM + r"\)x(\d+)")),
    ("k_domains", re.compile(r"(\d+)/d(\d+)")),
    ("k_path", re.compile(r"(\d+)/-")),
    ("k_alpha", re.compile(r"(\d+)/" + _NUM)),
]


def _bad(s: str, why: str = "unknown setting") -> UserError:
    return UserError(f"{why} {shown(s)}; {VALID_FORMS}")  # one line and short, whatever the input


def _alpha(text: str, s: str) -> float:
    try:
        a = float(text)
    except ValueError:
        raise _bad(s) from None
    if not math.isfinite(a) or a <= 0:
        raise _bad(s, "Dirichlet concentration a must be a finite number > 0 in setting")
    return a


def _positive(text: str, s: str, name: str) -> int:
    try:
        return whole_number(text, 1, MAX_COUNT)  # a 5000-digit k is refused before it is converted
    except ValueError:
        raise _bad(s, f"{name} must be in 1..{MAX_COUNT} in setting") from None


def parse_setting(s: str) -> Setting:
    """Parse a ``--setting`` string (any spelling, see the module docstring); raise
    :class:`UserError` (one line) if malformed."""
    if not isinstance(s, str):
        raise _bad(str(s))
    raw = s.strip()
    text = raw.lower()  # "IID", "25/d1" are accepted too
    for kind, pat in _PATTERNS:
        mt = pat.fullmatch(text)
        if mt is None:
            continue
        g = mt.groups()
        if kind in ("iid", "domain"):
            return Setting(kind, raw)
        if kind == "dir":
            return Setting(kind, raw, alpha=_alpha(g[0], raw))
        if kind == "domain_dir":
            return Setting(kind, raw, alpha=_alpha(g[0], raw), m=_positive(g[1], raw, "m"))
        if kind == "k_domains":
            return Setting(kind, raw, k=_positive(g[0], raw, "k"), d=_positive(g[1], raw, "d"))
        if kind == "k_path":
            return Setting(kind, raw, k=_positive(g[0], raw, "k"))
        return Setting(kind, raw, k=_positive(g[0], raw, "k"), alpha=_alpha(g[1], raw))
    raise _bad(raw)

