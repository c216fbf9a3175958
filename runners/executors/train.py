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

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch

from fedbench.methods.base import ClientPlan, LocalPhase, Method
from fedbench.runners.cost.meters import ClientCost, Stopwatch, account_step
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.cost.parts import StepProbe, compose, measure_parts
from fedbench.runners.executors.act_quant import quantised_blocks
from fedbench.runners.executors.adapters import DEFAULT_ADAPTER, AdapterModel
from fedbench.runners.executors.step import (KeptEntries, Lane, StepMeter, active_peak_bytes, reset_peak, rows,
                                             run_steps)
from fedbench.tasks.base import Task, iterate_batches, to_device


@dataclass
class MeterCache:
    """Measured figures of model parts by state (:mod:`~fedbench.runners.cost.parts`: forward
    FLOPs, backward FLOPs, saved bytes), reused within a run (``run.measure_flops``);
    ``measured`` counts measuring passes, ``reused`` client-rounds composed from known parts."""

    figures: dict[tuple, tuple[float, float, int]] = field(default_factory=dict)
    #: whole-step figures by :func:`meter_key` (executors that meter a client's step apart from
    #: its training: ``packed``); a cache of compositions, not checkpointed
    steps: dict[tuple, tuple[float, float, int, dict]] = field(default_factory=dict)
    #: FLOPs of one client-selection pass (loss and gradients, ``ClientAPI``) by its signature;
    #: deterministic like ``steps``, so not checkpointed
    passes: dict[tuple, float] = field(default_factory=dict)
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


def make_optimizer(params: list, s: TrainSettings) -> torch.optim.Optimizer:
    """The run's optimizer over ``params`` (parameters, or parameter groups with their own lr)."""
    if s.optimizer == "sgd":
        return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    if s.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
    raise ValueError(f"unknown optimizer {s.optimizer!r}")


def phase_optimizer(params: list[torch.nn.Parameter], phase: LocalPhase, s: TrainSettings) -> torch.optim.Optimizer:
    """``phase``'s optimizer over ``params`` (its ``trainable`` tensors, in that order): the
    run's lr times ``phase.lr_scale``, or times a tensor's own factor in ``phase.lr_scales``
    (one parameter group per factor)."""
    own = dict(phase.lr_scales)
    groups: dict[float, list[torch.nn.Parameter]] = {}
    for key, p in zip(phase.trainable, params):
        groups.setdefault(own.get(key, phase.lr_scale), []).append(p)
    return make_optimizer([{"params": ps, "lr": s.lr * f} for f, ps in groups.items()], s)


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
        reset_peak(device)
        am.model.train()
        losses: list[float] = []
        phases = method.local_phases(plan)
        steps = planned_steps(len(indices), settings.batch_size,
                              [settings.local_epochs if p.epochs is None else p.epochs for p in phases],
                              settings.max_steps)
        for phase in phases:
            parts = None if meter is None else PartsMeter(am, method, plan, phase, meter, (arch, adapter),
                                                          settings.precision, hidden)
            losses += train_steps(am, task, method, plan, phase,
                                  phase_batches(task, dataset, indices, phase, settings, rng, device), settings,
                                  cost, parts, hidden, None if on_step is None else lambda s: on_step(s, steps))
        am.model.eval()
        cost.cuda_peak_bytes = active_peak_bytes(am, plan.blocks)
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


def train_steps(am: AdapterModel, task: Task, method: Method, plan: ClientPlan, phase: LocalPhase,
                batches: Iterator[Any], settings: TrainSettings, cost: ClientCost, meter: StepMeter | None = None,
                hidden: Mapping[int, torch.Tensor] | None = None,
                on_step: Callable[[int], None] | None = None) -> list[float]:
    """``plan``'s client trains ``phase`` on ``batches`` with the tensors loaded in ``am``:
    one lane of :func:`~fedbench.runners.executors.step.run_steps` whose loss is the
    method's ``client_loss``, with a fresh optimizer over the phase's tensors at the
    phase's learning rates (:func:`phase_optimizer`), holding the entries the phase does not
    train (``LocalPhase.trained_slices``) and storing quantised the activations of the blocks the
    method names (``Method.quantised_activations``); ``meter`` measures its first step. Returns its losses."""
    params = am.set_trainable(phase.trainable, am.active)
    lane = Lane(plan, params, phase_optimizer(params, phase, settings), batches, cost, settings.grad_clip, on_step,
                kept=KeptEntries(phase, dict(zip(phase.trainable, params))) if phase.trained_slices else None)
    hidden = {} if hidden is None else hidden
    with quantised_blocks(am.physical_blocks(), method.quantised_activations(plan), list(am.model.parameters())):
        run_steps([lane], lambda step: [method.client_loss(task, am.model, b, plan, hidden, phase.name) for _, b in step],
                  am.device, settings.precision, meter)
    return lane.losses


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
    return shape_key + (phase.name, plan.blocks, tuple(sorted(phase.trainable)), batch_shape(batch), precision)


def batch_shape(batch: Any) -> tuple:
    """A batch's signature: its tensors' names and shapes."""
    if isinstance(batch, dict):
        return tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if isinstance(v, torch.Tensor))
    return (tuple(batch.shape),)


class PartsMeter(StepMeter):
    """The training loop's meter: the step's FLOPs and saved bytes composed from the parts'
    figures in a :class:`MeterCache` (:mod:`~fedbench.runners.cost.parts`; a
    :class:`~fedbench.runners.cost.parts.StepProbe` reads each part's state during the
    forward). When a part is in a state never seen, one more forward and backward of the
    same batch after the step measures every part (random state, buffers and gradients
    restored: the training is unchanged)."""

    def __init__(self, am: AdapterModel, method: Method, plan: ClientPlan, phase: LocalPhase, cache: MeterCache,
                 shape_key: tuple, precision: str, hidden: Mapping[int, torch.Tensor] | None = None):
        self.am, self.cache, self.phase, self.shape_key, self.precision = am, cache, phase, shape_key, precision
        self.blocks = list(am.bundle.blocks())  # the present blocks, in order
        present = sorted(plan.blocks) if plan.blocks is not None else list(range(len(self.blocks)))
        self.hidden_pos = tuple(present.index(j) for j in method.hidden_blocks(plan) if j in present)
        self.probe = StepProbe(self.blocks, shape_key[1])
        bits = method.quantised_activations(plan)  # a block's state includes how it stores its activations
        self.bits = tuple(bits.get(j) for j in present)

    def forward(self):
        return self.probe.track()

    def done(self, lane: Lane, batch: Any, again: Callable[[], torch.Tensor]) -> None:
        am, cache = self.am, self.cache
        prefix = am.bundle.blocks_path + "."
        rest_trainable = tuple(sorted(k for k in self.phase.trainable if not k.startswith(prefix)))
        base = self.shape_key + (self.phase.name, batch_shape(batch), self.precision)
        keys = self.probe.keys(base, rest_trainable, self.hidden_pos)
        keys = {part: key + (("act_bits", self.bits[part]),) if part in range(len(self.bits)) else key
                for part, key in keys.items()}
        figures = compose(cache.figures, keys)
        if figures is None:
            cache.measured += 1
            parts = _measure(am, again, len(self.blocks))
            for part, key in keys.items():
                f = parts[part]
                cache.figures[key] = (f.flops_forward, f.flops_backward, f.saved_bytes)
            figures = compose({k: cache.figures[k] for k in keys.values()}, keys)  # this pass's own sum
        else:
            cache.reused += 1
        cost = lane.cost
        cost.flops_forward_step, cost.flops_backward_step = figures.flops_forward, figures.flops_backward
        account_step(cost, am.n_params_bytes(), lane.params, lane.opt, figures.saved_bytes)
        cost.first_batch = rows(batch)


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
