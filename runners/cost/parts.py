"""A training step's FLOPs and saved bytes composed from per-part measurements.

A step's FLOPs are additive over the operators it runs, and each operator runs inside one
part of the model: one of the (present) blocks, or the rest (embeddings, head, the
method's extra modules, the loss). What a part computes depends only on its own state:

- a block: its structure and input shapes (its *signature*: class, own parameter shapes,
  input tensor shapes), which of its own parameters need grad (weight-grad GEMMs and the
  saved inputs they need) and whether its input needs grad (input-grad GEMMs: something
  below it is trainable);
- the rest: which of its parameters need grad, whether the last block's output and each
  block output the method reads (``Method.hidden_blocks``) need grad, and the phase's loss.

So a part measured once in a state (forward and backward FLOPs attributed per module by
``FlopCounterMode.get_flop_counts()``, saved-for-backward bytes attributed to the part
that saves them) gives the same figure in every later step where it is in that state,
whatever the allocation around it: the step's figure is the sum of its parts'. A
:class:`StepProbe` (forward hooks, no counting) reads each part's state during an ordinary
step; only a state never seen before needs a measurement (:func:`measure_parts`), which
runs the step's batch once more under the meters with the random state and the model's
buffers restored, so training is unchanged. Identical blocks (a transformer's) share one
signature, so a run measures a bounded number of passes however its allocations vary.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from fedbench.runners.executors.adapters import canonical
from fedbench.runners.cost.meters import EXTRA_FLOP_FORMULAS, SavedTensorBytes

REST = "rest"


@dataclass(frozen=True)
class PartFigures:
    """One part's measured share of a step."""

    flops_forward: float
    flops_backward: float
    saved_bytes: int


def _tensor_shapes(args: Any) -> tuple[tuple[tuple[int, ...], str, bool], ...]:
    flat, _ = tree_flatten(args)
    return tuple((tuple(t.shape), str(t.dtype), t.requires_grad) for t in flat if isinstance(t, torch.Tensor))


class StepProbe:
    """Hooks on the present blocks (in order) that read each part's state in a step.

    ``keys(base, rest_trainable, hidden)`` after the forward: {part: state key}, the block
    parts named by their position ``i`` among the present blocks."""

    def __init__(self, blocks: list[torch.nn.Module], active_adapter: str):
        self.blocks, self.active = blocks, active_adapter
        self.inputs: dict[int, tuple] = {}
        self.out_grad: dict[int, bool] = {}

    @contextlib.contextmanager
    def track(self) -> Iterator["StepProbe"]:
        handles = []
        for i, b in enumerate(self.blocks):
            def pre(_m, args, kwargs, i=i):
                self.inputs[i] = _tensor_shapes((args, kwargs))

            def post(_m, _args, output, i=i):
                flat, _ = tree_flatten(output)
                self.out_grad[i] = any(isinstance(t, torch.Tensor) and t.requires_grad for t in flat)
            handles += [b.register_forward_pre_hook(pre, with_kwargs=True), b.register_forward_hook(post)]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    def _params(self, block: torch.nn.Module) -> tuple:
        own = []
        for name, p in block.named_parameters():
            key, adapter = canonical(name)
            if adapter in (None, self.active):
                own.append((key, tuple(p.shape), str(p.dtype), p.requires_grad))
        return tuple(own)

    def keys(self, base: tuple, rest_trainable: tuple, hidden_positions: tuple[int, ...]) -> dict[Any, tuple]:
        keys: dict[Any, tuple] = {}
        for i, b in enumerate(self.blocks):
            keys[i] = base + ("block", type(b).__qualname__, self._params(b), self.inputs.get(i, ()))
        last = len(self.blocks) - 1
        reads = tuple((i, self.out_grad.get(i, False)) for i in sorted(set(hidden_positions) | {last}) if i >= 0)
        keys[REST] = base + (REST, rest_trainable, reads)
        return keys


class _PartFlops(FlopCounterMode):
    """``FlopCounterMode`` whose every counted operator is also credited to a part:
    in the forward the part running now, in the backward the part whose forward created
    the autograd node being run (``torch._C._current_autograd_node``). Module-level
    attribution by hooks on gradients misplaces the backward of a block whose input
    needs no grad; the node's creator does not."""

    def __init__(self, forward_part: Callable[[], Any], node_part: dict):
        super().__init__(display=False, custom_mapping=EXTRA_FLOP_FORMULAS)
        self.forward_part, self.node_part = forward_part, node_part
        self.by_part: dict[Any, float] = {}

    def _count_flops(self, func_packet, out, args, kwargs):  # the one per-operator hook FlopCounterMode has
        if func_packet in self.flop_registry:
            n = self.flop_registry[func_packet](*args, **kwargs, out_val=out)
            node = torch._C._current_autograd_node()
            part = self.forward_part() if node is None else self.node_part.get(node, REST)
            self.by_part[part] = self.by_part.get(part, 0.0) + float(n)
        return super()._count_flops(func_packet, out, args, kwargs)


def _tag(tensors: Any, node_part: dict, part: Any) -> None:
    """Credit to ``part`` every autograd node behind ``tensors`` not credited yet."""
    flat, _ = tree_flatten(tensors)
    stack = [t.grad_fn for t in flat if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in node_part:
            continue
        node_part[node] = part
        stack.extend(nxt for nxt, _ in node.next_functions)


def measure_parts(model: torch.nn.Module, blocks_fqn: str, n_blocks: int, exclude_ptrs: frozenset[int],
                  step: Callable[[], torch.Tensor]) -> dict[Any, PartFigures]:
    """Run ``step()`` (forward, returns the loss) and its backward under the FLOP counter
    and the saved-tensor meter; {block position i or ``REST``: its figures}, block ``i``
    being the module ``<blocks_fqn>.<i>`` of ``model``. A forward operator belongs to the
    part running it; a backward operator to the part whose forward created its autograd
    node (nodes behind a block's inputs are the rest's or an earlier block's, those
    behind its outputs not credited yet are the block's). Gradients are left in place."""
    owner: list[Any] = [REST]  # the part running now (forward)
    node_part: dict = {}
    saved = SavedTensorBytes(exclude_ptrs, part=lambda: owner[0])
    container = model.get_submodule(blocks_fqn)
    handles = []
    for i in range(n_blocks):
        def pre(_m, args, kwargs, i=i):
            _tag((args, kwargs), node_part, REST)
            owner[0] = i

        def post(_m, _args, output, i=i):
            _tag(output, node_part, i)
            owner[0] = REST
        handles += [container[i].register_forward_pre_hook(pre, with_kwargs=True),
                    container[i].register_forward_hook(post)]
    fwd, bwd = _PartFlops(lambda: owner[0], node_part), _PartFlops(lambda: REST, node_part)
    try:
        with fwd, saved.track():
            loss = step()
        with bwd:
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    return {part: PartFigures(fwd.by_part.get(part, 0.0), bwd.by_part.get(part, 0.0), saved.by_part.get(part, 0))
            for part in list(range(n_blocks)) + [REST]}


def compose(table: dict[tuple, tuple[float, float, int]], keys: dict[Any, tuple]) -> PartFigures | None:
    """The step's figures: the sum of its parts' figures in ``table`` (state key ->
    (forward FLOPs, backward FLOPs, saved bytes)), or None while a part's state is unmeasured."""
    if any(k not in table for k in keys.values()):
        return None
    got = [table[k] for k in keys.values()]
    return PartFigures(sum(g[0] for g in got), sum(g[1] for g in got), sum(g[2] for g in got))
