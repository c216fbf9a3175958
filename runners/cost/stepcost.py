"""One metered training step of a planned client, outside the training loop.

:func:`measure_step` does what the training loop does on a client's first step (one
forward + backward + optimizer step of the method's first local phase, under
``FlopCounterMode`` and a saved-tensor meter; accounted memory = parameters of the
client's model + gradients + optimizer state + bytes saved for backward, the meter's
definition in :mod:`fedbench.runners.cost.meters`) and returns the figures. It runs on real
tensors or on the ``meta`` device (no weights, no arithmetic: shapes, FLOPs and saved
storages are those of the real graph), so a 1B-parameter model is planned in seconds.

The adapter and head tensors the step changes are restored afterwards and the random
state is forked, so measuring a plan on a run's model leaves the run as it was.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from fedbench.methods.base import ClientPlan, Method, tensor_bytes
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.cost.meters import SavedTensorBytes, count_flops, optimizer_state_bytes
from fedbench.runners.executors.train import TrainSettings, adapter_for, make_optimizer


@dataclass(frozen=True)
class StepFigures:
    """A planned client's step: FLOPs forward/backward and accounted bytes with their parts."""

    flops_forward: float
    flops_backward: float
    accounted_bytes: int
    breakdown: dict

    @property
    def flops(self) -> float:
        return self.flops_forward + self.flops_backward


class MetaSavedBytes:
    """Bytes autograd saves for backward, each storage once, parameters excluded, for
    tensors on any device. :class:`~fedbench.runners.cost.meters.SavedTensorBytes` tells
    storages apart by data pointer, and every ``meta`` storage has pointer 0; this one
    tells them apart by the storage object itself (its C handle)."""

    def __init__(self, params: list[torch.Tensor]):
        self._exclude = {p.untyped_storage()._cdata for p in params}
        self._seen: set[int] = set()
        self._keep: list[Any] = []  # storages seen stay alive, so no handle is reused meanwhile
        self.bytes = 0

    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        key = st._cdata
        if key not in self._exclude and key not in self._seen:
            self._seen.add(key)
            self._keep.append(st)
            self.bytes += st.nbytes()
        return t

    @contextlib.contextmanager
    def track(self) -> Iterator["MetaSavedBytes"]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self


class MetaScalars(TorchDispatchMode):
    """Reading a ``meta`` tensor's value (``bool(mask.all())``, ``.item()``) answers 1, as if
    every data-dependent test came out true. The one such test in the models measured here
    is transformers' "is the attention mask all ones" (then it drops the mask): the answer
    1 describes a batch without padding, which is what a planned batch is (full-length
    sequences; tiny_text's are unpadded too)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return True if args[0].dtype == torch.bool else 1
        return func(*args, **(kwargs or {}))


class FusedAttention(TorchFunctionMode):
    """``scaled_dot_product_attention`` on ``meta`` takes the kernel the CPU would take for
    the same shapes, dtypes and options (asked of ``torch._fused_sdp_choice`` on empty CPU
    tensors of those shapes): the fused flash kernel where the CPU uses it (no dropout),
    else the math path. Left alone, the meta device always takes the math path, whose saved
    tensors (the T x T probabilities) and backward FLOPs are not the fused kernel's."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and args[0].device.type == "meta":
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
            causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
            scale = kwargs.get("scale")
            if not kwargs.get("enable_gqa") and _cpu_takes_flash(q, k, v, mask, p, causal, scale):
                return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, p, causal, attn_mask=mask, scale=scale)[0]
        return func(*args, **kwargs)


def _cpu_takes_flash(q, k, v, mask, dropout_p, is_causal, scale) -> bool:
    def empty(t):
        return None if t is None else torch.empty(t.shape, dtype=t.dtype)

    choice = torch._fused_sdp_choice(empty(q), empty(k), empty(v), empty(mask), dropout_p, is_causal, scale=scale)
    return choice == SDPBackend.FLASH_ATTENTION.value


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """What a step on ``meta`` tensors runs under (:class:`FusedAttention`, :class:`MetaScalars`)."""
    with FusedAttention(), MetaScalars():
        yield


def measure_step(am: AdapterModel, task: Any, method: Method, plan: ClientPlan, batch: Any,
                 settings: TrainSettings) -> StepFigures:
    """The figures of ``plan``'s first local step on ``batch`` (already on the model's device)."""
    adapter = adapter_for(am, plan)
    phase = method.local_phases(plan)[0]
    saved_state = am.read(phase.trainable, adapter)
    am.model.zero_grad(set_to_none=True)
    with torch.random.fork_rng(devices=[]), am.use_adapter(adapter), am.subset_blocks(plan.blocks), \
            am.capture(method.hidden_blocks(plan)) as hidden:
        am.model.train()
        params = am.set_trainable(phase.trainable, adapter)
        opt = make_optimizer(params, settings)
        opt.zero_grad(set_to_none=True)
        meta = am.device.type == "meta"
        saved = MetaSavedBytes(list(am.model.parameters())) if meta else SavedTensorBytes(exclude=am.param_ptrs)
        mode = on_meta if meta else contextlib.nullcontext
        with mode(), count_flops() as fwd, saved.track():
            loss = method.client_loss(task, am.model, batch, plan, hidden, phase.name)
        with mode(), count_flops() as bwd:
            loss.backward()
        if settings.grad_clip and not meta:
            torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        opt.step()
        param_bytes = am.n_params_bytes()
        grad_bytes = tensor_bytes(params)
        opt_bytes = optimizer_state_bytes(opt)
        am.model.eval()
        for p in params:
            p.requires_grad_(False)
            p.grad = None
    if not meta:
        am.load(saved_state, adapter)
    breakdown = {"params": param_bytes, "grads": grad_bytes, "optimizer": opt_bytes, "activations": saved.bytes}
    return StepFigures(float(fwd.get_total_flops()), float(bwd.get_total_flops()),
                       param_bytes + grad_bytes + opt_bytes + saved.bytes, breakdown)


__all__ = ["FusedAttention", "MetaSavedBytes", "MetaScalars", "on_meta", "StepFigures", "measure_step"]
