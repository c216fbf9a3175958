"""Routing of a packed forward: each row of a concatenated batch through its client's LoRA and head.

One forward of the shared frozen backbone over the rows of K clients' batches, laid out
client after client (client k owns rows ``offsets[k]:offsets[k + 1]``). Inside every peft
LoRA layer the base layer runs once over all rows; the LoRA update of each client's rows
uses that client's tensors (Hu et al. 2021, LoRA, eq. 3: ``h = W0 x + (alpha / r) B A x``):
one ``linear(linear(x_k, A_k), B_k) * scaling`` per client on its rows ``x_k``, the ops
peft's LoRA layer runs for that client alone, on the same shapes, so the same values (a
``bmm`` over the clients' rows stacked as (K, rows, d_in) is not: for some ranks its kernel
sums in another order than ``mm`` and the results differ in the last bits).

Each client's rows see exactly its own A_k, B_k, and a gradient reaches A_k, B_k only from
its own rows. The head layers (``nn.Linear``) run per client on its rows.
LoRA dropout, where the adapter has one, draws each client's mask from the client's own
``torch.Generator``.

In a block that only some clients hold, only their rows are present (:meth:`Router.within`).

While :func:`routed` is active the LoRA layers' and heads' own parameters are not used: the
caller passes every client's tensors.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"


@dataclass
class RowClient:
    """One client's part of a packed forward: its tensors by canonical name (values or
    trainable leaves) and its dropout stream."""

    tensors: Mapping[str, torch.Tensor]
    generator: torch.Generator | None


class Router:
    """Per-client LoRA deltas and head outputs for one packed forward."""

    def __init__(self, clients: Sequence[RowClient], sizes: Sequence[int]):
        self.every = list(zip(clients, sizes))
        self._use(range(len(self.every)))

    def _use(self, ks: Sequence[int]) -> None:
        self.clients, self.sizes = [self.every[k][0] for k in ks], [self.every[k][1] for k in ks]

    @contextlib.contextmanager
    def within(self, ks: Sequence[int]) -> Iterator[None]:
        """Inside the block the rows are those of clients ``ks`` only (ascending; a block
        that only they hold: :mod:`fedbench.runners.executors.packed_rows`)."""
        self._use(ks)
        try:
            yield
        finally:
            self._use(range(len(self.every)))

    def _split(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(x.split(self.sizes, dim=0))

    def _dropout(self, xs: list[torch.Tensor], p: float) -> list[torch.Tensor]:
        """Inverted dropout of each client's rows from the client's own generator."""
        out = []
        for x, c in zip(xs, self.clients):
            keep = torch.empty_like(x).bernoulli_(1.0 - p, generator=c.generator)
            out.append(x * keep / (1.0 - p))
        return out

    def lora_delta(self, path: str, x: torch.Tensor, scaling: float, p: float) -> torch.Tensor:
        """The LoRA update of layer ``path`` for the rows ``x`` (N, ..., d_in) -> (N, ..., d_out)."""
        a = [c.tensors[path + LORA_A] for c in self.clients]  # each (r, d_in)
        b = [c.tensors[path + LORA_B] for c in self.clients]  # each (d_out, r)
        xs = self._split(x)
        if p > 0.0:
            xs = self._dropout(xs, p)
        return torch.cat([F.linear(F.linear(xk, ak), bk) * scaling for xk, ak, bk in zip(xs, a, b)])

    def head(self, path: str, x: torch.Tensor) -> torch.Tensor:
        """Head layer ``path`` (an ``nn.Linear``) with each client's weight and bias on its rows."""
        outs = []
        for xk, c in zip(self._split(x), self.clients):
            bias = c.tensors.get(path + ".bias")
            outs.append(F.linear(xk, c.tensors[path + ".weight"], bias))
        return torch.cat(outs)


def lora_paths(layer_keys: Mapping[int, Sequence[str]]) -> dict[int, list[str]]:
    """Adapter layer -> the module paths of its LoRA layers (from the canonical key names)."""
    return {j: [k[: -len(LORA_A)] for k in keys if k.endswith(LORA_A)] for j, keys in layer_keys.items()}


@contextlib.contextmanager
def routed(router: Router, lora: Mapping[str, tuple[nn.Module, float, float]],
           heads: Mapping[str, nn.Module]) -> Iterator[None]:
    """Inside the block, the LoRA layers ``lora`` ({module path: (module, scaling, dropout p)})
    add ``router``'s per-client update to their base layer's output, and the head layers
    ``heads`` ({path: module}) give ``router``'s per-client outputs; on exit the modules are
    as before. Modules are passed resolved: inside ``subset_blocks`` a block's path names
    another block."""
    patched: list[nn.Module] = []

    def lora_forward(module: nn.Module, path: str, scaling: float, p: float):
        def forward(x, *args, **kwargs):
            result = module.base_layer(x, *args, **kwargs)  # the frozen base, once for every row
            return result + router.lora_delta(path, x, scaling, p if module.training else 0.0)
        return forward

    try:
        for path, (module, scaling, p) in lora.items():
            module.forward = lora_forward(module, path, scaling, p)
            patched.append(module)
        for path, module in heads.items():
            module.forward = lambda x, path=path: router.head(path, x)
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again
