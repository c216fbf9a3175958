"""Routing of a packed forward: each row of a concatenated batch through its client's LoRA and head.

One forward of the shared frozen backbone over the rows of K clients' batches, laid out
client after client (client k owns rows ``offsets[k]:offsets[k + 1]``). Inside every peft
LoRA layer the base layer runs once over all rows; the LoRA update of each client's rows
uses that client's tensors (Hu et al. 2021, LoRA, eq. 3: ``h = W0 x + (alpha / r) B A x``):

- equal row counts: ``bmm(bmm(x, A^T), B^T) * scaling`` over x viewed as (K, rows, d_in)
  and A, B stacked per client, (K, r, d_in) and (K, d_out, r);
- unequal row counts (a client's last, shorter batch): one ``linear(linear(x_k, A_k), B_k)``
  per client, no padding rows.

Either way each client's rows see exactly its own A_k, B_k, and a gradient reaches
A_k, B_k only from its own rows. The head layers (``nn.Linear``) run per client on its rows.
LoRA dropout, where the adapter has one, draws each client's mask from the client's own
``torch.Generator``.

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
        self.clients, self.sizes = list(clients), list(sizes)
        self.equal = len(set(self.sizes)) == 1

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
        if self.equal and p == 0.0:
            k = len(self.clients)
            xk = x.reshape(k, -1, x.shape[-1])  # (K, rows, d_in): client k's rows, contiguous
            h = torch.bmm(torch.bmm(xk, torch.stack(a).transpose(1, 2)), torch.stack(b).transpose(1, 2))
            return (h * scaling).reshape(*x.shape[:-1], h.shape[-1])
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
def routed(model: nn.Module, router: Router, lora: Mapping[str, tuple[float, float]],
           heads: Sequence[str]) -> Iterator[None]:
    """Inside the block, the LoRA layers ``lora`` ({module path: (scaling, dropout p)})
    add ``router``'s per-client update to their base layer's output, and the head layers
    ``heads`` give ``router``'s per-client outputs; on exit the modules are as before."""
    patched: list[nn.Module] = []

    def lora_forward(module: nn.Module, path: str, scaling: float, p: float):
        def forward(x, *args, **kwargs):
            result = module.base_layer(x, *args, **kwargs)  # the frozen base, once for every row
            return result + router.lora_delta(path, x, scaling, p if module.training else 0.0)
        return forward

    try:
        for path, (scaling, p) in lora.items():
            module = model.get_submodule(path)
            module.forward = lora_forward(module, path, scaling, p)
            patched.append(module)
        for path in heads:
            module = model.get_submodule(path)
            module.forward = lambda x, path=path: router.head(path, x)
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again
