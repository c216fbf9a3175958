"""The one local training loop every method shares.

``train_client`` loads a client's tensors (payload + private state) into the model of its
architecture, runs the method's local phases (each makes exactly its tensors trainable:
real freezing), optionally on the planned subset of blocks, and returns the tensors to
upload and the private state to keep. The first step of a client-round gets its FLOPs
(forward/backward) and accounted memory from a :class:`MeterCache`: the step's figures
are composed from per-part measurements (each block and the rest of the model, by state:
:mod:`~fedbench.runners.cost.parts`), and only a part state never seen before costs one
measuring pass, so a run measures a bounded number of passes whatever its allocations;
parameter, gradient and optimizer bytes are read directly every client-round. The loop's
FLOP total scales the step's figures by each later step's batch size. A caller may pass
``on_step(step, steps)``, called after every local step with the client-round's planned
step count (:func:`planned_steps`): the live view of a long client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import numpy as np
import torch

from fedbench.methods.base import ClientPlan, LocalPhase, Method, tensor_bytes
from fedbench.runners.executors.adapters import AdapterModel, DEFAULT_ADAPTER
from fedbench.runners.cost.meters import ClientCost, Stopwatch, optimizer_state_bytes
from fedbench.runners.executors.precision import autocast
from fedbench.runners.cost.parts import StepProbe, compose, measure_parts
from fedbench.tasks.base import Task, iterate_batches, to_device


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN/inf loss; the run ends with status 'failed'."""


@dataclass(frozen=True)
class TrainSettings:
    local_epochs: int
    batch_size: int
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    grad_clip: float | None
    max_steps: int | None  # cap on steps per client per round and phase (None = full epochs)
    precision: str = "fp32"  # of the forward: fp32 or bf16 (autocast, runners.precision)


@dataclass
class MeterCache:
    """Measured figures of model parts by state (:mod:`~fedbench.runners.cost.parts`: forward
    FLOPs, backward FLOPs, saved bytes), reused within a run (``run.measure_flops``);
    ``measured`` counts measuring passes, ``reused`` client-rounds composed from known parts."""

    figures: dict[tuple, tuple[float, float, int]] = field(default_factory=dict)
    #: whole-step figures by :func:`meter_key` (executors that meter a client's step apart from
    #: its training: ``packed``); a cache of compositions, not checkpointed
    steps: dict[tuple, tuple[float, float, int, dict]] = field(default_factory=dict)
    measured: int = 0
    reused: int = 0

    def state_dict(self) -> dict:
        """Plain data (tuples, numbers, dicts): what a checkpoint keeps."""
        return {"figures": list(self.figures.items()), "measured": self.measured, "reused": self.reused}

    def load_state_dict(self, d: dict) -> None:
        self.figures = {tuple(k): tuple(v) for k, v in d["figures"]}
        self.measured, self.reused = int(d["measured"]), int(d["reused"])


#: ``on_step(step, steps)``: local step ``step`` (1-based) of the client-round's ``steps`` is done
StepHook = Callable[[int, int], None]


def planned_steps(n_examples: int, batch_size: int, phase_epochs: list[int], max_steps: int | None) -> int:
    """Local steps of one client-round: per phase, ``epochs`` x ceil(n / batch size) batches,
    at most ``max_steps`` per phase (``TrainSettings.max_steps``)."""
    per_epoch = -(-n_examples // batch_size)
    return sum(e * per_epoch if max_steps is None else min(max_steps, e * per_epoch) for e in phase_epochs)


def make_optimizer(params: list[torch.nn.Parameter], s: TrainSettings) -> torch.optim.Optimizer:
    if s.optimizer == "sgd":
        return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    if s.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
    raise ValueError(f"unknown optimizer {s.optimizer!r}")


def adapter_for(am: AdapterModel, plan: ClientPlan) -> str:
    """Rank-heterogeneous plans train a LoRA adapter of their own rank (same targets)."""
    alpha = am.alpha if plan.lora_alpha is None else plan.lora_alpha
    if plan.rank is None or plan.rank == am.r:
        if alpha != am.alpha:
            raise ValueError(f"plan asks for lora_alpha={alpha} at the global rank {am.r}, whose adapter has {am.alpha}")
        return DEFAULT_ADAPTER
    name = f"r{plan.rank}"
    am.ensure_adapter(name, plan.rank, alpha)
    return name


def train_client(
    am: AdapterModel,
    task: Task,
    method: Method,
    dataset: Any,
    indices: np.ndarray,
    plan: ClientPlan,
    tensors: dict[str, torch.Tensor],
    settings: TrainSettings,
    rng: np.random.Generator,
    meter: MeterCache | None = None,
    arch: str = "default",
    on_step: StepHook | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], ClientCost]:
    """One client's local training. ``tensors`` = its payload + private state; ``on_step``
    is told of every finished step (progress only: it does not change the training).

    Returns (upload, private state, cost); the upload holds the trained tensors named by
    ``method.upload_keys`` and the method's ``client_statistics``.
    """
    device = am.device
    cost = ClientCost(client=plan.client, tier=plan.tier, n_examples=len(indices))
    adapter = adapter_for(am, plan)
    private_keys = method.private_keys(plan)
    am.model.zero_grad(set_to_none=True)  # no gradient of an earlier client inflates this one's memory
    with am.use_adapter(adapter), am.base_overlay(tensors), am.subset_blocks(plan.blocks), \
            am.capture(method.hidden_blocks(plan)) as hidden, Stopwatch(device) as sw:
        am.load(tensors, adapter)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        am.model.train()
        losses: list[float] = []
        phases = method.local_phases(plan)
        steps = planned_steps(len(indices), settings.batch_size,
                              [settings.local_epochs if p.epochs is None else p.epochs for p in phases],
                              settings.max_steps)
        for phase in phases:
            losses += _run_phase(am, task, method, dataset, indices, plan, phase, settings, rng, hidden, cost,
                                 meter, (arch, adapter), None if on_step is None else lambda s: on_step(s, steps))
        am.model.eval()
        if device.type == "cuda":
            inactive = 0 if plan.blocks is None else sum(
                b for j, b in am.block_bytes.items() if j not in set(plan.blocks))
            cost.cuda_peak_bytes = int(torch.cuda.max_memory_allocated(device)) - inactive
        upload = am.read(method.upload_keys(plan), adapter)
        private = am.read(private_keys, adapter)

        def batches() -> Iterator[Any]:
            for b in iterate_batches(dataset, np.sort(indices), settings.batch_size, task.collate):
                yield to_device(b, device)

        with torch.no_grad():
            upload.update(method.client_statistics(task, am.model, batches, plan))
    cost.seconds = sw.seconds
    cost.train_loss = float(np.mean(losses)) if losses else None
    cost.first_loss = losses[0] if losses else None
    return upload, private, cost


def _run_phase(am, task, method, dataset, indices, plan, phase: LocalPhase, settings, rng, hidden, cost,
               meter, shape_key, on_step: Callable[[int], None] | None) -> list[float]:
    params = am.set_trainable(phase.trainable, shape_key[1])
    opt = make_optimizer(params, replace(settings, lr=settings.lr * phase.lr_scale))
    losses: list[float] = []
    for batch in phase_batches(task, dataset, indices, phase, settings, rng, am.device):
        bsz = _batch_size(batch)
        if meter is not None and cost.steps == 0:
            loss = _metered_step(am, task, method, plan, phase, batch, params, opt, settings, cost, hidden,
                                 meter, shape_key)
            cost.first_batch = bsz
        else:
            loss = _step(am, task, method, plan, phase, batch, params, opt, settings, hidden)
        if cost.first_batch:
            cost.flops_total += (cost.flops_forward_step + cost.flops_backward_step) * bsz / cost.first_batch
        losses.append(loss)
        cost.steps += 1
        if on_step is not None:
            on_step(cost.steps)
    return losses


def phase_batches(task: Task, dataset: Any, indices: np.ndarray, phase: LocalPhase, settings: TrainSettings,
                  rng: np.random.Generator, device: torch.device) -> Iterator[Any]:
    """The batches of one client's ``phase``, on ``device``: per epoch a permutation of
    ``indices`` drawn from ``rng``, at most ``settings.max_steps`` batches in all."""
    steps = 0
    for _ in range(settings.local_epochs if phase.epochs is None else phase.epochs):
        order = rng.permutation(indices)
        for batch in iterate_batches(dataset, order, settings.batch_size, task.collate):
            if settings.max_steps is not None and steps >= settings.max_steps:
                break
            yield to_device(batch, device)
            steps += 1


def meter_key(shape_key: tuple, phase: LocalPhase, plan: ClientPlan, batch: Any, precision: str) -> tuple:
    """A whole step's signature: ``shape_key`` (architecture, adapter), the phase, the blocks,
    the trainable set, the batch's tensor shapes and the precision. Its composed figures are
    deterministic, so an executor that cannot probe its clients' steps one by one (``packed``)
    keeps them by this key (:attr:`MeterCache.steps`)."""
    return shape_key + (phase.name, plan.blocks, tuple(sorted(phase.trainable)), _shape(batch), precision)


def measure_step(am: AdapterModel, task: Task, method: Method, plan: ClientPlan, phase: LocalPhase, batch: Any,
                 settings: TrainSettings, adapter: str, cost: ClientCost, meter: MeterCache,
                 shape_key: tuple) -> float:
    """One step of ``plan``'s ``phase`` on the tensors loaded in ``am``, metered as
    :func:`train_client`'s first step is (figures composed from ``meter``'s parts, measured
    where a part is new), into ``cost``, with an optimizer of its own; returns the loss. For
    executors that train a client's steps elsewhere (``packed``): the step's update to ``am``
    is the caller's to discard."""
    params = am.set_trainable(phase.trainable, adapter)
    opt = make_optimizer(params, replace(settings, lr=settings.lr * phase.lr_scale))
    return _metered_step(am, task, method, plan, phase, batch, params, opt, settings, cost, {}, meter, shape_key)


def _batch_size(batch: Any) -> int:
    t = next(iter(batch.values())) if isinstance(batch, dict) else batch
    return int(t.shape[0])


def _shape(batch: Any) -> tuple:
    if isinstance(batch, dict):
        return tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if isinstance(v, torch.Tensor))
    return (tuple(batch.shape),)


def _finish(loss: torch.Tensor, plan: ClientPlan) -> float:
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLoss(f"non-finite loss {value} on client {plan.client}")
    return value


def _step(am, task, method, plan, phase, batch, params, opt, s: TrainSettings, hidden) -> float:
    opt.zero_grad(set_to_none=True)
    with autocast(am.device, s.precision):
        loss = method.client_loss(task, am.model, batch, plan, hidden, phase.name)
    value = _finish(loss, plan)
    loss.backward()
    if s.grad_clip:
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
    opt.step()
    return value


def _metered_step(am, task, method, plan, phase, batch, params, opt, s: TrainSettings, cost: ClientCost, hidden,
                  meter: MeterCache, shape_key: tuple) -> float:
    """An ordinary step whose FLOPs and saved bytes are composed from the parts' figures
    (:mod:`~fedbench.runners.cost.parts`); when a part is in a state never seen, one more
    forward and backward of the same batch after the step measures every part (random
    state, buffers and gradients restored: the training is unchanged)."""
    blocks = list(am.bundle.blocks())  # the present blocks, in order
    present = sorted(plan.blocks) if plan.blocks is not None else list(range(len(blocks)))
    hidden_pos = tuple(present.index(j) for j in method.hidden_blocks(plan) if j in present)
    prefix = am.bundle.blocks_path + "."
    rest_trainable = tuple(sorted(k for k in phase.trainable if not k.startswith(prefix)))
    base = shape_key + (phase.name, _shape(batch), s.precision)
    probe = StepProbe(blocks, shape_key[1])
    with probe.track():
        value = _step(am, task, method, plan, phase, batch, params, opt, s, hidden)
    keys = probe.keys(base, rest_trainable, hidden_pos)
    figures = compose(meter.figures, keys)
    if figures is None:
        meter.measured += 1
        def loss_fn() -> torch.Tensor:
            with autocast(am.device, s.precision):
                return method.client_loss(task, am.model, batch, plan, hidden, phase.name)
        parts = _measure(am, loss_fn, len(blocks))
        for part, key in keys.items():
            f = parts[part]
            meter.figures[key] = (f.flops_forward, f.flops_backward, f.saved_bytes)
        figures = compose({k: meter.figures[k] for k in keys.values()}, keys)  # this pass's own sum
    else:
        meter.reused += 1
    cost.flops_forward_step, cost.flops_backward_step = figures.flops_forward, figures.flops_backward
    param_bytes = am.n_params_bytes()
    grad_bytes = tensor_bytes([p for p in params])
    opt_bytes = optimizer_state_bytes(opt)
    cost.accounted_bytes = param_bytes + grad_bytes + opt_bytes + figures.saved_bytes
    cost.breakdown = {"params": param_bytes, "grads": grad_bytes, "optimizer": opt_bytes,
                      "activations": figures.saved_bytes}
    return value


def _measure(am: AdapterModel, loss_fn: Callable[[], torch.Tensor], n_blocks: int) -> dict:
    """The parts' figures of one more forward and backward of the step's batch; the random
    state, the model's buffers (batch-norm statistics) and the gradients are as before."""
    buffers = [(b, b.detach().clone()) for b in am.model.buffers()]
    grads = [(p, p.grad) for p in am.model.parameters() if p.grad is not None]
    am.model.zero_grad(set_to_none=True)
    with torch.random.fork_rng(devices=[am.device] if am.device.type == "cuda" else []):
        parts = measure_parts(am.model, am.bundle.blocks_path, n_blocks, am.param_ptrs, loss_fn)
    with torch.no_grad():
        for b, before in buffers:
            b.copy_(before)
    am.model.zero_grad(set_to_none=True)
    for p, g in grads:
        p.grad = g
    return parts
