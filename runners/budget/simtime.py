"""Federations of device classes in a run (``--devices``) and the simulated clock.

:func:`device_tiers` turns a device mix into tiers: one tier per device class (weakest
memory first), whose layers and rank are the allocation that
:mod:`fedbench.runners.budget.allocation` finds for the run's method on the run's model: the rungs
are measured on the run's own model and a training batch of the run's shape, so the
allocation's memory is the meter's figure for that plan. The result is a
:class:`~fedbench.runners.core.tiers.TierAssigner`, so the round loop and the methods see
ordinary tiers.

:class:`SimClock` is the simulated wall-clock of a round: each trained client's measured
FLOPs at its device's throughput plus its measured down and up bytes at its device's
links (:func:`~fedbench.runners.budget.devices.client_seconds`); the round lasts as long as its
slowest client, or, with a deadline, until the deadline when some client misses it (that
client's update is dropped). Simulated, not measured: the rates are the catalogue's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from fedbench.runners.budget.allocation import Planner, Probe, ProbeSetup, allocate_devices, ladder
from fedbench.runners.budget.devices import Device, client_seconds, load_catalog, parse_devices
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.core.tiers import Tier, TierAssigner
from fedbench.tasks.base import iterate_batches, to_device


class DeviceTiers(TierAssigner):
    """Static tiers from a device mix: tier t = the t-th device class by memory."""

    def __init__(self, client_devices: Sequence[str], devices: Mapping[str, Device], allocation: Mapping[str, Probe],
                 n_layers: int):
        names = sorted(set(client_devices), key=lambda n: (devices[n].memory_bytes, n))
        self.n_clients, self.n_layers, self.dynamic = len(client_devices), n_layers, False
        shares = [sum(d == n for d in client_devices) / len(client_devices) for n in names]
        self.tiers = [Tier(t, allocation[n].layers, allocation[n].rank, f) for t, (n, f) in enumerate(zip(names, shares))]
        self.device_names = names
        self.assignment = np.array([names.index(d) for d in client_devices], dtype=np.int64)
        self.probs = np.array(shares)


@dataclass
class SimClock:
    """Simulated seconds of client-rounds and rounds on the clients' devices."""

    client_devices: Sequence[str]
    catalog: Mapping[str, Device]
    deadline: float | None = None
    precision: str = "fp32"

    def client(self, cost: ClientCost) -> float:
        dev = self.catalog[self.client_devices[cost.client]]
        return client_seconds(dev, cost.flops_total, cost.down_bytes, cost.up_bytes, self.precision)["total"]

    def round(self, costs: Sequence[ClientCost]) -> tuple[float, list[int]]:
        """(the round's simulated seconds, clients dropped for missing the deadline)."""
        times = {c.client: self.client(c) for c in costs if c.steps > 0}
        dropped = sorted(c for c, t in times.items() if self.deadline is not None and t > self.deadline)
        if dropped:
            return float(self.deadline), dropped
        return max(times.values(), default=0.0), []


def probe_setup(spec: Any, am: Any, task: Any, data: Any) -> ProbeSetup:
    """The run's model and a training batch of its shape (the first ``batch_size`` examples)."""
    r = spec.run
    n = min(r.batch_size, len(data.train))
    batch = next(iterate_batches(data.train, np.arange(n), r.batch_size, task.collate))
    return ProbeSetup(am=am, task=task, batch=to_device(batch, am.device), settings=spec.train, lora_r=spec.lora.r,
                      lora_alpha=spec.lora.alpha, task_kind=task.kind, rounds=r.rounds, n_classes=data.n_classes,
                      data_info=dict(data.info))


def device_tiers(spec: Any, am: Any, task: Any, data: Any, n_clients: int) -> tuple[DeviceTiers, SimClock, dict]:
    """The tiers, the clock and the record's ``run.devices`` section of a ``--devices`` run."""
    r = spec.run
    catalog = load_catalog(r.device_catalog)
    client_devices = parse_devices(r.devices, n_clients, catalog, r.seed)
    used = {n: catalog[n] for n in sorted(set(client_devices))}
    with torch.random.fork_rng(devices=[]):  # the probe's extra modules draw nothing from the run's stream
        planner = Planner(spec.method_cls, spec.method_config, probe_setup(spec, am, task, data))
    rungs = ladder(am.bundle.n_layers, min(max(r.tier_ranks), spec.lora.r))  # no rung above the global rank
    allocation = allocate_devices(planner, used, rungs, spec.method)
    tiers = DeviceTiers(client_devices, used, allocation, am.bundle.n_layers)
    section = {
        "spec": r.devices, "deadline": r.deadline, "precision": "fp32",
        "catalog": {n: d.describe() for n, d in used.items()},
        "client_devices": {str(c): d for c, d in enumerate(client_devices)},
        "allocation": {n: {"tier": tiers.device_names.index(n), "budget_gb": used[n].memory_gb,
                           **allocation[n].describe()} for n in tiers.device_names},
        "source": "allocation: the largest rung (layers L..1, rank max..1) whose plan's accounted memory, measured "
                  "by one metered step on this run's model at its lowest placement, fits the device; times: "
                  "measured FLOPs and bytes at the catalogue's rates (simulated)",
    }
    return tiers, SimClock(client_devices, catalog, r.deadline), section


__all__ = ["DeviceTiers", "SimClock", "device_tiers", "probe_setup"]
