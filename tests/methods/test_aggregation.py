"""The server aggregation rules of methods/aggregation.py on hand-built tensors; every
expected value is written as the arithmetic it should be."""

import pytest
import torch

from fedbench.methods.aggregation import (component_mean, pad_rank, per_class_average, slot_mean, stack_lora,
                                          top_factors, weighted_mean_by_key)
from fedbench.methods.base import ClientPlan, ClientUpdate


def upd(client, tensors, n):
    return ClientUpdate(client, tensors, n, ClientPlan(client, 0, ()))


CURRENT = {"a": torch.zeros(2), "b": torch.full((2,), 7.0), "h": torch.zeros(1, dtype=torch.float16)}
UPDATES = [upd(0, {"a": torch.tensor([1.0, 2.0]), "h": torch.tensor([2.0], dtype=torch.float16)}, 10),
           upd(1, {"a": torch.tensor([4.0, 8.0]), "h": torch.tensor([6.0], dtype=torch.float16)}, 30)]


def test_weighted_mean_by_key_weights_by_examples_over_the_clients_that_uploaded():
    out = weighted_mean_by_key(CURRENT, UPDATES, "examples")
    assert torch.equal(out["a"], torch.tensor([(1.0 * 10 + 4.0 * 30) / 40, (2.0 * 10 + 8.0 * 30) / 40]))
    assert torch.equal(out["h"], torch.tensor([(2.0 * 10 + 6.0 * 30) / 40], dtype=torch.float16))  # its own dtype
    assert torch.equal(out["b"], torch.full((2,), 7.0))  # nobody uploaded it: unchanged
    only_one = weighted_mean_by_key(CURRENT, [UPDATES[0], upd(1, {"h": torch.ones(1)}, 30)], "examples")
    assert torch.equal(only_one["a"], torch.tensor([1.0, 2.0]))  # client 1 did not upload "a"


def test_weighted_mean_by_key_uniform_ignores_example_counts():
    out = weighted_mean_by_key(CURRENT, UPDATES, "uniform")
    assert torch.equal(out["a"], torch.tensor([(1.0 + 4.0) / 2, (2.0 + 8.0) / 2]))
    # the switch matters: with these counts the example-weighted mean is another number
    assert not torch.equal(out["a"], weighted_mean_by_key(CURRENT, UPDATES, "examples")["a"])


def test_weighted_mean_by_key_skips_clients_without_examples_and_rejects_unknown_weighting():
    out = weighted_mean_by_key(CURRENT, [UPDATES[0], upd(1, {"a": torch.tensor([100.0, 100.0])}, 0)], "examples")
    assert torch.equal(out["a"], torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="unknown weighting"):
        weighted_mean_by_key(CURRENT, UPDATES, "median")


def test_component_mean_averages_each_rank_component_over_its_owners():
    current = torch.full((3, 2), 9.0)  # r_max = 3 components (rows) of width 2
    x0 = torch.tensor([[1.0, 1.0]])  # rank 1, weight 1
    x1 = torch.tensor([[3.0, 5.0], [2.0, 4.0]])  # rank 2, weight 3
    out = component_mean(current, [x0, x1], [1.0, 3.0], dim=0)
    assert torch.equal(out[0], torch.tensor([(1.0 * 1 + 3.0 * 3) / 4, (1.0 * 1 + 5.0 * 3) / 4]))
    assert torch.equal(out[1], torch.tensor([2.0, 4.0]))  # only client 1 had component 1
    assert torch.equal(out[2], torch.tensor([9.0, 9.0]))  # nobody: keeps its value
    cols = component_mean(current.T, [x0.T, x1.T], [1.0, 3.0], dim=1)  # B's rank axis is 1
    assert torch.equal(cols, out.T)


def test_stack_lora_concatenates_along_the_rank_axis():
    a0, b0 = torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0], [0.0]])  # rank 1: A (1, 2), B (2, 1)
    a1, b1 = torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # rank 2
    a, b = stack_lora([(a0, b0), (a1, b1)], [0.5, 2.0])
    assert torch.equal(a, torch.tensor([[0.5 * 1.0, 0.5 * 2.0], [2.0 * 0.0, 2.0 * 1.0], [2.0 * 1.0, 2.0 * 0.0]]))
    assert torch.equal(b, torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]]))
    assert torch.allclose(b @ a, 0.5 * (b0 @ a0) + 2.0 * (b1 @ a1))


def test_top_factors_are_the_best_rank_r_approximation_at_the_given_scaling():
    delta = torch.diag(torch.tensor([3.0, 2.0, 1.0]))
    a, b = top_factors(delta, 2, scaling=0.5)
    assert a.shape == (2, 3) and b.shape == (3, 2)
    assert torch.allclose(0.5 * (b @ a), torch.diag(torch.tensor([3.0, 2.0, 0.0])), atol=1e-6)
    a_pad, b_pad = pad_rank(a, b, 4)
    assert a_pad.shape == (4, 3) and b_pad.shape == (3, 4)
    assert torch.equal(a_pad[2:], torch.zeros(2, 3)) and torch.equal(b_pad[:, 2:], torch.zeros(3, 2))
    assert torch.equal(b_pad @ a_pad, b @ a)


def test_per_class_average_is_count_weighted_per_class():
    means = torch.tensor([[[1.0, 2.0], [5.0, 5.0], [0.0, 0.0]],
                          [[4.0, 8.0], [0.0, 0.0], [0.0, 0.0]]])  # (K=2, C=3, D=2)
    counts = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])  # (K, C)
    glob, total = per_class_average(means, counts)
    assert torch.allclose(glob, torch.tensor([[(1.0 * 1 + 4.0 * 2) / 3, (2.0 * 1 + 8.0 * 2) / 3],
                                              [5.0, 5.0], [0.0, 0.0]]))
    assert torch.equal(total, torch.tensor([1.0 + 2.0, 3.0, 0.0]))
    left, _ = per_class_average(means, counts, leave_out=1)
    assert torch.equal(left[0], torch.tensor([1.0, 2.0]))


def test_slot_mean_averages_each_module_over_the_clients_that_trained_it():
    current = torch.full((4, 2), 9.0)  # R = 4 rank-1 modules (rows) of width 2
    x0 = torch.tensor([[1.0, 2.0], [3.0, 4.0]])  # modules 1 and 3, weight 1
    x1 = torch.tensor([[5.0, 6.0]])  # module 3, weight 3
    out = slot_mean(current, [x0, x1], [[1, 3], [3]], [1.0, 3.0], dim=0)
    assert torch.equal(out[1], torch.tensor([1.0, 2.0]))  # client 0 alone
    assert torch.equal(out[3], torch.tensor([(3.0 * 1 + 5.0 * 3) / 4, (4.0 * 1 + 6.0 * 3) / 4]))
    assert torch.equal(out[0], current[0]) and torch.equal(out[2], current[2])  # nobody trained them
    cols = slot_mean(current.T, [x0.T, x1.T], [[1, 3], [3]], [1.0, 3.0], dim=1)  # B's module axis is 1
    assert torch.equal(cols, out.T)


def test_slot_mean_with_every_slot_is_the_weighted_mean_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(3, 5, generator=g) for _ in range(3)]
    ups = [upd(i, {"a": x}, n) for i, (x, n) in enumerate(zip(xs, [7, 2, 5]))]
    want = weighted_mean_by_key({"a": torch.zeros(3, 5)}, ups, "examples")["a"]
    assert torch.equal(slot_mean(torch.zeros(3, 5), xs, [[0, 1, 2]] * 3, [7.0, 2.0, 5.0], dim=0), want)
