"""Server-side tools a method may use (e.g. Fed-HeLLo's FIM scores on a proxy set).

Everything the server computes is metered apart from the clients: FLOPs and seconds go
to the record's ``server_tflops_total`` / ``server_seconds_total``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from fedbench.methods.base import ServerAPI
from fedbench.runners.executors.adapters import DEFAULT_ADAPTER, AdapterModel
from fedbench.runners.cost.meters import Stopwatch, count_flops
from fedbench.tasks.base import Task, iterate_batches, to_device


class ServerTools(ServerAPI):
    """The runner's implementation of :class:`~fedbench.methods.plans.ServerAPI`."""

    def __init__(self, am: AdapterModel, task: Task, proxy: Any | None, device: torch.device):
        self.am, self.task, self.proxy, self.device = am, task, proxy, device
        self.flops = 0.0
        self.seconds = 0.0
        self._metering = 0  # depth of nested ``metered()`` blocks (only the outermost counts)

    @property
    def proxy_size(self) -> int:
        return 0 if self.proxy is None else len(self.proxy)

    @contextlib.contextmanager
    def metered(self) -> Iterator[None]:
        """Count FLOPs and wall time of server-side work (re-entrant: nested blocks count once)."""
        if self._metering:
            yield
            return
        self._metering += 1
        try:
            with Stopwatch(self.device) as sw, count_flops() as fc:
                yield
            self.flops += float(fc.get_total_flops())
            self.seconds += sw.seconds
        finally:
            self._metering -= 1

    def proxy_indices(self) -> np.ndarray:
        return np.arange(self.proxy_size)

    def layer_grad_sq_norms(self, tensors: Mapping[str, torch.Tensor],
                            layer_keys: Mapping[int, Sequence[str]]) -> dict[int, float]:
        """Per layer j: mean over proxy examples d of ||grad_{theta_j} loss(d)||_2^2.

        Fed-HeLLo's FIM score (Eq. 4): ``tensors`` (the global LoRA + head) are loaded into
        the full-depth model, every LoRA tensor named in ``layer_keys`` requires grad, and
        each proxy example is its own batch (per-example gradients of the task loss, not of
        a batch mean). Dropout is off (eval mode) so the score is deterministic;
        ``requires_grad`` flags and the train/eval mode are restored afterwards.

        Metered as server work: wall time in full; FLOPs counted on the first example and
        scaled by the number of examples (the clients' policy: the FLOP counter's overhead
        per op is large), unless an enclosing ``metered()`` block already counts everything.
        """
        n = self.proxy_size
        if n == 0:
            raise RuntimeError("layer_grad_sq_norms needs a proxy set (the method's proxy_size is 0)")
        am = self.am
        prev_grad = [(p, p.requires_grad) for p in am.model.parameters()]
        was_training = am.model.training
        sums = {j: 0.0 for j in layer_keys}
        flops_first = 0.0
        try:
            with Stopwatch(self.device) as sw, am.use_adapter(DEFAULT_ADAPTER):
                am.load(tensors)
                keys = [k for j in layer_keys for k in layer_keys[j]]
                params = dict(zip(keys, am.set_trainable(keys)))
                am.model.eval()
                for i, batch in enumerate(iterate_batches(self.proxy, self.proxy_indices(), 1, self.task.collate)):
                    batch = to_device(batch, self.device)
                    if i == 0 and not self._metering:
                        with count_flops() as fc:
                            sq = self._grad_sq_norms(batch, params)
                        flops_first = float(fc.get_total_flops())
                    else:
                        sq = self._grad_sq_norms(batch, params)
                    for j, ks in layer_keys.items():
                        sums[j] += sum(sq[k] for k in ks)
        finally:
            for p, flag in prev_grad:
                p.requires_grad_(flag)
            am.model.train(was_training)
        if not self._metering:
            self.flops += flops_first * n
            self.seconds += sw.seconds
        return {j: s / n for j, s in sums.items()}

    def _grad_sq_norms(self, batch: Any, params: Mapping[str, torch.nn.Parameter]) -> dict[str, float]:
        """||d loss / d p||^2 for each named parameter, on one batch."""
        loss, _ = self.task.loss(self.am.model, batch)
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        return {k: 0.0 if g is None else float(g.double().pow(2).sum()) for k, g in zip(params, grads)}
