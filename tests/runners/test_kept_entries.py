"""LocalPhase.trained_slices: of a trained tensor only the named slices move, in the one
client step every executor runs (runners/executors/step.py), whatever the optimizer does
to the others (weight decay, momentum)."""

import torch

from fedbench.methods.base import ClientPlan, LocalPhase
from fedbench.runners.cost.meters import ClientCost
from fedbench.runners.executors.step import KeptEntries, Lane, run_steps


def test_only_the_trained_slices_move_under_weight_decay_and_momentum():
    """B (3 x 4), columns 1 and 3 train: two SGD steps (momentum 0.9, weight decay 0.5) on a loss
    whose gradient is non-zero everywhere leave columns 0 and 2 exactly as they were; the others
    move, and the gradient the optimizer saw is zero outside the slices."""
    torch.manual_seed(0)
    b = torch.randn(3, 4, requires_grad=True)
    start = b.detach().clone()
    phase = LocalPhase("train", ("b",), trained_slices=(("b", 1, (1, 3)),))
    opt = torch.optim.SGD([b], lr=0.1, momentum=0.9, weight_decay=0.5)
    lane = Lane(ClientPlan(0, 0, ()), [b], opt, iter([0, 1]), ClientCost(client=0, tier=0),
                kept=KeptEntries(phase, {"b": b}))
    run_steps([lane], lambda step: [(b * torch.arange(1.0, 13.0).reshape(3, 4)).square().sum() for _ in step],
              torch.device("cpu"), "fp32")
    assert torch.equal(b.detach()[:, [0, 2]], start[:, [0, 2]])
    assert (b.detach()[:, [1, 3]] != start[:, [1, 3]]).all()
    assert not b.grad[:, [0, 2]].any() and b.grad[:, [1, 3]].all()
    assert lane.cost.steps == 2
