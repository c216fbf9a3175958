"""The one local training loop every method shares.

``train_client`` loads the payload into the shared model, makes exactly the planned
tensors trainable (real freezing), optionally swaps in the planned subset of blocks,
runs ``local_epochs`` over the client's examples and returns the tensors it trained.
The first step is measured (FLOPs forward/backward, accounted memory); the loop's FLOP
total scales that measurement by each later step's batch size (same shapes otherwise).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedbench.methods.base import ClientPlan, Method
from fedbench.runners.adapters import AdapterModel, DEFAULT_ADAPTER, tensor_bytes
from fedbench.runners.meters import ClientCost, SavedTensorBytes, Stopwatch, count_flops, optimizer_state_bytes
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
    max_steps: int | None  # cap on steps per client per round (None = full epochs)


def make_optimizer(params: list[torch.nn.Parameter], s: TrainSettings) -> torch.optim.Optimizer:
    if s.optimizer == "sgd":
        return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    if s.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
    raise ValueError(f"unknown optimizer {s.optimizer!r}")


def adapter_for(am: AdapterModel, plan: ClientPlan) -> str:
    """Rank-heterogeneous plans train a LoRA adapter of their own rank (same targets)."""
    if plan.rank is None or plan.rank == am.r:
        alpha = plan.extra.get("lora_alpha", am.alpha)
        if alpha != am.alpha:
            raise ValueError(f"plan asks for lora_alpha={alpha} at the global rank {am.r}, whose adapter has {am.alpha}")
        return DEFAULT_ADAPTER
    name = f"r{plan.rank}"
    am.ensure_adapter(name, plan.rank, plan.extra.get("lora_alpha"))
    return name


def train_client(
    am: AdapterModel,
    task: Task,
    method: Method,
    dataset: Any,
    indices: np.ndarray,
    plan: ClientPlan,
    payload: dict[str, torch.Tensor],
    upload_keys: list[str],
    settings: TrainSettings,
    rng: np.random.Generator,
    measure: bool = True,
) -> tuple[dict[str, torch.Tensor], ClientCost]:
    device = am.device
    cost = ClientCost(client=plan.client, tier=plan.tier, n_examples=len(indices))
    adapter = adapter_for(am, plan)
    trainable = [k for k in upload_keys]
    with am.use_adapter(adapter), am.base_overlay(payload), am.subset_blocks(plan.blocks), \
            am.capture(method.hidden_blocks(plan)) as hidden, Stopwatch(device) as sw:
        am.load(payload, adapter)
        params = am.set_trainable(trainable, adapter)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        opt = make_optimizer(params, settings)
        am.model.train()
        losses: list[float] = []
        first_batch = None
        for _ in range(settings.local_epochs):
            order = rng.permutation(indices)
            for batch in iterate_batches(dataset, order, settings.batch_size, task.collate):
                if settings.max_steps is not None and cost.steps >= settings.max_steps:
                    break
                batch = to_device(batch, device)
                bsz = _batch_size(batch)
                if measure and cost.steps == 0:
                    loss = _measured_step(am, task, method, plan, batch, params, opt, settings, cost, hidden)
                    first_batch = bsz
                else:
                    loss = _step(am, task, method, plan, batch, params, opt, settings, hidden)
                    if first_batch:
                        cost.flops_total += (cost.flops_forward_step + cost.flops_backward_step) * bsz / first_batch
                losses.append(loss)
                cost.steps += 1
        am.model.eval()
        if device.type == "cuda":
            inactive = 0 if plan.blocks is None else sum(
                b for j, b in am.block_bytes.items() if j not in set(plan.blocks))
            cost.cuda_peak_bytes = int(torch.cuda.max_memory_allocated(device)) - inactive
        update = am.read(upload_keys, adapter)
    cost.seconds = sw.seconds
    cost.train_loss = float(np.mean(losses)) if losses else None
    return update, cost


def _batch_size(batch: Any) -> int:
    t = next(iter(batch.values())) if isinstance(batch, dict) else batch
    return int(t.shape[0])


def _loss(task, method, plan, model, batch, hidden) -> torch.Tensor:
    return method.client_loss(task, model, batch, plan, hidden)


def _finish(loss: torch.Tensor, plan: ClientPlan) -> float:
    value = float(loss.detach())
    if not math.isfinite(value):
        raise NonFiniteLoss(f"non-finite loss {value} on client {plan.client}")
    return value


def _step(am, task, method, plan, batch, params, opt, s: TrainSettings, hidden) -> float:
    opt.zero_grad(set_to_none=True)
    loss = _loss(task, method, plan, am.model, batch, hidden)
    value = _finish(loss, plan)
    loss.backward()
    if s.grad_clip:
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
    opt.step()
    return value


def _measured_step(am, task, method, plan, batch, params, opt, s: TrainSettings, cost: ClientCost, hidden) -> float:
    """One step under the FLOP counter and the saved-tensor meter."""
    opt.zero_grad(set_to_none=True)
    saved = SavedTensorBytes(exclude=list(am.model.parameters()))
    with count_flops() as fwd, saved.track():
        loss = _loss(task, method, plan, am.model, batch, hidden)
    value = _finish(loss, plan)
    with count_flops() as bwd:
        loss.backward()
    if s.grad_clip:
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
    opt.step()
    cost.flops_forward_step = float(fwd.get_total_flops())
    cost.flops_backward_step = float(bwd.get_total_flops())
    cost.flops_total += cost.flops_forward_step + cost.flops_backward_step
    param_bytes = am.n_params_bytes()
    grad_bytes = tensor_bytes([p for p in params])
    opt_bytes = optimizer_state_bytes(opt)
    cost.accounted_bytes = param_bytes + grad_bytes + opt_bytes + saved.bytes
    cost.breakdown = {"params": param_bytes, "grads": grad_bytes, "optimizer": opt_bytes, "activations": saved.bytes}
    return value
