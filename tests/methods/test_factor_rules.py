"""The alternating-factor rules (methods/factor_rules.py) on hand-built tensors, the
expected values written as arithmetic (spec: shared/docs/methods-2027.md Secs. 3-4)."""

import pytest
import torch

from fedbench.methods.factor_rules import (alternating_factor, changed_factors, masked_factor_mean, rank_mask,
                                           rank_scores, select_top_ranks)


def test_b_trains_first_then_the_factors_alternate():
    assert [alternating_factor(r) for r in (1, 2, 3, 4, 5)] == ["B", "A", "B", "A", "B"]
    with pytest.raises(ValueError):
        alternating_factor(0)


def test_changed_factors_since_a_client_last_had_the_model():
    assert changed_factors(0, 1) == set()  # round 1: everyone knows the seeded init
    assert changed_factors(0, 2) == {"B"} and changed_factors(1, 2) == {"B"}  # round 1 changed B
    assert changed_factors(2, 3) == {"A"}  # a client of round 2 misses only round 2's A
    assert changed_factors(1, 3) == {"A", "B"}  # it missed a round: both


def test_rank_scores_by_hand():
    """A (2 x 2), B (2 x 2); B-round: ||G_B[:, i]|| ||A[i, :]||, A-round: ||B[:, i]|| ||G_A[i, :]||."""
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # row norms 1, 2
    b = torch.tensor([[1.0, 0.0], [0.0, 3.0]])  # column norms 1, 3
    g_b = torch.tensor([[3.0, 0.0], [4.0, 0.0]])  # column norms 5, 0
    assert rank_scores("B", a, b, g_b).tolist() == [5.0 * 1, 0.0 * 2]
    g_a = torch.tensor([[0.0, 6.0], [8.0, 0.0]])  # row norms 6, 8 (column norms 8, 6)
    assert rank_scores("A", a, b, g_a).tolist() == [1 * 6.0, 3 * 8.0]


def test_top_ranks_over_the_whole_model():
    """Spec: m1 = (0.9, 0.1), m2 = (0.5, 0.4), budget 2 -> (m1, 0) and (m2, 0), 0.9 + 0.5 = 1.4.
    Then m1 = (0.9, 0.8): both ranks of m1, 0.9 + 0.8 = 1.7 (a per-module top-1 picks 1.4)."""
    scores = {"m1": torch.tensor([0.9, 0.1]), "m2": torch.tensor([0.5, 0.4])}
    sel = select_top_ranks(scores, 2)
    assert sel == {"m1": [0], "m2": [0]}
    assert sum(float(scores[m][sel[m]].sum()) for m in scores) == pytest.approx(0.9 + 0.5)
    scores = {"m1": torch.tensor([0.9, 0.8]), "m2": torch.tensor([0.5, 0.4])}
    sel = select_top_ranks(scores, 2)
    assert sel == {"m1": [0, 1], "m2": []}
    assert sum(float(scores[m][sel[m]].sum()) for m in scores) == pytest.approx(0.9 + 0.8)
    ties = select_top_ranks({"m1": torch.tensor([1.0, 1.0]), "m2": torch.tensor([1.0])}, 2)
    assert ties == {"m1": [0, 1], "m2": []}  # the earlier module, the lower rank


def test_masked_mean_zero_filled_and_over_selectors():
    """Spec: one entry, global 1.0, p = (0.5, 0.5), client 1 selected it with delta +2, client
    2 did not: zero-filled 1.0 + 0.5 * 2 = 2.0; over the selectors 1.0 + 2 = 3.0."""
    cur = torch.tensor([[1.0]])
    parts, masks = [torch.tensor([[3.0]]), torch.tensor([[1.0]])], [torch.tensor([True]), torch.tensor([False])]
    assert masked_factor_mean(cur, parts, masks, [1.0, 1.0], 0, "all").item() == 1.0 + 0.5 * 2
    assert masked_factor_mean(cur, parts, masks, [1.0, 1.0], 0, "selectors").item() == 1.0 + 2


def test_masked_mean_of_b_columns_with_unequal_weights():
    """B (1 x 2), weights (1, 3); client 1 selected rank 0 (delta 2), client 2 both (deltas 4, 8):
    zero-filled rank 0: 1 + (1*2 + 3*4) / 4 = 4.5, rank 1: 1 + 3*8 / 4 = 7; selectors rank 1: 1 + 3*8 / 3 = 9.
    A rank nobody selected keeps its value."""
    cur = torch.tensor([[1.0, 1.0]])
    parts = [torch.tensor([[3.0, 1.0]]), torch.tensor([[5.0, 9.0]])]
    masks = [torch.tensor([True, False]), torch.tensor([True, True])]
    assert masked_factor_mean(cur, parts, masks, [1.0, 3.0], 1, "all").tolist() == [[1 + (1 * 2 + 3 * 4) / 4,
                                                                                     1 + 3 * 8 / 4]]
    assert masked_factor_mean(cur, parts, masks, [1.0, 3.0], 1, "selectors").tolist() == [[1 + (1 * 2 + 3 * 4) / 4,
                                                                                           1 + 3 * 8 / 3]]
    none = [torch.tensor([False, False])] * 2
    assert masked_factor_mean(cur, parts, none, [1.0, 3.0], 1, "selectors").tolist() == [[1.0, 1.0]]


def test_rank_mask():
    assert rank_mask(4, [0, 2]).tolist() == [True, False, True, False]
