"""Meters: FLOPs, memory, traffic and time, measured, never estimated.

- FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` around a client's training step,
  forward (loss computation) and backward counted separately.
- Memory: on every device a device-independent *accounted* figure for one step:
  parameters reachable from the (possibly smaller) model + gradients of trainable
  parameters + optimizer state + bytes saved for backward (``saved_tensors_hooks``,
  each storage counted once, parameters excluded). On CUDA also the allocator's peak
  (``max_memory_allocated``, reset per client) minus the resident bytes of blocks the
  client's model does not contain (the simulator keeps one full backbone on the GPU).
- Traffic: numel x element size of the tensors in each payload that crosses the runner
  boundary, down and up.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode


def _cpu_attention_formulas() -> dict:
    """FLOP formulas for the CPU kernel of ``scaled_dot_product_attention``
    (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward) where this
    torch's ``FlopCounterMode`` has none: torch 2.14 counts the CUDA attention kernels but
    not the CPU one (0 FLOPs for attention on CPU), torch 2.15 counts it with the same
    formulas as the CUDA kernels. Counting it here makes a record's TFLOPs/step the same
    whichever torch measured it: forward QK^T and AV, 4 b h s_q s_k d; backward the
    recomputed scores plus four products, 2.5 x the forward (torch's
    ``sdpa_flop_count`` / ``sdpa_backward_flop_count``)."""
    aten = torch.ops.aten
    out = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None and forward not in flop_counter.flop_registry:
        out[forward] = lambda q, k, v, *args, out_shape=None, **kwargs: flop_counter.sdpa_flop_count(q, k, v)
    if backward is not None and backward not in flop_counter.flop_registry:
        out[backward] = (lambda grad_out, q, k, v, *args, out_shape=None, **kwargs:
                         flop_counter.sdpa_backward_flop_count(grad_out, q, k, v))
    return out


#: The formulas every FLOP counter of the suite adds to torch's (see :func:`_cpu_attention_formulas`).
EXTRA_FLOP_FORMULAS = _cpu_attention_formulas()


@contextlib.contextmanager
def count_flops() -> Iterator[FlopCounterMode]:
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as fc:
        yield fc


#: the pack functions of the saved-tensor meters now tracking, innermost last. torch applies only
#: the innermost ``saved_tensors_hooks`` pair, so a pair installed inside a meter (activation
#: quantisation, :mod:`~fedbench.runners.executors.act_quant`) hands what it stores to
#: :func:`outer_pack`: the meter counts the packed bytes
_TRACKING: list[Callable] = []


def outer_pack() -> Callable | None:
    """The pack function of the innermost saved-tensor meter tracking now (None: none)."""
    return _TRACKING[-1] if _TRACKING else None


@contextlib.contextmanager
def tracked(pack: Callable) -> Iterator[None]:
    """``saved_tensors_hooks(pack, identity)``, with ``pack`` on the meters' stack."""
    _TRACKING.append(pack)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
    finally:
        _TRACKING.pop()


class SavedTensorBytes:
    """Sum of bytes autograd saves for backward inside the context (params excluded).

    ``exclude``: the storage pointers of the parameters (:func:`storage_ptrs`, computed
    once per model, not per measured step), or the tensors themselves. ``part()``, if
    given, names the part of the model saving now: ``by_part`` then holds each part's
    bytes (a storage counts for the first part that saves it)."""

    def __init__(self, exclude: "frozenset[int] | set[int] | list[torch.Tensor]",
                 part: "Callable[[], Hashable] | None" = None):
        self._exclude = exclude if isinstance(exclude, (set, frozenset)) else storage_ptrs(exclude)
        self._seen: set[int] = set()
        self._part = part
        self.bytes = 0
        self.by_part: dict = {}

    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self._exclude and ptr not in self._seen:
            self._seen.add(ptr)
            self.bytes += st.nbytes()
            if self._part is not None:
                part = self._part()
                self.by_part[part] = self.by_part.get(part, 0) + st.nbytes()
        return t

    @contextlib.contextmanager
    def track(self) -> Iterator["SavedTensorBytes"]:
        with tracked(self._pack):
            yield self


def storage_ptrs(tensors) -> frozenset[int]:
    """The data pointers of the storages of ``tensors``."""
    return frozenset(t.untyped_storage().data_ptr() for t in tensors)


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    total = 0
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


def account_step(cost: "ClientCost", param_bytes: int, trainable: list[torch.Tensor], opt: torch.optim.Optimizer,
                 activation_bytes: int) -> None:
    """The accounted memory of a training step into ``cost`` (the one definition, for the
    training loop and the planner alike): the parameters of the client's model + a gradient
    per trainable tensor + the optimizer's state (read after its step) + the bytes saved
    for backward, with the parts in ``cost.breakdown``."""
    grads = int(sum(t.numel() * t.element_size() for t in trainable))
    cost.breakdown = {"params": int(param_bytes), "grads": grads, "optimizer": optimizer_state_bytes(opt),
                      "activations": int(activation_bytes)}
    cost.accounted_bytes = sum(cost.breakdown.values())


class PeakRSS:
    """The process's peak resident set size over a stretch of code, measured (Linux).

    ``reset()`` writes ``5`` to ``/proc/self/clear_refs`` (resets the high-water mark
    ``VmHWM`` to the current RSS); ``read()`` returns ``VmHWM`` in bytes. Both give None
    where that is unavailable (not Linux, no permission): the record then says null."""

    def __init__(self):
        self.available = True

    def reset(self) -> bool:
        if not self.available:
            return False
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            self.available = False
            return False

    def read(self) -> int | None:
        if not self.available:
            return None
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            pass
        self.available = False
        return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        sync(self.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync(self.device)
        self.seconds = time.perf_counter() - self.t0


@dataclass
class ClientCost:
    """What one client's local training cost in one round."""

    client: int
    tier: int
    steps: int = 0
    n_examples: int = 0
    flops_forward_step: float = 0.0  # measured on the first step
    flops_backward_step: float = 0.0
    flops_total: float = 0.0  # measured step scaled by batch size over all steps
    first_batch: int = 0  # batch size of the measured step
    accounted_bytes: int = 0
    cuda_peak_bytes: int | None = None
    rss_peak_bytes: int | None = None  # the process's measured peak RSS during the client (Linux), or None
    seconds: float = 0.0
    down_bytes: int = 0
    up_bytes: int = 0
    down_variants: dict = field(default_factory=dict)  # label -> down bytes counted another way (Traffic.down_variants)
    train_loss: float | None = None
    first_loss: float | None = None  # the loss of its first step, before any update of this client-round
    breakdown: dict = field(default_factory=dict)
