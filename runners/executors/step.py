"""The one client step: every executor trains clients through :func:`run_steps`.

A :class:`Lane` is one client's local phase: the tensors it trains, its optimizer, its
batches, its cost. :func:`run_steps` runs one or more lanes in lockstep; at each step every
lane that still has a batch takes it, ``losses`` (the caller's forward) gives each lane's
mean loss, each loss is checked finite, their sum is back-propagated once (the gradient of
the sum with respect to a lane's own tensors is the gradient of that lane's loss alone),
and then each lane clips its own gradient by its own norm, steps its own optimizer and
counts its FLOPs and steps. Its callers:

- the sequential worker (``local`` and ``ray``: :func:`~fedbench.runners.executors.train.train_client`):
  one lane, ``losses`` = the method's ``client_loss`` on the client's model;
- the ``packed`` executor (:mod:`fedbench.runners.executors.packed_group`): the lanes of a group,
  ``losses`` = one forward of the shared backbone over their concatenated batches, each
  lane's rows through its own LoRA and head;
- the planner (:func:`~fedbench.runners.cost.stepcost.measure_step`): one lane, one batch,
  on real tensors or on ``meta``.

Metering is a hook of the step (:class:`StepMeter`): the first step of a lane runs its
forward and backward inside the meter's contexts, and the meter reads its figures after
the optimizer step (``done``). A lane whose phase trains only slices of a tensor
(``LocalPhase.trained_slices``) holds the other entries (:class:`KeptEntries`) in every
executor. A meter watches a single lane: a packed group's clients are
metered each alone before the group trains. Every forward runs in the run's precision
(:func:`~fedbench.runners.executors.precision.autocast`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Mapping

import torch

from fedbench.methods.base import ClientPlan, LocalPhase
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.executors.precision import autocast


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN/inf loss; the run ends with status 'failed'."""


class KeptEntries:
    """The entries of a lane's trained tensors its phase keeps as they were
    (``LocalPhase.trained_slices``: of a tensor only some slices along one axis train):
    ``zero_grads`` after backward (clipping and the optimizer see only the trained entries),
    ``restore`` after the optimizer step (weight decay or momentum cannot move the others)."""

    def __init__(self, phase: LocalPhase, tensors: Mapping[str, torch.Tensor]):
        self.held = []  # (tensor, bool mask of its trained entries, its values at the start)
        for key, dim, indices in phase.trained_slices:
            t = tensors[key]
            shape = [1] * t.dim()
            shape[dim] = t.shape[dim]
            mask = torch.zeros(t.shape[dim], dtype=torch.bool, device=t.device)
            mask[list(indices)] = True
            self.held.append((t, mask.reshape(shape), t.detach().clone()))

    def zero_grads(self) -> None:
        for t, mask, _ in self.held:
            if t.grad is not None:
                t.grad.mul_(mask)

    @torch.no_grad()
    def restore(self) -> None:
        for t, mask, start in self.held:
            t.copy_(torch.where(mask, t, start))


@dataclass
class Lane:
    """One client's local phase in :func:`run_steps`. ``clip``: the gradient-norm bound
    (None: no clipping); ``on_step(steps)`` hears of every finished step; ``kept``: entries
    of its tensors that do not train (None: all train)."""

    plan: ClientPlan
    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    batches: Iterator[Any]
    cost: ClientCost
    clip: float | None = None
    on_step: Callable[[int], None] | None = None
    losses: list[float] = field(default_factory=list)
    kept: KeptEntries | None = None


class StepMeter:
    """What measures a lane's first step. The step runs its forward inside ``forward()``
    and its backward inside ``backward()``; after the optimizer step ``done(lane, batch,
    again)`` reads the figures into ``lane.cost`` (``again()`` runs the lane's forward once
    more and returns its loss, for a meter that must measure in a pass of its own)."""

    def forward(self) -> ContextManager:
        return contextlib.nullcontext()

    def backward(self) -> ContextManager:
        return contextlib.nullcontext()

    def done(self, lane: Lane, batch: Any, again: Callable[[], torch.Tensor]) -> None:
        pass


#: ``losses([(lane, batch), ...])``: each lane's mean loss on its batch, in order
Losses = Callable[[list[tuple[Lane, Any]]], list[torch.Tensor]]


def rows(batch: Any) -> int:
    """The examples in ``batch`` (a tensor or a dict of tensors)."""
    t = next(iter(batch.values())) if isinstance(batch, dict) else batch
    return int(t.shape[0])


def finite(loss: torch.Tensor, plan: ClientPlan) -> float:
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLoss(f"non-finite loss {value} on client {plan.client}")
    return value


def run_steps(lanes: list[Lane], losses: Losses, device: torch.device, precision: str,
              meter: StepMeter | None = None) -> None:
    """Train ``lanes`` until each has run its batches (see the module docstring)."""
    if meter is not None and len(lanes) != 1:
        raise ValueError("a step meter watches one lane (meter a group's clients each alone)")

    def forward(step: list[tuple[Lane, Any]]) -> list[torch.Tensor]:
        with autocast(device, precision):
            return losses(step)

    active = list(lanes)
    while active:
        step = [(lane, b) for lane in active for b in [next(lane.batches, None)] if b is not None]
        active = [lane for lane, _ in step]
        if not step:
            break
        metered = meter if meter is not None and step[0][0].cost.steps == 0 else None
        for lane, _ in step:
            lane.opt.zero_grad(set_to_none=True)
        with metered.forward() if metered else contextlib.nullcontext():
            out = forward(step)
        total = None
        for (lane, _), loss in zip(step, out):
            lane.losses.append(finite(loss, lane.plan))
            total = loss if total is None else total + loss
        with metered.backward() if metered else contextlib.nullcontext():
            total.backward()
        for lane, _ in step:
            if lane.kept is not None:
                lane.kept.zero_grads()
            if lane.clip:
                torch.nn.utils.clip_grad_norm_(lane.params, lane.clip)
            lane.opt.step()
            if lane.kept is not None:
                lane.kept.restore()
        for lane, batch in step:
            if metered:
                metered.done(lane, batch, lambda: forward([(lane, batch)])[0])
            _count(lane, batch)


def _count(lane: Lane, batch: Any) -> None:
    """One finished step: FLOPs (the first step's figures scaled by the batch's examples
    over the first batch's), the step count and the listener."""
    cost = lane.cost
    if cost.first_batch:
        cost.flops_total += (cost.flops_forward_step + cost.flops_backward_step) * rows(batch) / cost.first_batch
    cost.steps += 1
    if lane.on_step is not None:
        lane.on_step(cost.steps)


def active_peak_bytes(am: Any, blocks: tuple[int, ...] | None) -> int | None:
    """The CUDA allocator's peak since the last reset minus the resident bytes of the blocks
    outside ``blocks`` (the simulator keeps one whole backbone on the device); None off CUDA."""
    if am.device.type != "cuda":
        return None
    inactive = 0 if blocks is None else sum(b for j, b in am.block_bytes.items() if j not in set(blocks))
    return int(torch.cuda.max_memory_allocated(am.device)) - inactive


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


__all__ = ["KeptEntries", "Lane", "Losses", "NonFiniteLoss", "StepMeter", "active_peak_bytes", "finite", "reset_peak",
           "rows", "run_steps"]
