"""Training of one packed group: several clients' local phase in one forward/backward per step.

The group's clients share an architecture, a LoRA adapter (rank and alpha) and the lowest
layer they train (so backward stops where it does for each of them alone); their blocks may
differ (each block runs over the rows of the clients that hold it: :mod:`fedbench.runners.executors.packed_rows`). Every step takes each active client's next batch (a client whose batches are
done drops out: unequal step counts), concatenates them, runs the shared frozen backbone
once with each client's rows routed to its own LoRA and head
(:mod:`fedbench.runners.executors.packed_route`), and minimises the sum of the clients' mean losses:
the gradient of that sum with respect to client k's tensors is the gradient of client k's
own loss, as in :func:`fedbench.runners.executors.train.train_client`. Each client then has its own
optimizer over its own trainable tensors (the phase's, in the phase's order), its own
gradient clipping (by its own norm) and its own weight decay, exactly the sequential step:
tensors it does not train are constants, never touched by the optimizer.

The step itself is the one every executor uses (:func:`~fedbench.runners.executors.step.run_steps`,
a lane per client); only the forward differs. Costs stay per client: the meter's figures of
a client's first step come from one step of that client alone, metered as sequentially
(:func:`~fedbench.runners.executors.train.train_steps`, or the
:class:`~fedbench.runners.executors.train.MeterCache`); time and memory are the group's
measured ones (see :class:`PackedClient`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedbench.methods.base import LocalPhase
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.executors.packed_route import RowClient, Router, lora_paths, routed
from fedbench.runners.executors.packed_rows import block_rows, gathered, union_blocks
from fedbench.runners.executors.step import KeptEntries, Lane, rows, run_steps
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.executors.train import (MeterCache, PartsMeter, meter_key, phase_batches, phase_optimizer,
                                              planned_steps, train_steps)
from fedbench.runners.executors.worker import ClientJob
from fedbench.tasks.base import Task


@dataclass
class PackedClient:
    """One client of a packed group: its job, its tensors (trainable leaves for what its
    phase trains, constants for the rest) and its lane (optimizer, batches, cost, losses).

    ``lane.cost.seconds`` is the group's measured time shared out by FLOPs (the clients'
    steps run together: :func:`~fedbench.runners.executors.packed.time_shares`); on CUDA
    ``cost.cuda_peak_bytes`` is the group's peak."""

    job: ClientJob
    adapter: str
    phase: LocalPhase
    tensors: dict[str, torch.Tensor]
    planned: int
    generator: torch.Generator
    lane: Lane

    @property
    def cost(self):
        return self.lane.cost

    @property
    def losses(self) -> list[float]:
        return self.lane.losses


def pack_client(am: AdapterModel, task: Task, dataset: Any, job: ClientJob, tensors: dict[str, torch.Tensor],
                phase: LocalPhase, adapter: str, settings: TrainSettings) -> PackedClient:
    """``job``'s client ready to train in a group: ``tensors`` (payload + private state)
    copied onto the model's device in the model's dtypes, the trained ones as leaves."""
    own = {}
    for k, t in tensors.items():
        own[k] = torch.empty_like(am.param(k, adapter), requires_grad=False).copy_(t)
    params = [own[k].requires_grad_(True) for k in phase.trainable]
    opt = phase_optimizer(params, phase, settings)
    rng = np.random.default_rng(job.seed)  # the same stream train_client draws the batch order from
    epochs = settings.local_epochs if phase.epochs is None else phase.epochs
    planned = planned_steps(len(job.indices), settings.batch_size, [epochs], settings.max_steps)
    gen = torch.Generator(device=am.device)
    gen.manual_seed(job.seed)
    cost = ClientCost(client=job.plan.client, tier=job.plan.tier, n_examples=len(job.indices))
    batches = phase_batches(task, dataset, job.indices, phase, settings, rng, am.device)
    kept = KeptEntries(phase, own) if phase.trained_slices else None
    return PackedClient(job, adapter, phase, own, planned, gen, Lane(job.plan, params, opt, batches, cost,
                                                                     settings.grad_clip, kept=kept))


def concat_batches(batches: list[Any]) -> Any:
    """The clients' batches as one, client after client (dicts: per key)."""
    if isinstance(batches[0], dict):
        return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    return torch.cat(batches)


def _meter(am: AdapterModel, task: Task, method, c: PackedClient, batch: Any, settings: TrainSettings,
           meter: MeterCache, arch: str) -> None:
    """The figures of ``c``'s first step, as :func:`~fedbench.runners.executors.train.train_client` gets them:
    a step of the same signature composed before (:attr:`MeterCache.steps`), or one step of ``c`` alone,
    metered (composed from the parts; its update discarded: the group trains its own tensors)."""
    plan, cost = c.job.plan, c.cost
    key = meter_key((arch, c.adapter), c.phase, plan, batch, settings.precision)
    if key in meter.steps:
        meter.reused += 1
        cost.flops_forward_step, cost.flops_backward_step, cost.accounted_bytes, breakdown = meter.steps[key]
        cost.breakdown = dict(breakdown)
    else:
        alone = ClientCost(client=plan.client, tier=plan.tier)
        with am.use_adapter(c.adapter), am.subset_blocks(plan.blocks):
            am.load({k: t.detach() for k, t in c.tensors.items()}, c.adapter)
            am.model.train()
            parts = PartsMeter(am, method, plan, c.phase, meter, (arch, c.adapter), settings.precision)
            train_steps(am, task, method, plan, c.phase, iter([batch]), settings, alone, parts)
            am.set_trainable([])
            am.model.zero_grad(set_to_none=True)
        cost.flops_forward_step, cost.flops_backward_step = alone.flops_forward_step, alone.flops_backward_step
        cost.accounted_bytes, cost.breakdown = alone.accounted_bytes, dict(alone.breakdown)
        meter.steps[key] = (cost.flops_forward_step, cost.flops_backward_step, cost.accounted_bytes,
                            dict(cost.breakdown))
    cost.first_batch = rows(batch)


def lora_layout(am: AdapterModel, adapter: str) -> dict[str, tuple[torch.nn.Module, float, float]]:
    """{LoRA module path: (module, scaling, dropout p)} of ``adapter`` in every adapter layer
    (resolved on the whole model: call it outside ``subset_blocks``)."""
    out = {}
    for paths in lora_paths(am.layer_keys).values():
        for path in paths:
            module = am.model.get_submodule(path)
            drop = module.lora_dropout[adapter]
            out[path] = (module, float(module.scaling[adapter]),
                         float(drop.p) if isinstance(drop, torch.nn.Dropout) else 0.0)
    return out


def train_group(am: AdapterModel, task: Task, method, clients: list[PackedClient], settings: TrainSettings,
                meter: MeterCache | None, arch: str, head_paths: list[str], physical: Sequence[torch.nn.Module],
                on_step: Callable[[PackedClient], None] | None = None) -> None:
    """Train ``clients`` (one group: same adapter and lowest trained layer) together until
    each has run its batches; each one's losses, steps and meter figures land in its own
    cost. The model runs the union of their blocks (``physical``: the whole model's blocks,
    by index; called with the whole model); a block runs over the rows of the clients that
    hold it (:mod:`fedbench.runners.executors.packed_rows`)."""
    layout = lora_layout(am, clients[0].adapter)
    heads = {p: am.model.get_submodule(p) for p in head_paths}
    for c in clients:  # the meter measures each client alone on its own blocks, before its first step
        first = next(c.lane.batches, None)
        if first is not None:
            if meter is not None:
                _meter(am, task, method, c, first, settings, meter, arch)
            c.lane.batches = itertools.chain([first], c.lane.batches)
        if on_step is not None:
            c.lane.on_step = lambda _steps, c=c: on_step(c)
    by_lane = {id(c.lane): c for c in clients}

    def losses(step: list[tuple[Lane, Any]]) -> list[torch.Tensor]:
        """One forward over the step's concatenated batches, each client's rows through its
        own LoRA and head; each client's mean loss on its own rows
        (``ClassificationTask.loss``)."""
        active = [by_lane[id(lane)] for lane, _ in step]
        sizes = [rows(b) for _, b in step]
        router = Router([RowClient(c.tensors, c.generator) for c in active], sizes)
        block_sets = block_rows([c.job.plan.blocks for c in active], sizes, len(physical))
        with routed(router, layout, heads), gathered(physical, block_sets, router):
            logits = task.forward(am.model, concat_batches([b for _, b in step]))  # client after client
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [F.cross_entropy(logits[lo:lo + n], b["y"]) for (_, b), lo, n in zip(step, starts, sizes)]

    am.model.train()
    with am.subset_blocks(union_blocks([c.job.plan.blocks for c in clients])):
        run_steps([c.lane for c in clients], losses, am.device, settings.precision)
