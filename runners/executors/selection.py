"""Client-side selection: a client's tools (:class:`~fedbench.methods.base.ClientAPI`) and the
worker's step that asks the method which plan the client trains (``Method.client_select``).

:func:`select_plan` runs on the client before its local training, in every executor
(``local``, ``packed``, ``ray``: the worker's :meth:`~fedbench.runners.executors.worker.ClientWorker.select`),
so the plan a packed group trains is the one a client alone would. The tools compute nothing
until the method asks (the default hook asks nothing); what they compute is metered as the
client's work (its FLOPs go to the client's training FLOPs, ``cost.flops_total``). A
pass's FLOPs depend only on its signature (architecture, adapter, blocks, the keys asked, the
batch's shapes, the precision), as a training step's do (:mod:`~fedbench.runners.cost.parts`):
the first pass of a signature in a run is counted, later ones reuse its figure
(:attr:`~fedbench.runners.executors.train.MeterCache.passes`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from fedbench.methods.base import ClientAPI, ClientPlan, Method
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.cost.meters import count_flops
from fedbench.runners.executors.train import MeterCache, batch_shape
from fedbench.runners.executors.precision import autocast
from fedbench.tasks.base import Task, iterate_batches, to_device

#: the fields of a plan ``client_select`` may not change
FIXED_FIELDS = ("client", "tier", "blocks", "rank", "train_head", "skip", "lora_alpha", "arch", "factor")


class ClientTools(ClientAPI):
    """One client-round's tools on the model ``am`` with the client's ``tensors`` (payload and
    private state) loaded in ``adapter``, over its examples ``indices`` in an order drawn
    from ``seed``. ``meter``: the run's meter cache, where the FLOPs are metered (``flops``);
    None: not metered."""

    def __init__(self, am: AdapterModel, task: Task, dataset: Any, indices: np.ndarray, plan: ClientPlan,
                 tensors: Mapping[str, torch.Tensor], adapter: str, batch_size: int, precision: str, seed: int,
                 meter: MeterCache | None):
        self.am, self.task, self.dataset, self.indices, self.plan = am, task, dataset, indices, plan
        self.tensors, self.adapter, self.batch_size, self.precision = tensors, adapter, batch_size, precision
        self.seed, self.meter = seed, meter
        self.flops = 0.0

    def grad_sq_norms(self, keys: Sequence[str], batches: int) -> dict[str, float]:
        sums, n = {k: 0.0 for k in keys}, 0
        for grads in self._batch_grads(keys, batches):
            for k, g in grads.items():
                sums[k] += 0.0 if g is None else float(g.double().pow(2).sum())
            n += 1
        return {k: s / max(n, 1) for k, s in sums.items()}

    def gradients(self, keys: Sequence[str], batches: int) -> dict[str, torch.Tensor]:
        sums: dict[str, torch.Tensor] = {k: torch.zeros_like(self.tensors[k], dtype=torch.float32, device="cpu")
                                         for k in keys}
        n = 0
        for grads in self._batch_grads(keys, batches):
            for k, g in grads.items():
                if g is not None:
                    sums[k] += g.detach().float().cpu()
            n += 1
        return {k: s / max(n, 1) for k, s in sums.items()}

    def values(self, keys: Sequence[str]) -> dict[str, torch.Tensor]:
        return {k: self.tensors[k] for k in keys}

    def _batch_grads(self, keys: Sequence[str], batches: int) -> Iterator[dict[str, torch.Tensor | None]]:
        """Per batch of the first ``batches`` (an order seeded by the job), d loss / d key of the
        batch-mean task loss with the client's tensors loaded, dropout off; FLOPs metered."""
        am = self.am
        order = np.random.default_rng(self.seed).permutation(self.indices)
        n = 0
        was_training = am.model.training
        with am.use_adapter(self.adapter), am.base_overlay(self.tensors), am.subset_blocks(self.plan.blocks):
            am.load(self.tensors, self.adapter)
            params = am.set_trainable(keys, self.adapter)
            am.model.eval()
            try:
                for batch in iterate_batches(self.dataset, order, self.batch_size, self.task.collate):
                    if n >= batches:
                        break
                    batch = to_device(batch, am.device)
                    key, known = None, None
                    if self.meter is not None:  # metered once per pass signature
                        key = ("select", self.plan.arch, self.adapter, self.plan.blocks, tuple(keys),
                               batch_shape(batch), self.precision)
                        known = self.meter.passes.get(key)
                    with count_flops() if key is not None and known is None else contextlib.nullcontext() as fc:
                        with autocast(am.device, self.precision):
                            loss, _ = self.task.loss(am.model, batch)
                        grads = torch.autograd.grad(loss, params, allow_unused=True)
                    if fc is not None:
                        known = self.meter.passes[key] = float(fc.get_total_flops())
                    self.flops += known or 0.0
                    yield dict(zip(keys, grads))
                    n += 1
            finally:
                am.set_trainable([])
                am.model.train(was_training)


def select_plan(method: Method, plan: ClientPlan, tools: ClientTools) -> ClientPlan:
    """``method.client_select(plan, tools)``, checked: only ``train_layers`` and ``extra`` may change."""
    chosen = method.client_select(plan, tools)
    changed = [f for f in FIXED_FIELDS if getattr(chosen, f) != getattr(plan, f)]
    if changed:
        raise RuntimeError(f"{type(method).__name__}.client_select changed the plan's {', '.join(changed)} "
                           f"(it may change train_layers and extra only)")
    return chosen


__all__ = ["ClientTools", "FIXED_FIELDS", "select_plan"]
