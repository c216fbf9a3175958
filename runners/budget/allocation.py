"""Allocation from a device budget: the largest allocation in a method's own currency whose
measured memory fits the device.

No method is named here. A *ladder* of candidate budgets (:func:`ladder`: layers L..1, and
for each a LoRA rank from the largest tier rank down to 1) is turned into plans by the
method's own ``plan`` hook (a probe instance of the method whose federation is that one
budget), so each method reads the currency it uses: layer methods the layers, rank methods
the rank, depth methods the depth, Exclusive whether it takes part at all (a plan that
skips the round fits every device). Each distinct plan is measured once by one metered
step (:func:`~fedbench.runners.cost.stepcost.measure_step`, real tensors or ``meta``) and
cached by its signature (architecture, rank, blocks, trained layers, trained tensors); the
first rung whose accounted memory fits wins (:func:`first_fit`). Because the ladder is
walked from the top, a larger budget never gets a later rung: the allocation is monotone
in the budget by construction.

Placement: a plan's layers are measured at their *lowest* placement among its blocks
(:func:`lowest_placement`): with real freezing nothing below the lowest trained layer saves
activations, so that is the placement that needs the most memory, and the allocation holds
whichever layers the method picks in later rounds (Fed-HeLLo's FIM choice included).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from fedbench.errors import UserError
from fedbench.methods.base import ClientPlan, ClientProfile, Method, MethodContext, ServerAPI, Traffic
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.runners.cost.stepcost import StepAccountant, StepFigures, measure_step
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.executors.train import adapter_for
from fedbench.units import format_bytes


class EqualScores(ServerAPI):
    """Server tools of a probe: before training no layer is known to matter more, so every
    layer scores 1 (the probe measures the lowest placement anyway)."""

    def metered(self):
        return contextlib.nullcontext()

    def layer_grad_sq_norms(self, tensors, layer_keys):
        return {j: 1.0 for j in layer_keys}


def ladder(n_layers: int, max_rank: int) -> list[tuple[int, int]]:
    """(layers, rank) candidates from the largest down: layers L..1, each with ranks max..1."""
    return [(l, r) for l in range(n_layers, 0, -1) for r in range(max_rank, 0, -1)]


def first_fit(costs: Sequence[int | None], budget: int) -> int | None:
    """Index of the first cost at most ``budget`` (None = the rung costs nothing: it fits)."""
    return next((i for i, c in enumerate(costs) if c is None or c <= budget), None)


def lowest_placement(plan: ClientPlan, n_layers: int) -> ClientPlan:
    """``plan`` with its trained layers moved to the lowest of its blocks (same count)."""
    blocks = list(range(n_layers)) if plan.blocks is None else list(plan.blocks)
    return dataclasses.replace(plan, train_layers=tuple(blocks[: len(plan.train_layers)]), extra=dict(plan.extra))


@dataclass
class Probe:
    """One rung of one method: its budget, the plan the method makes of it (lowest
    placement) and that plan's measured step and traffic (None when the plan skips)."""

    layers: int
    rank: int
    plan: ClientPlan
    figures: StepFigures | None
    traffic: Traffic | None

    @property
    def skip(self) -> bool:
        return self.plan.skip

    @property
    def accounted_bytes(self) -> int | None:
        return None if self.figures is None else self.figures.accounted_bytes

    def describe(self) -> dict:
        p = self.plan
        return {"layers": self.layers, "rank": self.rank, "skip": p.skip, "train_layers": len(p.train_layers),
                "blocks": None if p.blocks is None else len(p.blocks), "plan_rank": p.rank,
                "accounted_bytes": self.accounted_bytes,
                "flops_per_step": None if self.figures is None else self.figures.flops,
                "down_bytes": None if self.traffic is None else self.traffic.down_bytes,
                "up_bytes": None if self.traffic is None else self.traffic.up_bytes}


@dataclass
class ProbeSetup:
    """What a probe method's context is built from (the run's model and task)."""

    am: AdapterModel
    task: Any
    batch: Any  # one training batch on the model's device
    settings: TrainSettings
    rounds: int
    n_classes: int | None
    data_info: dict


class Planner:
    """Probes one method on one model: a budget -> the method's plan -> its measured cost."""

    def __init__(self, method_cls: type[Method], config: Any, setup: ProbeSetup,
                 server: ServerAPI | None = None, cache: dict | None = None, attach_extras: bool = True):
        self.method_cls, self.config, self.s = method_cls, config, setup
        self.server = server or EqualScores()
        self.memory = StepAccountant(setup.am, setup.task, setup.batch, setup.settings)  # shared by every probe
        self.cache = {} if cache is None else cache
        top = ClientProfile(0, 0, setup.am.bundle.n_layers, setup.am.r, 1)
        if attach_extras:  # the method's extra modules, as a federation of the top budget places them
            ctx = self._ctx(top)
            setup.am.attach_extra(method_cls.extra_modules(config, ctx, self._head()))
            method_cls.patch_model(config, setup.am.model)

    def _head(self):
        b = self.s.am.bundle
        return b.model.get_submodule(b.head_modules[-1]) if b.head_modules else None

    def _ctx(self, profile: ClientProfile) -> MethodContext:
        s = self.s
        return method_context(s.am, {0: profile}, s.rounds, s.task, s.n_classes, s.data_info, self.server,
                              self.memory)

    def probe(self, layers: int, rank: int) -> Probe:
        am = self.s.am
        profile = ClientProfile(0, 0, layers, rank, 1)
        method = self.method_cls(self.config, self._ctx(profile))
        state = method.init_state(am.read(am.all_keys + method.base_weights_needed()))
        plan = method.plan(1, [profile], state, np.random.default_rng(0))[0]
        if plan.skip:
            return Probe(layers, rank, plan, None, None)
        plan = lowest_placement(plan, am.bundle.n_layers)
        phase = method.local_phases(plan)[0]
        key = (self.method_cls.__qualname__, plan.arch, plan.rank, plan.lora_alpha, plan.blocks, plan.train_layers,
               tuple(sorted(phase.trainable)))
        if key not in self.cache:
            figures = measure_step(am, self.s.task, method, plan, self.s.batch, self.s.settings)
            payload = method.client_payload(state, plan)
            upload = am.read(method.upload_keys(plan), adapter_for(am, plan))
            self.cache[key] = (figures, method.traffic(plan, payload, upload))
        figures, traffic = self.cache[key]
        return Probe(layers, rank, plan, figures, traffic)

    def allocate(self, budget_bytes: int, rungs: Sequence[tuple[int, int]]) -> Probe | None:
        """The first rung of ``rungs`` whose plan fits ``budget_bytes`` (None: none fits).
        Rungs are measured lazily from the top and cached, so several budgets share them."""
        for layers, rank in rungs:
            p = self.probe(layers, rank)
            if first_fit([p.accounted_bytes], budget_bytes) is not None:
                return p
        return None


def allocate_devices(planner: Planner, devices: Mapping[str, Any], rungs: Sequence[tuple[int, int]],
                     method: str) -> dict[str, Probe]:
    """Device class -> the largest fitting rung; one :class:`UserError` line naming the first
    device class (smallest memory first) that cannot hold the smallest allocation."""
    out = {}
    for name, dev in sorted(devices.items(), key=lambda kv: kv[1].memory_bytes):
        p = planner.allocate(dev.memory_bytes, rungs)
        if p is None:
            smallest = planner.probe(*rungs[-1])
            raise UserError(f"device {name!r} ({dev.memory_gb:g} GB) cannot hold {method}'s smallest allocation "
                            f"(layers {smallest.layers}, rank {smallest.rank}: "
                            f"{format_bytes(smallest.accounted_bytes or 0)} accounted)")
        out[name] = p
    return out


__all__ = ["EqualScores", "Planner", "Probe", "ProbeSetup", "allocate_devices", "first_fit", "ladder",
           "lowest_placement"]
