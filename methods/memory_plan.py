"""Choosing LoRA modules under a memory budget: a memory cost model and a 0/1 knapsack
(Fed-pilot, Zhang, Hu, Liu & Xu, arXiv 2410.10200; spec: shared/docs/methods-2027.md Sec. 1).

Pure functions of numbers (no tensors, no model). The paper formulates the choice of a
client's trainable LoRA modules as a knapsack (abstract: item = module, value = its
IG-Score, capacity = the client's memory); its equations were not retrievable, so the cost
model and the value below are the spec's reconstruction:

- :class:`MemoryCostModel`: memory is **not additive** over modules. Gradients and optimizer
  state add up per module, but the bytes saved for backward depend on the lowest trained
  layer l (backward runs, and activations are kept, from there up). cost(S) = fixed +
  act[l_min(S)] + sum_{m in S} w_m, built by :meth:`MemoryCostModel.from_steps` from the
  memory accountant's measured steps of the nested sets S_l = every module of layers >= l.
  It is exact on those sets and an upper bound on every other set of the same lowest layer
  (a subset of S_l saves a subset of S_l's tensors), so a choice it admits fits.
- :func:`knapsack`: 0/1 knapsack by dynamic programming over capacity units.
- :func:`select_under_budget`: the exact solver of the non-additive problem: for every
  candidate lowest layer l, charge act[l] once, knapsack the rest of the capacity over the
  modules of layers >= l, keep the best.
- :func:`ig_values`: the value of a module (the paper's Local-Global Information Gain score,
  form not retrievable): lam * local + (1 - lam) * global, each term normalised to sum 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np

__all__ = ["MemoryCostModel", "ig_values", "knapsack", "select_under_budget"]


@dataclass(frozen=True)
class MemoryCostModel:
    """Bytes of one training step as a function of the set of trained LoRA modules.

    ``layers[i]``: the adapter layer of module i (of L layers); ``weights[i]``: its gradient
    and optimizer-state bytes; ``act[l]``: bytes saved for backward when the lowest trained
    layer is l (``act[L]``: no LoRA trained, the head only); ``fixed``: bytes that no choice
    changes (the model's parameters, the head's gradient and optimizer state)."""

    fixed: int
    act: tuple[int, ...]  # (L + 1,)
    weights: tuple[int, ...]  # (M,)
    layers: tuple[int, ...]  # (M,)

    @property
    def n_layers(self) -> int:
        return len(self.act) - 1

    def lowest(self, chosen: Sequence[int]) -> int:
        """The lowest layer of the modules ``chosen`` (L when none is)."""
        return min((self.layers[i] for i in chosen), default=self.n_layers)

    def cost(self, chosen: Sequence[int]) -> int:
        """fixed + act[l_min] + sum of the chosen modules' weights."""
        return self.fixed + self.act[self.lowest(chosen)] + sum(self.weights[i] for i in chosen)

    def top(self, n: int) -> list[int]:
        """The modules of the top ``n`` layers (layers L - n .. L - 1)."""
        return [i for i, j in enumerate(self.layers) if j >= self.n_layers - n]

    @classmethod
    def from_steps(cls, steps: Sequence[Mapping[str, int]], layers: Sequence[int],
                   module_bytes: Sequence[int]) -> "MemoryCostModel":
        """The model from L + 1 measured steps: ``steps[l]`` = {params, grads, optimizer,
        activations} of training S_l (every module of layers >= l) and the head, ``steps[L]``
        the head alone; ``module_bytes[i]``: the parameter bytes of module i.

        Gradient and optimizer bytes are proportional to the trained parameters' bytes (a
        gradient per parameter, the optimizer's state per parameter), at the factor
        f = (grad+opt of S_0 - grad+opt of the head) / (bytes of every module), so
        w_i = ceil(f * module_bytes[i]); fixed = params + the head's grad+opt;
        act[l] = the activations of step l. Then cost(S_l) is step l's total exactly."""
        L = len(steps) - 1
        if {s["params"] for s in steps} != {steps[0]["params"]}:
            raise ValueError("the measured steps hold different parameter bytes (different models?)")
        head = steps[L]["grads"] + steps[L]["optimizer"]
        total = sum(module_bytes)
        f = Fraction(steps[0]["grads"] + steps[0]["optimizer"] - head, total) if total else Fraction(0)
        weights = tuple(math.ceil(f * b) for b in module_bytes)
        return cls(fixed=int(steps[0]["params"] + head), act=tuple(int(s["activations"]) for s in steps),
                   weights=weights, layers=tuple(int(j) for j in layers))


def knapsack(values: Sequence[float], weights: Sequence[int], capacity: int, grid: int = 4096) -> list[int]:
    """The items (indices, ascending) of largest total value whose total weight is at most
    ``capacity``: 0/1 knapsack by dynamic programming over capacity units of u bytes, u = the
    weights' greatest common divisor g (exact: LoRA modules of one shape weigh the same), or
    where that leaves more than ``grid`` units, u = max(g, ceil(capacity / grid)) with the
    weights rounded up to whole units and the capacity down: the choice never exceeds
    ``capacity`` (it may leave up to about n * u bytes unused). Ties keep the smaller item set
    (an item is taken only if it strictly adds value)."""
    if capacity < 0:
        return []
    unit = math.gcd(*(int(x) for x in weights)) or 1
    if capacity // unit > grid:
        unit = max(unit, math.ceil(capacity / grid))
    cap = capacity // unit
    w = [math.ceil(int(x) / unit) for x in weights]
    best = np.zeros(cap + 1)  # best[c]: the largest value of weight <= c units
    take = np.zeros((len(w), cap + 1), dtype=bool)
    for i, (v, wi) in enumerate(zip(values, w)):
        if wi > cap:
            continue
        cand = best[: cap + 1 - wi] + float(v)
        better = cand > best[wi:]
        best[wi:] = np.where(better, cand, best[wi:])
        take[i, wi:] = better
    chosen, c = [], cap
    for i in range(len(w) - 1, -1, -1):
        if take[i, c]:
            chosen.append(i)
            c -= w[i]
    return sorted(chosen)


def select_under_budget(values: Sequence[float], model: MemoryCostModel, capacity: int,
                        grid: int = 4096) -> list[int] | None:
    """The modules of largest total value whose modelled cost fits ``capacity``: for each
    lowest layer l (from the top: ties keep the cheaper, higher one), the knapsack of the
    modules of layers >= l in ``capacity - fixed - act[l]``. [] when only the head fits,
    None when not even that does."""
    best: tuple[float, list[int]] | None = None
    for low in range(model.n_layers, -1, -1):
        room = capacity - model.fixed - model.act[low]
        if room < 0:
            continue
        items = [i for i, j in enumerate(model.layers) if j >= low] if low < model.n_layers else []
        picked = knapsack([values[i] for i in items], [model.weights[i] for i in items], room, grid)
        chosen = [items[k] for k in picked]
        value = sum(values[i] for i in chosen)
        if best is None or value > best[0]:
            best = (value, chosen)
    return None if best is None else best[1]


def _normalised(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    total = a.sum()
    return a / total if total > 0 else np.full(len(a), 1.0 / max(1, len(a)))


def ig_values(local: Sequence[float], global_: Sequence[float], lam: float) -> list[float]:
    """The reconstructed IG-Score of each module: lam * local_m / sum(local) + (1 - lam) *
    global_m / sum(global) (a term whose sum is 0 counts as uniform, e.g. the global term
    before any aggregation)."""
    return [float(v) for v in lam * _normalised(local) + (1.0 - lam) * _normalised(global_)]
