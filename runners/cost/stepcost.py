"""One metered training step of a planned client, outside the training loop.

:func:`measure_step` runs the training loop's own step on a client's first batch (one
forward + backward + optimizer step of the method's first local phase,
:func:`~fedbench.runners.executors.step.run_steps`) under ``FlopCounterMode`` and a
saved-tensor meter (accounted memory: :func:`~fedbench.runners.cost.meters.account_step`,
the one definition) and returns the figures. It runs on real
tensors or on the ``meta`` device (no weights, no arithmetic: shapes, FLOPs and saved
storages are those of the real graph), so a 1B-parameter model is planned in seconds.

The adapter and head tensors the step changes are restored afterwards and the random
state is forked, so measuring a plan on a run's model leaves the run as it was.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from fedbench.methods.base import ClientPlan, LocalPhase, MemoryAPI, Method
from fedbench.runners.cost.meters import ClientCost, SavedTensorBytes, account_step, count_flops, tracked
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.executors.step import StepMeter
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.executors.train import adapter_for, train_steps


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
        with tracked(self._pack):
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


class WholeStepMeter(StepMeter):
    """The planner's meter: the whole step under ``FlopCounterMode`` (forward and backward
    apart) and a saved-tensor meter (:class:`MetaSavedBytes` on ``meta``), the accounted
    memory read after the optimizer step as the training loop reads it."""

    def __init__(self, am: AdapterModel):
        self.am = am
        meta = am.device.type == "meta"
        self.saved = MetaSavedBytes(list(am.model.parameters())) if meta else SavedTensorBytes(exclude=am.param_ptrs)
        self.fwd = self.bwd = None

    @contextlib.contextmanager
    def forward(self):
        with count_flops() as self.fwd, self.saved.track():
            yield

    @contextlib.contextmanager
    def backward(self):
        with count_flops() as self.bwd:
            yield

    def done(self, lane, batch, again) -> None:
        cost = lane.cost
        cost.flops_forward_step = float(self.fwd.get_total_flops())
        cost.flops_backward_step = float(self.bwd.get_total_flops())
        account_step(cost, self.am.n_params_bytes(), lane.params, lane.opt, self.saved.bytes)


def measure_step(am: AdapterModel, task: Any, method: Method, plan: ClientPlan, batch: Any,
                 settings: TrainSettings, phase: LocalPhase | None = None) -> StepFigures:
    """The figures of ``plan``'s first local step on ``batch`` (already on the model's device):
    one step of the training loop (:func:`~fedbench.runners.executors.train.train_steps`)
    metered whole (:class:`WholeStepMeter`); on ``meta`` without gradient clipping.
    ``phase``: the phase measured (default: the method's first for ``plan``)."""
    adapter = adapter_for(am, plan)
    phase = method.local_phases(plan)[0] if phase is None else phase
    saved_state = am.read(phase.trainable, adapter)
    meta = am.device.type == "meta"
    cost = ClientCost(client=plan.client, tier=plan.tier)
    am.model.zero_grad(set_to_none=True)
    with torch.random.fork_rng(devices=[]), am.use_adapter(adapter), am.subset_blocks(plan.blocks), \
            am.capture(method.hidden_blocks(plan)) as hidden, (on_meta() if meta else contextlib.nullcontext()):
        am.model.train()
        train_steps(am, task, method, plan, phase, iter([batch]),
                    replace(settings, grad_clip=None) if meta else settings, cost, WholeStepMeter(am), hidden)
        am.model.eval()
        am.set_trainable([])
        am.model.zero_grad(set_to_none=True)
    if not meta:
        am.load(saved_state, adapter)
    return StepFigures(cost.flops_forward_step, cost.flops_backward_step, cost.accounted_bytes, dict(cost.breakdown))


class StepAccountant(MemoryAPI):
    """The runner's memory accountant (:class:`~fedbench.methods.base.MemoryAPI`): one
    :func:`measure_step` per distinct (method class, architecture, rank, alpha, blocks,
    trained set) on ``am`` and ``batch`` (a batch of the run's shape on the model's device),
    cached; the figures' breakdown is returned. Real tensors or ``meta`` (``fedbench plan``)."""

    def __init__(self, am: AdapterModel, task: Any, batch: Any, settings: TrainSettings):
        self.am, self.task, self.batch, self.settings = am, task, batch, settings
        self.cache: dict[tuple, dict[str, int]] = {}

    def step_bytes(self, method, plan, trainable):
        key = (type(method).__qualname__, plan.arch, plan.rank, plan.lora_alpha, plan.blocks, tuple(sorted(trainable)),
               tuple(sorted(method.quantised_activations(plan).items())))
        if key not in self.cache:
            fig = measure_step(self.am, self.task, method, plan, self.batch, self.settings,
                               LocalPhase("train", tuple(trainable)))
            self.cache[key] = {k: int(v) for k, v in fig.breakdown.items()}
        return dict(self.cache[key])


__all__ = ["FusedAttention", "MetaSavedBytes", "MetaScalars", "on_meta", "StepAccountant", "StepFigures",
           "WholeStepMeter", "measure_step"]
