"""Method families: how the plots split a crowded section into small multiples.

Each method class declares its family (``Method.family``: a section of the methods
document); this module only orders the families for the plots. A record names its method
key, resolved through the method registry; a key the registry does not know (a method
since removed, a plugin not installed) is drawn under ``other``, so a record never breaks
a plot.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

__all__ = ["ORDER", "OTHER", "family_of", "families_in"]

#: the families in the order the plots draw them (the sections of the methods document); a
#: family not listed here follows them, before :data:`OTHER`
ORDER: tuple[str, ...] = ("baselines", "layer / depth subsets", "rank heterogeneity", "LoRA aggregation (2024-2026)",
                          "alternating factors (2025)", "Fed-HeLLo", "FedLoRA family (personalised)",
                          "shared-A personalised LoRA")
OTHER = "other"


@lru_cache(maxsize=None)
def family_of(method: str) -> str:
    """The family its class declares (:data:`OTHER` for a key the registry does not know)."""
    from fedbench.methods import METHODS

    if method not in METHODS:
        return OTHER
    return METHODS.get(method).family


def families_in(methods: Iterable[str]) -> list[str]:
    """The families of ``methods``: :data:`ORDER` first, then any other family by name,
    :data:`OTHER` last."""
    present = {family_of(m) for m in methods}
    rest = sorted(present - set(ORDER) - {OTHER})
    return [f for f in (*ORDER, *rest, OTHER) if f in present]
