"""FFA-LoRA: A identical on every client and in every round, B averaged exactly, the
heterogeneous-rank variant's two means, traffic, its own learning rate."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, tensor_bytes
from fedbench.methods.ffa_lora import FFA_LR_SCALE, FFALoRA, FFALoRAConfig
from fedbench.runners.core.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS
from helpers import method_setup

M = "blocks.0.fc"
A0, B0 = M + ".lora_A.weight", M + ".lora_B.weight"
ALPHA = 8.0
S = ALPHA / 4


def _setup(tiers, **kw):
    return method_setup(FFALoRA, [(t, 3, r) for t, r in enumerate(tiers)],
                        FFALoRAConfig(lora_r=4, lora_alpha=ALPHA, **kw), alpha=ALPHA)


def _trained(m, state, plans, sizes, seed=4):
    """Each client's upload: a random B of its rank and a shifted head (what training sends)."""
    g = torch.Generator().manual_seed(seed)
    ups = []
    for c, n in enumerate(sizes):
        t = {k: state.tensors[k] + 1.0 for k in m.ctx.head_keys}
        for mod in m.modules:
            t[mod + ".lora_B.weight"] = torch.randn(4, plans[c].rank, generator=g)
        assert set(t) == set(m.upload_keys(plans[c]))
        ups.append(ClientUpdate(c, t, n, plans[c]))
    return ups


def test_registered_trains_only_b_and_the_head_at_its_own_lr():
    assert METHODS.get("ffa_lora") is FFALoRA
    am, m, state, plans = _setup([1, 4])
    (phase,) = m.local_phases(plans[0])
    assert not any(k.endswith("lora_A.weight") for k in phase.trainable)
    assert set(phase.trainable) == {f"blocks.{j}.fc.lora_B.weight" for j in range(3)} | {"head.weight", "head.bias"}
    assert phase.lr_scale == FFA_LR_SCALE == 10.0
    assert all(p.rank == 4 for p in plans.values())  # ranks='global': the paper's homogeneous rank


def test_a_is_identical_across_clients_and_rounds_and_the_mean_is_exact():
    am, m, state, plans = _setup([4, 4, 4])
    a_init = state.tensors[A0].clone()
    for rnd in range(3):
        for c in plans:
            assert torch.equal(m.client_payload(state, plans[c])[A0], a_init)
        ups = _trained(m, state, plans, [1, 2, 3], seed=rnd)
        new = m.aggregate(state, ups)
        assert torch.equal(new.tensors[A0], a_init)
        # exact: sum_k p_k s B_k A = s B_bar A (the clients' mean update is the global one)
        mean_update = sum(u.n_examples / 6 * S * u.tensors[B0] @ a_init for u in ups)
        assert torch.allclose(S * new.tensors[B0] @ new.tensors[A0], mean_update, atol=1e-6)
        assert torch.allclose(new.tensors[B0], (1 * ups[0].tensors[B0] + 2 * ups[1].tensors[B0]
                                                + 3 * ups[2].tensors[B0]) / 6, atol=1e-6)
        state = new


def test_a_never_changes_in_a_run(tmp_path):
    run = dict(rounds=2, clients=3, per_round=3, seed=0, out=str(tmp_path), measure_flops=False)
    exp = Experiment("ffa_lora", "tiny_text", run, {"lora_r": 4}, SMALL_TASK_CONFIGS["tiny_text"])
    rec, _ = exp.run()
    assert rec["status"] == "ok"
    a_keys = [k for k in exp.am.all_keys if k.endswith("lora_A.weight")]
    b_keys = [k for k in exp.am.all_keys if k.endswith("lora_B.weight")]
    fresh = exp.pool.fresh(None, a_keys + b_keys)  # the model built from the run's adapter seed
    assert all(torch.equal(exp.state.method.tensors[k], fresh[k]) for k in a_keys)
    assert all(not torch.equal(exp.state.method.tensors[k], fresh[k]) for k in b_keys)  # B did train


def test_tier_ranks_average_b_columns_over_contributors_or_zero_padded():
    am, m, state, plans = _setup([1, 2, 4], ranks="tier")
    assert [plans[c].rank for c in range(3)] == [1, 2, 4] and plans[0].lora_alpha == ALPHA * 1 / 4
    pay = m.client_payload(state, plans[1])
    assert torch.equal(pay[A0], state.tensors[A0][:2]) and pay[B0].shape == (4, 2)
    ups = _trained(m, state, plans, [1, 2, 3])
    b0, b1, b2 = (u.tensors[B0] for u in ups)
    new = m.aggregate(state, ups).tensors[B0]
    assert torch.allclose(new[:, 0], (1 * b0[:, 0] + 2 * b1[:, 0] + 3 * b2[:, 0]) / 6)
    assert torch.allclose(new[:, 1], (2 * b1[:, 1] + 3 * b2[:, 1]) / 5)
    assert torch.allclose(new[:, 2:], b2[:, 2:])
    am, m, state, plans = _setup([1, 2, 4], ranks="tier", het_mean="zero_pad")
    new = m.aggregate(state, _trained(m, state, plans, [1, 2, 3])).tensors[B0]
    assert torch.allclose(new[:, 1], (2 * b1[:, 1] + 3 * b2[:, 1]) / 6)
    assert torch.allclose(new[:, 2:], 3 * b2[:, 2:] / 6)
    a = state.tensors[A0]  # zero-padded = the exact mean of the clients' s B_k A[:r_k]
    want = (1 * S * b0 @ a[:1] + 2 * S * b1 @ a[:2] + 3 * S * b2 @ a) / 6
    assert torch.allclose(S * new @ a, want, atol=1e-6)


def test_traffic_counts_b_and_the_head_and_records_what_is_sent():
    am, m, state, plans = _setup([2, 4], ranks="tier")
    head = 4 * (3 * 4 + 3)
    for c, r in ((0, 2), (1, 4)):
        pay = m.client_payload(state, plans[c])
        up = _trained(m, state, plans, [1, 1])[c].tensors
        t = m.traffic(plans[c], pay, up)
        assert t.down_bytes == t.up_bytes == 4 * 3 * 4 * r + head  # 3 modules x B (d_out x r_k) + head
        assert t.down_variants[m.SENT_LABEL] == tensor_bytes(pay) == t.down_bytes + 4 * 3 * r * 4  # + A


def test_local_training_uses_ffa_own_learning_rate(tmp_path):
    """One SGD step from B = 0 on one client: B moves lr_scale times as far as at scale 1."""
    run = dict(rounds=1, clients=1, per_round=1, max_steps=1, optimizer="sgd", lr=0.01, seed=0,
               measure_flops=False)
    b = {}
    for scale in (1.0, 10.0):
        exp = Experiment("ffa_lora", "tiny_text", {**run, "out": str(tmp_path / str(scale))},
                         {"lora_r": 4, "lr_scale": scale}, SMALL_TASK_CONFIGS["tiny_text"])
        assert exp.run()[0]["status"] == "ok"
        b[scale] = exp.state.method.tensors[next(k for k in exp.am.all_keys if k.endswith("lora_B.weight"))]
    assert torch.count_nonzero(b[1.0]) > 0
    assert torch.allclose(b[10.0], 10 * b[1.0], rtol=1e-4)
