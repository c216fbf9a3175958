"""Row gathering of a packed forward: each block runs only over the rows of the clients that hold it.

Sub-model methods give clients different block sets (FedRA: c_i random blocks, Su et al.
2023, Sec. 3.2; InclusiveFL / AllSmall: the first d_i blocks). Alone, a client's model is
its blocks in ascending order (:meth:`~fedbench.runners.executors.adapters.AdapterModel.subset_blocks`):
the hidden state goes from one of its blocks to its next one, so a block it does not hold
leaves its hidden state unchanged (the residual stream passes through). A packed group runs
the union of its clients' blocks; in block j the hidden state's rows of the clients that
hold j are taken out (``index_select``), run through the block with those clients' LoRA
(:meth:`~fedbench.runners.executors.packed_route.Router.within`) and written back (``index_copy``);
the other rows stay as they were. Each row thus meets exactly the blocks, in the order, it
meets alone. Every tensor argument of the block whose first dimension is the hidden state's
(an attention mask per row) is gathered the same way.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch
from torch import nn

from fedbench.runners.executors.packed_route import Router


def block_rows(blocks: Sequence[Sequence[int] | None], sizes: Sequence[int], n_layers: int
               ) -> dict[int, tuple[list[int], torch.Tensor | None]]:
    """{block j of the union: (clients holding j, their rows; None when every client holds j)}
    for clients laid out one after another with ``sizes`` rows and ``blocks`` (None: all)."""
    held = [set(range(n_layers)) if b is None else set(b) for b in blocks]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    out = {}
    for j in sorted(set().union(*held)):
        holders = [k for k, h in enumerate(held) if j in h]
        if len(holders) == len(held):
            out[j] = (holders, None)
        else:
            rows = [r for k in holders for r in range(offsets[k], offsets[k] + sizes[k])]
            out[j] = (holders, torch.tensor(rows, dtype=torch.long))
    return out


def union_blocks(blocks: Sequence[Sequence[int] | None]) -> tuple[int, ...] | None:
    """The blocks any client holds, ascending (None: all)."""
    if any(b is None for b in blocks):
        return None
    return tuple(sorted(set().union(*map(set, blocks))))


def _gathering_forward(block: nn.Module, holders: list[int], rows: torch.Tensor, router: Router):
    forward = type(block).forward

    def run(x: torch.Tensor, *args, **kwargs):
        n, idx = x.shape[0], rows.to(x.device)

        def pick(t):
            return t.index_select(0, idx) if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == n else t

        with router.within(holders):
            y = forward(block, x.index_select(0, idx), *[pick(a) for a in args],
                        **{k: pick(v) for k, v in kwargs.items()})
        h = y[0] if isinstance(y, tuple) else y
        out = x.index_copy(0, idx, h)  # the other rows: unchanged, as alone
        return (out, *y[1:]) if isinstance(y, tuple) else out
    return run


@contextlib.contextmanager
def gathered(physical: Sequence[nn.Module], layout: dict[int, tuple[list[int], torch.Tensor | None]],
             router: Router) -> Iterator[None]:
    """Inside the block, each physical block j of ``layout`` (:func:`block_rows`) held by only
    some clients runs over their rows alone; on exit the blocks are as before."""
    patched = []
    try:
        for j, (holders, rows) in layout.items():
            if rows is not None:
                physical[j].forward = _gathering_forward(physical[j], holders, rows, router)
                patched.append(physical[j])
        yield
    finally:
        for block in patched:
            del block.forward  # the class's forward again
