"""Callbacks: what happens around the round loop without living inside it.

The engine calls ``on_run_start`` once, ``on_client_end`` after each client's round,
``on_round_end`` after each round (aggregation and evaluation done) and ``on_run_end``
with the finished record. The experiment's own bookkeeping (the per-client costs and the
round log that the record is built from) is a callback too; the CLI adds a progress bar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fedbench.runners.meters import ClientCost


@dataclass
class RoundLog:
    round: int
    metric: float | None
    train_loss: float | None
    seconds: float  # round wall time without evaluation
    client_seconds: float  # sum of the clients' local training time
    eval_seconds: float = 0.0
    sampled: list[int] = field(default_factory=list)


class Callback:
    """Base class: every hook is a no-op."""

    def on_run_start(self, exp, rounds: int) -> None:
        pass

    def on_client_end(self, exp, rnd: int, cost: ClientCost) -> None:
        pass

    def on_round_end(self, exp, log: RoundLog) -> None:
        pass

    def on_run_end(self, exp, record: dict) -> None:
        pass


class History(Callback):
    """Keeps every client's cost and every round's log (what the record is built from)."""

    def __init__(self) -> None:
        self.costs: list[tuple[int, ClientCost]] = []
        self.logs: list[RoundLog] = []

    def on_client_end(self, exp, rnd, cost):
        self.costs.append((rnd, cost))

    def on_round_end(self, exp, log):
        self.logs.append(log)


class Diverged(RuntimeError):
    """Training loss exploded (finite but beyond the bound); the run ends ``failed``."""


class DivergenceGuard(Callback):
    """Fails the run when the mean training loss of a round exceeds ``factor`` x the first
    round's for ``patience`` rounds in a row (``run.divergence_factor``; 0 = off). It reads
    the run's round log, so it keeps no state of its own (a resumed run checks the same)."""

    def __init__(self, factor: float, patience: int = 2):
        self.factor, self.patience = factor, patience

    def on_round_end(self, exp, log):
        losses = [l.train_loss for l in exp.history.logs if l.train_loss is not None]
        if self.factor <= 0 or len(losses) <= self.patience or not all(math.isfinite(x) for x in losses):
            return
        bound = self.factor * max(losses[0], 1e-12)
        if all(x > bound for x in losses[-self.patience:]):
            raise Diverged(f"training diverged: mean loss {losses[-1]:.4g} in round {log.round} is over "
                           f"{self.factor:g}x round 1's {losses[0]:.4g} for {self.patience} rounds")
