"""Method families: how the plots split a crowded section into small multiples.

A record names its method key only; the families follow the sections of the methods
document (docs/methods.md), in this order. A method not listed here is drawn under
``other``, so a new method never breaks a plot (add its key to its family to place it).
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["FAMILIES", "OTHER", "family_of", "families_in"]

#: family name -> method keys, in the order the plots draw them
FAMILIES: dict[str, tuple[str, ...]] = {
    "baselines": ("fedavg", "all_small", "straggler", "exclusive"),
    "layer / depth subsets": ("fedra", "fedra_fulldepth", "inclusivefl", "depthfl", "fed_pilot"),
    "rank heterogeneity": ("hetlora", "flexlora", "flora", "raflora", "hlora", "fed_plora", "fedhl"),
    "LoRA aggregation (2024-2026)": ("ffa_lora", "fedex_lora", "lora_fair", "fed_sb"),
    "Fed-HeLLo": ("fed_hello", "fed_hello_fim", "fed_hello_rgd", "fed_hello_gd_triangle", "fed_hello_gd_inverted",
                  "fed_hello_gd_bottleneck", "fed_hello_gd_uniform"),
    "FedLoRA family (personalised)": ("fedlora", "standalone", "lg_fedavg", "fml", "fedkd", "fd", "fedproto"),
    "shared-A personalised LoRA": ("fedsa_lora",),
}
OTHER = "other"
_FAMILY_OF = {m: f for f, methods in FAMILIES.items() for m in methods}


def family_of(method: str) -> str:
    """The family of a method key (:data:`OTHER` for a key no family lists)."""
    return _FAMILY_OF.get(method, OTHER)


def families_in(methods: Iterable[str]) -> list[str]:
    """The families of ``methods``, in :data:`FAMILIES` order, :data:`OTHER` last."""
    present = {family_of(m) for m in methods}
    return [f for f in (*FAMILIES, OTHER) if f in present]
