"""RoLoRA and RoLoRA-het: B = 0 at the start and B trained first (asserted), one factor per
round, the spec's hand check of the exact average, the per-rank mean of the variant, the
traffic of a client that missed a round, the upload budget held by the round loop."""

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.alternating import RANKS
from fedbench.methods.base import ClientUpdate, tensor_bytes
from fedbench.methods.rolora import RoLoRA, RoLoRAHet
from fedbench.runners.core.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS
from helpers import method_setup

M = "blocks.0.fc"
A0, B0 = M + ".lora_A.weight", M + ".lora_B.weight"
HEAD = ["head.weight", "head.bias"]


def _setup(cls=RoLoRA, r=1, ranks=(1, 1), **cfg):
    """One block of d = 2 (LoRA A (r, 2), B (2, r)), scaling 1, one client per entry of ``ranks``."""
    s = method_setup(cls, [(t, 1, k) for t, k in enumerate(ranks)],
                     cls.config_cls(lora_r=r, lora_alpha=float(r), **cfg), plan_round=None, r=r, alpha=float(r), d=2, n_blocks=1)
    return s.am, s.m, s.state


def _plans(m, state, rnd, clients=None):
    profiles = [p for c, p in m.ctx.profiles.items() if clients is None or c in clients]
    return m.plan(rnd, profiles, state, np.random.default_rng(rnd))


def test_registered_and_starts_from_b_zero_training_b_first():
    assert METHODS.get("rolora") is RoLoRA and METHODS.get("rolora_het") is RoLoRAHet
    am, m, state = _setup()
    assert not state.tensors[B0].any()
    for rnd, factor, key in ((1, "B", B0), (2, "A", A0), (3, "B", B0)):
        for plan in _plans(m, state, rnd).values():
            assert plan.factor == factor
            assert set(m.upload_keys(plan)) == {key, *HEAD}
            (phase,) = m.local_phases(plan)
            assert set(phase.trainable) == {key, *HEAD}
    state.tensors[B0] = torch.ones_like(state.tensors[B0])
    with pytest.raises(ValueError, match="starts from B = 0"):
        m.init_state(state.tensors)


def test_a_method_that_would_train_a_first_is_refused():
    class AFirst(RoLoRA):
        def trained_factor(self, rnd):
            return "A" if rnd % 2 else "B"

    am, m, state = _setup(AFirst)
    with pytest.raises(AssertionError, match="round 1 must train B"):
        _plans(m, state, 1)


def test_with_b_zero_the_gradient_of_a_is_exactly_zero(tiny_am):
    """dL/dA = s B^T (dL/dh) x^T: zero while B = 0, so an A-round from the init would learn nothing."""
    am = tiny_am(r=2, d=4, n_blocks=2)
    params = am.set_trainable([k for k in am.all_keys if "lora" in k])
    am.model(torch.randn(5, 4)).square().sum().backward()
    grads = {k: am.param(k).grad for k in am.all_keys if "lora" in k}
    assert all(not g.any() for k, g in grads.items() if "lora_A" in k)
    assert any(g.any() for k, g in grads.items() if "lora_B" in k)  # B does learn
    assert len(params) == 4


def test_spec_hand_check_the_average_of_b_is_exact():
    """Spec: shared A = [[1, 0]], B_1 = [[2], [0]], B_2 = [[4], [2]], p = (0.5, 0.5):
    B_bar = [[3], [1]] and B_bar A = [[3, 0], [1, 0]] = 0.5 B_1 A + 0.5 B_2 A; with examples
    1 : 3, B_bar = (1 B_1 + 3 B_2) / 4 = [[3.5], [1.5]]. A is untouched."""
    am, m, state = _setup()
    a = torch.tensor([[1.0, 0.0]])
    state.tensors[A0] = a
    plans = _plans(m, state, 1)
    b1, b2 = torch.tensor([[2.0], [0.0]]), torch.tensor([[4.0], [2.0]])
    head = {k: state.tensors[k] for k in HEAD}
    for (n1, n2), want in (((10, 10), [[3.0], [1.0]]), ((1, 3), [[(1 * 2 + 3 * 4) / 4], [(1 * 0 + 3 * 2) / 4]])):
        ups = [ClientUpdate(0, {B0: b1, **head}, n1, plans[0]), ClientUpdate(1, {B0: b2, **head}, n2, plans[1])]
        new = m.aggregate(state, ups)
        assert new.tensors[B0].tolist() == want
        assert torch.equal(new.tensors[A0], a)
    new = m.aggregate(state, [ClientUpdate(0, {B0: b1, **head}, 1, plans[0]), ClientUpdate(1, {B0: b2, **head}, 1,
                                                                                                plans[1])])
    assert (new.tensors[B0] @ a).tolist() == [[3.0, 0.0], [1.0, 0.0]]
    assert torch.equal(new.tensors[B0] @ a, 0.5 * (b1 @ a) + 0.5 * (b2 @ a))


def test_down_traffic_is_the_factors_changed_since_the_client_last_had_the_model():
    """Round 1: the head only (the seeded init is known); round 2, client 0 of round 1: B (changed
    in round 1); round 3, client 1, absent in round 2: A and B. Up: the trained factor + head."""
    am, m, state = _setup(r=2, ranks=(2, 2))
    head, a, b = (tensor_bytes({k: state.tensors[k] for k in ks}) for ks in (HEAD, [A0], [B0]))

    def down_up(state, rnd, client):
        plan = _plans(m, state, rnd, [client])[client]
        pay = m.client_payload(state, plan)
        up = {k: pay[k] for k in m.upload_keys(plan)}
        t = m.traffic(plan, pay, up)
        return plan, up, t.down_bytes, t.up_bytes

    plan, up, down, upb = down_up(state, 1, 0)
    assert (down, upb) == (head, b + head)
    state = m.aggregate(state, [ClientUpdate(0, up, 1, plan), ClientUpdate(1, up, 1, _plans(m, state, 1, [1])[1])])
    plan, up, down, upb = down_up(state, 2, 0)
    assert (down, upb) == (head + b, a + head)
    state = m.aggregate(state, [ClientUpdate(0, up, 1, plan)])  # client 1 sat round 2 out
    assert down_up(state, 3, 1)[2] == head + a + b
    assert down_up(state, 3, 0)[2] == head + a


def test_het_trains_the_leading_ranks_and_averages_each_over_its_trainers():
    """R = 2, tier ranks 1 and 2; round 1 (B, 2 x 2): client 0 trains column 0 (delta 2), client 1 both
    (deltas 4, 6), examples 1 : 3. Column 0: (1*2 + 3*4) / 4 = 3.5, column 1 only client 1's: 6."""
    am, m, state = _setup(RoLoRAHet, r=2, ranks=(1, 2))
    plans = _plans(m, state, 1)
    assert plans[0].extra[RANKS] == {M: [0]} and plans[1].extra[RANKS] == {M: [0, 1]}
    (phase,) = m.local_phases(plans[0])
    assert phase.trained_slices == ((B0, 1, (0,)),)  # column 0 of B
    head = {k: state.tensors[k] for k in HEAD}
    ups = [ClientUpdate(0, {B0: torch.tensor([[2.0, 0.0], [2.0, 0.0]]), **head}, 1, plans[0]),
           ClientUpdate(1, {B0: torch.tensor([[4.0, 6.0], [4.0, 6.0]]), **head}, 3, plans[1])]
    new = m.aggregate(state, ups)
    assert new.tensors[B0].tolist() == [[(1 * 2 + 3 * 4) / 4, 6.0]] * 2
    # up: head + the selection (1 byte per rank) + the selected columns of B only (2 floats each)
    t = m.traffic(plans[0], m.client_payload(state, plans[0]), ups[0].tensors)
    assert t.up_bytes == tensor_bytes(head) + 2 + 1 * 2 * 4
    assert t.up_bytes <= m.upload_budget(plans[0]) == tensor_bytes(head) + 2 + 1 * 2 * 4


class OverBudget(RoLoRAHet):
    """RoLoRA-het whose clients send every rank whatever their budget: a bug the loop must catch."""

    def client_extra(self, profile, state, factor):
        return {**super().client_extra(profile, state, factor), RANKS: {m: list(range(self.r_max))
                                                                        for m in self.modules}}


def test_the_round_loop_refuses_an_upload_over_the_budget(tmp_path):
    METHODS.register("test_over_budget", "test-only: sends more than its upload budget")(OverBudget)
    try:
        run = dict(rounds=1, clients=3, per_round=3, roc="1:1:1", seed=0, out=str(tmp_path))
        rec, _ = Experiment("test_over_budget", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
        ok, _ = Experiment("rolora_het", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    finally:
        METHODS.remove("test_over_budget")
    assert rec["status"] == "failed" and "over its upload budget" in rec["error"]
    assert ok["status"] == "ok", ok["error"]


def test_fedbench_list_shows_each_as_a_variant_of_its_paper():
    """Every rule not read in the paper is named in the description ``fedbench list`` prints."""
    described = {e.key: e.description for e in METHODS.entries()}
    for key in ("rolora", "rolora_het", "lora_a2"):
        assert described[key].endswith(")") and "(variant: " in described[key], key
