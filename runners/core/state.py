"""RunState: everything a run has accumulated, in one object that can be saved and loaded.

The method's global state, the round log, every client's cost, the evaluations, the
meter's measurements, the server's cost and the seconds spent before a resume. The round
loop updates it; the record is built from it; a checkpoint is its :meth:`RunState.state_dict`
plus the client store. ``state_dict`` holds tensors and plain Python data only (no
dataclass, no numpy object), so a checkpoint loads with ``torch.load(weights_only=True)``
and can never run code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedbench.methods.base import MethodState
from fedbench.runners.cost.meters import ClientCost
from fedbench.tasks.base import EvalResult


@dataclass
class RoundLog:
    round: int
    metric: float | None
    train_loss: float | None
    seconds: float  # round wall time without evaluation
    client_seconds: float  # sum of the clients' local training time
    eval_seconds: float = 0.0
    sampled: list[int] = field(default_factory=list)
    sim_seconds: float | None = None  # --devices: simulated wall-clock of the round (runners/budget/simtime.py)
    dropped: list[int] = field(default_factory=list)  # --devices --deadline: clients that missed it
    traffic_bytes: int = 0  # down + up bytes of the round's clients
    #: how the round's trained clients ran: {label: clients}, Executor.placement
    executors: dict[str, list[int]] = field(default_factory=dict)


def _eval_dict(e: EvalResult | None) -> dict | None:
    return None if e is None else dataclasses.asdict(e)


def _eval_from(d: dict | None) -> EvalResult | None:
    return None if d is None else EvalResult(**d)


@dataclass
class RunState:
    method: MethodState
    logs: list[RoundLog] = field(default_factory=list)
    costs: list[tuple[int, ClientCost]] = field(default_factory=list)  # (round, cost) of every client-round
    last_eval: EvalResult | None = None
    initial_eval: EvalResult | None = None
    per_client: dict[int, float] | None = None  # local evaluation: each client's last score
    meter: dict[str, Any] | None = None  # the local worker's MeterCache.state_dict()
    server_flops: float = 0.0
    server_seconds: float = 0.0
    elapsed_before: float = 0.0  # seconds spent before a resume
    #: mean training loss of the untrained model on the first clients' first batches
    #: (the divergence guard's reference)
    initial_loss: float | None = None

    @property
    def rounds_done(self) -> int:
        return self.logs[-1].round if self.logs else 0

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain data only (``torch.load(weights_only=True)`` reads it back)."""
        return {
            "method": {"tensors": dict(self.method.tensors), "extra": self.method.extra},
            "logs": [dataclasses.asdict(l) for l in self.logs],
            "costs": [[rnd, dataclasses.asdict(c)] for rnd, c in self.costs],
            "last_eval": _eval_dict(self.last_eval), "initial_eval": _eval_dict(self.initial_eval),
            "per_client": None if self.per_client is None else [[c, v] for c, v in self.per_client.items()],
            "meter": self.meter, "server_flops": self.server_flops, "server_seconds": self.server_seconds,
            "elapsed_before": self.elapsed_before, "initial_loss": self.initial_loss,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> "RunState":
        return cls(
            method=MethodState(d["method"]["tensors"], d["method"]["extra"]),
            logs=[RoundLog(**l) for l in d["logs"]],
            costs=[(int(rnd), ClientCost(**c)) for rnd, c in d["costs"]],
            last_eval=_eval_from(d["last_eval"]), initial_eval=_eval_from(d["initial_eval"]),
            per_client=None if d["per_client"] is None else {int(c): float(v) for c, v in d["per_client"]},
            meter=d["meter"], server_flops=float(d["server_flops"]), server_seconds=float(d["server_seconds"]),
            elapsed_before=float(d["elapsed_before"]), initial_loss=d["initial_loss"],
        )


__all__ = ["RoundLog", "RunState"]
