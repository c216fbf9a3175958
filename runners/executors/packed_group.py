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

Costs stay per client: the meter's figures of a client's first step come from
:func:`~fedbench.runners.executors.train.measure_step` on that client alone (or the
:class:`~fedbench.runners.executors.train.MeterCache`, as sequentially); time and memory are the
group's measured ones (see :class:`PackedClient`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedbench.methods.base import LocalPhase
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.executors.packed_route import RowClient, Router, lora_paths, routed
from fedbench.runners.executors.packed_rows import block_rows, gathered, union_blocks
from fedbench.runners.executors.train import (MeterCache, NonFiniteLoss, TrainSettings, make_optimizer, measure_step,
                                    meter_key, phase_batches, planned_steps)
from fedbench.runners.executors.worker import ClientJob
from fedbench.tasks.base import Task


@dataclass
class PackedClient:
    """One client of a packed group: its job, its tensors (trainable leaves for what its
    phase trains, constants for the rest), optimizer, batches and cost.

    ``cost.seconds`` is the group's measured time shared out by FLOPs (the clients' steps
    run together: :func:`~fedbench.runners.executors.packed.time_shares`); on CUDA
    ``cost.cuda_peak_bytes`` is the group's peak."""

    job: ClientJob
    adapter: str
    phase: LocalPhase
    tensors: dict[str, torch.Tensor]
    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    batches: Iterator[Any]
    planned: int
    cost: ClientCost
    generator: torch.Generator
    losses: list[float] = field(default_factory=list)


def pack_client(am: AdapterModel, task: Task, dataset: Any, job: ClientJob, tensors: dict[str, torch.Tensor],
                phase: LocalPhase, adapter: str, settings: TrainSettings) -> PackedClient:
    """``job``'s client ready to train in a group: ``tensors`` (payload + private state)
    copied onto the model's device in the model's dtypes, the trained ones as leaves."""
    own = {}
    for k, t in tensors.items():
        own[k] = torch.empty_like(am.param(k, adapter), requires_grad=False).copy_(t)
    params = [own[k].requires_grad_(True) for k in phase.trainable]
    opt = make_optimizer(params, replace(settings, lr=settings.lr * phase.lr_scale))
    rng = np.random.default_rng(job.seed)  # the same stream train_client draws the batch order from
    epochs = settings.local_epochs if phase.epochs is None else phase.epochs
    planned = planned_steps(len(job.indices), settings.batch_size, [epochs], settings.max_steps)
    gen = torch.Generator(device=am.device)
    gen.manual_seed(job.seed)
    cost = ClientCost(client=job.plan.client, tier=job.plan.tier, n_examples=len(job.indices))
    return PackedClient(job, adapter, phase, own, params, opt,
                        phase_batches(task, dataset, job.indices, phase, settings, rng, am.device), planned, cost, gen)


def _rows(batch: Any) -> int:
    t = next(iter(batch.values())) if isinstance(batch, dict) else batch
    return int(t.shape[0])


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
        with am.use_adapter(c.adapter), am.subset_blocks(plan.blocks):
            am.load({k: t.detach() for k, t in c.tensors.items()}, c.adapter)
            am.model.train()
            measure_step(am, task, method, plan, c.phase, batch, settings, c.adapter, cost, meter, (arch, c.adapter))
            am.set_trainable([])
            am.model.zero_grad(set_to_none=True)
        meter.steps[key] = (cost.flops_forward_step, cost.flops_backward_step, cost.accounted_bytes,
                            dict(cost.breakdown))
    cost.first_batch = _rows(batch)


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
        first = next(c.batches, None)
        if first is not None:
            if meter is not None:
                _meter(am, task, method, c, first, settings, meter, arch)
            c.batches = itertools.chain([first], c.batches)
    am.model.train()
    with am.subset_blocks(union_blocks([c.job.plan.blocks for c in clients])):
        _steps(am.model, task, clients, settings, layout, heads, physical, on_step)


def _steps(model: torch.nn.Module, task: Task, clients: list[PackedClient], settings: TrainSettings, layout, heads,
           physical: Sequence[torch.nn.Module], on_step: Callable[[PackedClient], None] | None) -> None:
    """The group's steps: each a forward over the active clients' concatenated batches and
    one backward of the sum of their mean losses, then each client's own optimizer step."""
    active = list(clients)
    while active:
        step = [(c, b) for c in active for b in [next(c.batches, None)] if b is not None]
        active = [c for c, _ in step]
        if not step:
            break
        sizes = [_rows(b) for _, b in step]
        router = Router([RowClient(c.tensors, c.generator) for c in active], sizes)
        rows = block_rows([c.job.plan.blocks for c in active], sizes, len(physical))
        batch = concat_batches([b for _, b in step])
        with routed(router, layout, heads), gathered(physical, rows, router):
            logits = task.forward(model, batch)  # (sum of rows, n_classes), client after client
        total = None
        for (c, b), lo, n in zip(step, [sum(sizes[:i]) for i in range(len(sizes))], sizes):
            loss = F.cross_entropy(logits[lo:lo + n], b["y"])  # ClassificationTask.loss on the client's rows
            value = float(loss.detach())
            if not math.isfinite(value):
                raise NonFiniteLoss(f"non-finite loss {value} on client {c.job.plan.client}")
            c.losses.append(value)
            total = loss if total is None else total + loss
        total.backward()
        for c, b in step:
            if settings.grad_clip:
                torch.nn.utils.clip_grad_norm_(c.params, settings.grad_clip)
            c.opt.step()
            c.opt.zero_grad(set_to_none=True)
            cost = c.cost
            if cost.first_batch:
                bsz = _rows(b)
                cost.flops_total += (cost.flops_forward_step + cost.flops_backward_step) * bsz / cost.first_batch
            cost.steps += 1
            if on_step is not None:
                on_step(c)
