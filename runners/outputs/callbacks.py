"""Callbacks: what happens around the round loop without living inside it.

The round loop (:mod:`fedbench.runners.core.rounds`) calls ``on_run_start(spec, state)`` once,
``on_client_start`` / ``on_client_end`` around each client's round (clients that sit the
round out get only ``on_client_end``), ``on_client_progress`` after each of a client's
local steps where the executor trains in this process (``local``), ``on_round_end(log, state)`` after each round
(aggregation and evaluation done) and ``on_run_end(record)`` with the finished record.
Callbacks see the :class:`~fedbench.runners.core.spec.RunSpec`, the round's
:class:`~fedbench.runners.core.state.RoundLog` and the :class:`~fedbench.runners.core.state.RunState`
(read-only by convention), never the runner. A callback that wants the run to end returns
a :class:`Stop` from ``on_round_end``; it never raises from inside the loop.

Callbacks are the extension point for users (a logger, an experiment tracker): pass
instances to :func:`fedbench.run` or name a class with ``fedbench run --callback
module:Class``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.core.state import RoundLog, RunState

if TYPE_CHECKING:
    from fedbench.runners.core.spec import RunSpec


@dataclass(frozen=True)
class Stop:
    """A callback's decision to end the run after this round: ``status`` is what the record
    says (``failed``; ``ok`` for an early stop), ``reason`` its error line."""

    status: str
    reason: str


class Callback:
    """Base class: every hook is a no-op."""

    def on_phase_start(self, name: str) -> None:
        """A set-up phase before the rounds starts: ``loading data``, ``building the model``
        (federation, model, method, executor), ``initial evaluation`` (``--eval-initial``)."""

    def on_phase_end(self, name: str, seconds: float) -> None:
        """The phase ``name`` ended (also when it failed) after ``seconds`` of wall time."""

    def on_run_start(self, spec: "RunSpec", state: RunState) -> None:
        pass

    def on_client_start(self, rnd: int, client: int, index: int, total: int) -> None:
        """Client ``client`` (the ``index``-th of ``total`` training this round) starts."""

    def on_client_progress(self, rnd: int, client: int, step: int, steps: int) -> None:
        """Client ``client`` finished local step ``step`` (1-based) of the ``steps`` it plans
        this round. Called from inside its training (``local`` executor only; executors whose
        clients train in other processes do not call it): keep it cheap."""

    def on_client_end(self, rnd: int, cost: ClientCost) -> None:
        pass

    def on_round_end(self, log: RoundLog, state: RunState) -> Stop | None:
        return None

    def on_run_end(self, record: dict) -> None:
        pass


class DivergenceGuard(Callback):
    """Ends the run ``failed`` when the mean training loss of a round exceeds ``factor`` x
    the reference loss for ``patience`` rounds in a row (``run.divergence_factor``; 0 =
    off). The reference is the loss before any update (``RunState.initial_loss``: the
    untrained model's loss on each first client's first batch), so a run that explodes in
    its first round fails too; runs without it (an older checkpoint) use round 1's. It
    reads the run state, so it keeps no state of its own (a resumed run checks the same)."""

    def __init__(self, factor: float, patience: int = 2):
        self.factor, self.patience = factor, patience

    def on_round_end(self, log: RoundLog, state: RunState) -> Stop | None:
        losses = [l.train_loss for l in state.logs if l.train_loss is not None]
        ref = state.initial_loss
        if ref is None:
            ref, losses = (losses[0], losses) if losses else (None, losses)
            if len(losses) <= self.patience:
                return None
        if self.factor <= 0 or ref is None or len(losses) < self.patience or not math.isfinite(ref) \
                or not all(math.isfinite(x) for x in losses):
            return None
        bound = self.factor * max(ref, 1e-12)
        if all(x > bound for x in losses[-self.patience:]):
            return Stop("failed", f"training diverged: mean loss {losses[-1]:.4g} in round {log.round} is "
                                  f"{losses[-1] / max(ref, 1e-12):.3g}x the loss before training ({ref:.4g}), over "
                                  f"the {self.factor:g}x bound for {self.patience} rounds")
        return None


class DeadlineGuard(Callback):
    """With ``--deadline``: a run whose deadline dropped every sampled client in every round
    trained nothing; it ends ``failed`` at its last round saying so, instead of ``ok`` with
    the untrained model's score."""

    def __init__(self, rounds: int, deadline: float):
        self.rounds, self.deadline = rounds, deadline

    def on_round_end(self, log: RoundLog, state: RunState) -> Stop | None:
        if log.round < self.rounds or any(set(l.sampled) - set(l.dropped) for l in state.logs):
            return None
        return Stop("failed", f"the deadline ({self.deadline:g} simulated s) dropped every client in every round: "
                              f"nothing was trained (raise --deadline or give faster --devices)")


__all__ = ["Callback", "DeadlineGuard", "DivergenceGuard", "RoundLog", "Stop"]
