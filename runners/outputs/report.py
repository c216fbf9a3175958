"""The result record of a run, built from its spec, its set-up and its state.

The record's shape is defined once in :mod:`fedbench.schema`; this module fills it: the
``run`` section from the :class:`~fedbench.runners.core.spec.RunSpec` (its identity configs,
each field once, its run id, the suite's and the method's version) and the federation,
``results`` and ``cost`` from the :class:`~fedbench.runners.core.state.RunState`
(:mod:`fedbench.runners.outputs.summary`). A run that
fails during set-up still gets a record from what was set up.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Sequence

import torch

from fedbench.version import __version__
from fedbench import records
from fedbench.methods.base import Method
from fedbench.runners.core.environment import env_info, git_info
from fedbench.runners.core.federation import Federation
from fedbench.runners.core.spec import RunSpec
from fedbench.runners.core.state import RoundLog, RunState
from fedbench.runners.outputs.summary import cost_section, results_section, target_section
from fedbench.runners.core.tiers import TierAssigner


@dataclass
class Outcome:
    """How a run ended and what it measured besides its state."""

    status: str  # "ok" | "failed" | "cancelled"
    error: str | None
    seconds_total: float
    device: torch.device
    threads: int
    meter_counts: tuple[int, int] = (0, 0)  # (measured, reused)
    resume: dict | None = None  # {"from_round": k, "discarded_checkpoint": ...} or None


def executor_clients(logs: Sequence[RoundLog]) -> dict[str, int]:
    """Client-rounds per label of :meth:`Executor.placement` over ``logs``."""
    out: dict[str, int] = {}
    for l in logs:
        for label, clients in l.executors.items():
            out[label] = out.get(label, 0) + len(clients)
    return out


def build_record(spec: RunSpec, outcome: Outcome, state: RunState | None, fed: Federation | None,
                 tiers: TierAssigner | None, method: Method | None, archs: dict[int, str]) -> dict:
    rec = records.empty_record()
    r = spec.run
    commit, dirty = git_info()
    logs = state.logs if state else []
    costs = [c for _, c in state.costs] if state else []
    configs = spec.configs()
    rec["status"], rec["error"] = outcome.status, outcome.error
    rec["run"].update(
        run_id=spec.run_id, method=spec.method, method_config=configs["method"], task=spec.task,
        task_config=configs["task"], run_config=configs["run"], method_version=spec.method_cls.version,
        n_clients=fed.n_clients if fed else (r.clients or 0),
        clients_per_round=fed.per_round if fed else (r.per_round or 0),
        rounds_completed=len(logs), device=str(outcome.device), runner=r.executor,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        fedbench_version=__version__, git_commit=commit, git_dirty=dirty,
        partition_fingerprint=fed.part.fingerprint if fed else None,
        client_tiers={str(c): int(t) for c, t in enumerate(tiers.assignment)} if tiers else {},
        tiers=tiers.describe() if tiers else [], tier_counts=tiers.counts() if tiers else {},
        resource_label=spec.resource_label,
        holdout_indices=fed.holdout_indices if fed else [], proxy_indices=fed.proxy_indices if fed else [],
        client_sizes=fed.sizes if fed else [], client_archs={str(c): a for c, a in archs.items()},
        sampled_clients=[l.sampled for l in logs], executor_placement=[dict(l.executors) for l in logs],
        executor_clients=executor_clients(logs), method_layout=method.layout() if method is not None else {},
        resume=outcome.resume,
    )
    evaluation = spec.method_cls.evaluation
    rec["results"].update(results_section(
        logs, state.last_eval if state else None, state.initial_eval if state else None,
        spec.task_cls.metric_name, evaluation, state.per_client if state else None, archs))
    rec["results"]["target"] = target_section(r.target_metric, logs, state.costs if state else [])
    measured, reused = outcome.meter_counts if r.measure_flops else (0, 0)
    rec["cost"].update(cost_section(costs, logs, outcome.device.type, state.server_flops if state else 0.0,
                                    state.server_seconds if state else 0.0, outcome.seconds_total, measured, reused))
    rec["env"] = env_info(outcome.device, outcome.threads)
    return rec


__all__ = ["Outcome", "build_record"]
