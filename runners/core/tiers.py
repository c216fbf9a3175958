"""Client resource tiers: ``--roc 6:3:1``, ``--capacities 12,10,8,6,4,3``, ``--dynamic``.

A tier fixes how much a client can train: a count of adapter layers (layer methods), the
same count as a prefix depth (depth methods), and a LoRA rank (rank methods).

- ``--roc a:b:c``: fractions a/(a+b+c), ... of the clients fall into tiers 0, 1, 2 whose
  layer budgets are ``tier_fractions`` of L (Fed-HeLLo: 1/2, 3/4, all) and whose ranks are
  ``tier_ranks`` (None = by task kind, Fed-HeLLo Sec. IV-A's rank baselines: 1/4/16 for
  classification, 1/1/8 for instruction tuning; :mod:`fedbench.methods.paper_defaults`).
  Tier 0 is the weakest. Counts are exact (``largest_remainder`` on :class:`fractions.Fraction`).
- ``--capacities``: per-client layer counts (FedRA), cycled when there are more clients
  (more counts than clients is refused unless ``--dynamic`` draws from them:
  :func:`check_capacities`); tiers are the distinct counts in ascending order.
- neither: every client can train everything (tier 0).
- ``--dynamic``: every round each client's budget is redrawn (FedRA Table 4): from the
  tier distribution (roc) or uniformly from the capacities list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from fedbench.configs import parse_roc, parse_roc_exact  # noqa: F401 - their home is the base package (no torch)
from fedbench.errors import UserError
from fedbench.methods.base import ClientProfile
from fedbench.methods.paper_defaults import paper_defaults


def tier_ranks_for(tier_ranks: Sequence[int] | None, task_kind: str) -> list[int]:
    """``run.tier_ranks`` resolved: the given list, or the paper's for ``task_kind``."""
    if tier_ranks is not None:
        return [int(r) for r in tier_ranks]
    return list(paper_defaults(task_kind).tier_ranks)


def check_capacities(capacities: Sequence[int] | None, n_clients: int, dynamic: bool) -> None:
    """A fixed (not ``--dynamic``) ``--capacities`` list gives client i the budget i (cycled): a
    list longer than the clients would hold budgets no client gets, and tiers with no client;
    one :class:`UserError` line (checked when the spec is built and when the tiers are)."""
    if capacities and not dynamic and len(capacities) > n_clients:
        raise UserError(f"--capacities lists {len(capacities)} layer budgets for {n_clients} clients: the last "
                        f"{len(capacities) - n_clients} would go to no client (give at most one per client, or "
                        f"--dynamic to draw each round's budgets from the list)")


def largest_remainder(n: int, fractions: Sequence[Fraction | float | int]) -> list[int]:
    """Integer counts summing to n, as close as possible to n * fractions (Hamilton's
    largest-remainder method, in exact rational arithmetic).

    Each tier gets floor(n f_t); the clients left over go one each to the tiers with the
    largest remainders n f_t - floor(n f_t). Tie rule: equal remainders go to the lower
    tier index first (the weaker tier). Floats are converted exactly, so pass
    :class:`~fractions.Fraction` shares (``parse_roc_exact``) for decimal-exact counts:
    ``largest_remainder(6, [6/10, 3/10, 1/10])`` = [4, 2, 0].
    """
    fr = [Fraction(f) for f in fractions]
    total = sum(fr)
    if total <= 0 or any(f < 0 for f in fr):
        raise ValueError(f"fractions must be >= 0 with a positive sum, got {fractions}")
    raw = [n * f / total for f in fr]
    counts = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


@dataclass
class Tier:
    tier: int
    layers: int
    rank: int
    fraction: float | None


class TierAssigner:
    """Assigns each client a tier, once (static) or every round (``dynamic``)."""

    def __init__(self, n_clients: int, n_layers: int, *, roc: str | None, capacities: list[int] | None,
                 dynamic: bool, tier_fractions: list[float], tier_ranks: list[int], max_rank: int, seed: int):
        if roc and capacities:
            raise UserError("give either --roc or --capacities, not both")
        self.n_clients, self.n_layers, self.dynamic = n_clients, n_layers, dynamic
        rng = np.random.default_rng([seed, 7])
        if roc:
            exact = parse_roc_exact(roc)
            fr = [float(f) for f in exact]
            if len(fr) != len(tier_fractions):
                raise UserError(
                    f"--roc {roc!r} has {len(fr)} tiers but tier_fractions has {len(tier_fractions)} "
                    f"({tier_fractions}); set run.tier_fractions to match"
                )
            self.tiers = [
                Tier(t, self._layers(f, n_layers), self._rank(t, len(fr), tier_ranks, f, max_rank), p)
                for t, (f, p) in enumerate(zip(tier_fractions, fr))
            ]
            self.probs = np.array(fr)
            counts = largest_remainder(n_clients, exact)
            assignment = np.repeat(np.arange(len(fr)), counts)
            self.assignment = rng.permutation(assignment)
        elif capacities:
            check_capacities(capacities, n_clients, dynamic)
            bad = [c for c in capacities if c < 1 or c > n_layers]
            if bad:
                raise UserError(f"--capacities {bad[0]} is outside 1..{n_layers} (the model has {n_layers} layers)")
            levels = sorted(set(capacities))
            self.tiers = [
                Tier(t, c, self._rank(t, len(levels), tier_ranks, c / n_layers, max_rank), None)
                for t, c in enumerate(levels)
            ]
            per_client = [capacities[i % len(capacities)] for i in range(n_clients)]
            self.assignment = np.array([levels.index(c) for c in per_client])
            self.probs = np.array([capacities.count(c) / len(capacities) for c in levels])
        else:
            self.tiers = [Tier(0, n_layers, max_rank, 1.0)]
            self.assignment = np.zeros(n_clients, dtype=np.int64)
            self.probs = np.array([1.0])
        for t in self.tiers:
            if t.fraction is not None and not 0 < tier_fractions[t.tier] <= 1:
                raise UserError(f"tier_fractions must be in (0, 1], got {tier_fractions}")

    @staticmethod
    def _layers(frac: float, n_layers: int) -> int:
        """ceil(frac * L) in exact arithmetic (frac read as its shortest decimal: 0.75 of
        12 is 9, 1/3 written 0.333... of 12 is 4), clipped to 1..L."""
        f = Fraction(repr(float(frac))).limit_denominator(10**6)
        return max(1, min(n_layers, math.ceil(f * n_layers)))

    @staticmethod
    def _rank(t: int, n_tiers: int, tier_ranks: list[int], frac: float, max_rank: int) -> int:
        """The tier's rank: ``tier_ranks[t]`` when there is one per tier, else
        round-half-up(max_rank * frac) in exact arithmetic, at least 1."""
        if n_tiers == len(tier_ranks):
            return int(tier_ranks[t])
        f = Fraction(repr(float(frac))).limit_denominator(10**6)
        return max(1, math.floor(max_rank * f + Fraction(1, 2)))

    def tier_of(self, client: int, rnd: int, rng: np.random.Generator) -> int:
        if not self.dynamic:
            return int(self.assignment[client])
        return int(rng.choice(len(self.tiers), p=self.probs))

    def profiles(self, clients: list[int], rnd: int, rng: np.random.Generator, sizes: list[int]) -> list[ClientProfile]:
        out = []
        for c in clients:
            t = self.tiers[self.tier_of(c, rnd, rng)]
            out.append(ClientProfile(client=c, tier=t.tier, layers=t.layers, rank=t.rank, n_examples=sizes[c]))
        return out

    def static_profiles(self, sizes: list[int]) -> dict[int, ClientProfile]:
        return {
            c: ClientProfile(c, int(self.assignment[c]), self.tiers[self.assignment[c]].layers,
                             self.tiers[self.assignment[c]].rank, sizes[c])
            for c in range(self.n_clients)
        }

    def reachable_profiles(self, sizes: list[int]) -> list[ClientProfile]:
        """The budgets clients can have: every client's static profile, or with ``dynamic``
        one profile per tier drawn with positive probability (client -1, no examples).
        What ``Method.check_tiers`` is given."""
        if not self.dynamic:
            return list(self.static_profiles(sizes).values())
        return [ClientProfile(-1, t.tier, t.layers, t.rank, 0) for t, p in zip(self.tiers, self.probs) if p > 0]

    def counts(self) -> dict[str, int]:
        """Clients assigned to each tier (static assignment)."""
        return {str(t.tier): int((self.assignment == t.tier).sum()) for t in self.tiers}

    def describe(self) -> list[dict]:
        return [{"tier": t.tier, "layers": t.layers, "rank": t.rank, "fraction": t.fraction} for t in self.tiers]
