"""What a method's client-side selection may use (declared beside :mod:`fedbench.methods.base`,
whose ``MethodContext.memory`` and ``Method.client_select`` take them): the run's memory
accountant and a client's own tools. Typed interfaces the runner implements; methods never
see the runner's model or a client's data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch

    from fedbench.methods.base import ClientPlan, Method


class MemoryAPI:
    """The run's memory accountant behind a typed interface (the runner's implementation:
    :class:`fedbench.runners.cost.stepcost.StepAccountant`): the accounted bytes of one local
    step (the meters' definition: parameters + gradients + optimizer state + bytes saved for
    backward), measured on the run's model and a batch of the run's shape, once per distinct
    trained set. What a method's memory cost model is built from (``MethodContext.memory``)."""

    def step_bytes(self, method: "Method", plan: ClientPlan, trainable: Sequence[str]) -> dict[str, int]:
        """{"params", "grads", "optimizer", "activations"}: bytes of one step of ``method``'s
        client loss for ``plan`` with exactly ``trainable`` trained."""
        raise NotImplementedError


class ClientAPI:
    """Tools of one client-round for choosing what to train on the client's own data (the
    runner's implementation: :class:`fedbench.runners.executors.selection.ClientTools`), given to
    ``Method.client_select`` with the client's payload loaded; their FLOPs are the client's."""

    def grad_sq_norms(self, keys: Sequence[str], batches: int) -> dict[str, float]:
        """Per key: ||d loss / d key||^2 of the batch-mean task loss, averaged over the first
        ``batches`` batches of the client's data (an order seeded by the job), dropout off."""
        raise NotImplementedError

    def gradients(self, keys: Sequence[str], batches: int) -> dict[str, "torch.Tensor"]:
        """Per key: d loss / d key (the tensor's shape, float32, on the CPU) of the batch-mean
        task loss, averaged over the same batches as :meth:`grad_sq_norms`."""
        raise NotImplementedError

    def values(self, keys: Sequence[str]) -> dict[str, "torch.Tensor"]:
        """The client's values of ``keys`` (its payload and private state, before training)."""
        raise NotImplementedError
