"""Activation quantisation, a memory lever (``Method.quantised_activations``, FedQuad's).

Inside a chosen block, every floating-point tensor autograd saves for backward (parameters
excepted: they are resident anyway) is stored as ``bits``-bit integers with a per-tensor
minimum and step (asymmetric uniform quantisation, round to nearest) and dequantised when
the backward needs it, through ``torch.autograd.graph.saved_tensors_hooks`` entered by a
forward pre-hook of the block and left by its forward hook. The round trip's error is at most
half a step, (max - min) / (2^bits - 1) / 2 per element.

torch applies only the innermost pair of saved-tensor hooks, so a meter tracking around the
step (:func:`~fedbench.runners.cost.meters.tracked`) is handed the packed tensors
(:func:`~fedbench.runners.cost.meters.outer_pack`): the accounted activation bytes are the
packed ones. 8 bits only (one integer per byte; narrower widths would need bit packing).
The quantisation's own elementwise work is not in the FLOP counts (``FlopCounterMode``
counts matrix products).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
from fedbench.runners.cost.meters import outer_pack

BITS = (8,)


def quantise(t: torch.Tensor, bits: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype]:
    """(q uint8, minimum, step, dtype) of ``t``: q = round((t - min) / step), step =
    (max - min) / (2^bits - 1) (1 for a constant tensor)."""
    if bits not in BITS:
        raise ValueError(f"activation quantisation supports {BITS} bits, not {bits}")
    x = t.detach().float()
    lo, hi = x.amin(), x.amax()
    step = (hi - lo) / (2 ** bits - 1)
    step = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round((x - lo) / step).clamp_(0, 2 ** bits - 1).to(torch.uint8)
    return q, lo, step, t.dtype


def dequantise(packed: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype]) -> torch.Tensor:
    q, lo, step, dtype = packed
    return (q.float() * step + lo).to(dtype)


class Quantiser:
    """The pack / unpack pair of the chosen blocks; ``params``: the model's parameters
    (never quantised). A tensor saved twice in one block's forward is packed once."""

    def __init__(self, params: Sequence[torch.Tensor]):
        self._params = {p.untyped_storage()._cdata for p in params}
        self._keep = list(params)  # their storages stay alive: no handle is reused meanwhile
        self._cache: dict[tuple, object] = {}
        self.bits = 8

    def reset(self, bits: int) -> None:
        """A block's forward starts (at ``bits``) or ends: the cache of packed tensors is emptied."""
        self.bits = bits
        self._cache.clear()

    def pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        outer = outer_pack()
        if not t.is_floating_point() or st._cdata in self._params:
            return ("raw", t if outer is None else outer(t))
        key = (st._cdata, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t._version)
        if key not in self._cache:
            q, lo, step, dtype = quantise(t, self.bits)
            if outer is not None:
                q, lo, step = outer(q), outer(lo), outer(step)
            self._cache[key] = (t, ("q", (q, lo, step, dtype)))  # t held: its storage is not reused meanwhile
        return self._cache[key][1]

    @staticmethod
    def unpack(packed):
        kind, value = packed
        return value if kind == "raw" else dequantise(value)


@contextlib.contextmanager
def quantised_blocks(blocks: Mapping[int, torch.nn.Module], bits: Mapping[int, int],
                     params: Sequence[torch.Tensor]) -> Iterator[None]:
    """Inside the block: the forward of block j (of ``blocks``, by physical index) saves its
    activations quantised to ``bits[j]`` bits; nothing when ``bits`` is empty."""
    if not bits:
        yield
        return
    quant = Quantiser(params)
    entered: list = []
    handles = []
    for j, b in bits.items():
        def pre(_m, _args, b=b):
            quant.reset(b)
            ctx = torch.autograd.graph.saved_tensors_hooks(quant.pack, quant.unpack)
            ctx.__enter__()
            entered.append(ctx)

        def post(_m, _args, _out):
            quant.reset(quant.bits)
            if entered:
                entered.pop().__exit__(None, None, None)
        handles += [blocks[j].register_forward_pre_hook(pre), blocks[j].register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        while entered:  # a forward that raised inside a block
            entered.pop().__exit__(None, None, None)


__all__ = ["Quantiser", "dequantise", "quantise", "quantised_blocks"]
