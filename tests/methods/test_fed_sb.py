"""Fed-SB: the sign-gradient init by hand, from the clients' summed gradients (federated,
not pooled), the B R A forward, only R trained and averaged, traffic."""

import numpy as np
import torch
from torch.nn import functional as F

from fedbench.methods import METHODS
from fedbench.methods.aggregation import sign_gradient_factors
from fedbench.methods.base import ClientUpdate, tensor_bytes
from fedbench.methods.fed_sb import GRAD_SFX, INIT, QUOTA, FedSB, FedSBConfig
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS
from helpers import method_setup

M = "blocks.0.fc"
A0, B0, W0 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
R0 = "fedbench_extra.fed_sb.0"


def test_sign_gradient_factors_by_hand():
    g = torch.tensor([[1.0, -2.0, 0.5], [-3.0, 4.0, 1.0]])  # (d_out 2, d_in 3)
    g_hat = -0.1 * torch.tensor([[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]])  # -eta sign(G)
    a, b, r0 = sign_gradient_factors(g, r=2, step=0.1, scaling=0.5)
    assert a.shape == (2, 3) and b.shape == (2, 2) and r0.shape == (2, 2)
    assert torch.allclose(0.5 * b @ r0 @ a, g_hat, atol=1e-6)  # full rank: s B R0 A = G_hat
    assert torch.allclose(a @ a.T, torch.eye(2), atol=1e-6) and torch.allclose(b.T @ b, torch.eye(2), atol=1e-6)
    assert torch.equal(r0, torch.diag(torch.diagonal(r0)))
    a1, b1, r1 = sign_gradient_factors(g, r=1, step=0.1, scaling=0.5)
    u, s, vh = torch.linalg.svd(g_hat)
    assert torch.allclose(0.5 * b1 @ r1 @ a1, s[0] * torch.outer(u[:, 0], vh[0]), atol=1e-6)  # best rank 1


def _setup(n=2):
    cfg = FedSBConfig(lora_r=4, lora_alpha=2.0, init_step=0.1, grad_samples=8)
    return method_setup(FedSB, [(0, 3, 4)] * n, cfg, extras=True, r=4, alpha=2.0)  # s = 1 / 2


def test_registered_init_round_trains_nothing_then_only_r_and_the_head():
    assert METHODS.get("fed_sb") is FedSB
    am, m, state, plans = _setup()
    assert plans[0].extra[INIT] and plans[0].extra[QUOTA] == 4  # 8 examples split over two equal clients
    assert m.local_phases(plans[0]) == () and m.upload_keys(plans[0]) == []
    assert torch.equal(state.tensors[R0], torch.eye(4))
    ups = [ClientUpdate(c, {mod + GRAD_SFX: torch.ones(4, 4) for mod in m.modules}, 10, plans[c]) for c in (0, 1)]
    state = m.aggregate(state, ups)
    plans = m.plan(2, list(m.ctx.profiles.values()), state, np.random.default_rng(0))
    (phase,) = m.local_phases(plans[0])
    assert set(phase.trainable) == set(m.r_keys) | {"head.weight", "head.bias"} == set(m.upload_keys(plans[0]))


def test_init_uses_the_sign_of_the_summed_client_gradients():
    am, m, state, plans = _setup()
    g1 = torch.ones(4, 4)
    g2 = torch.zeros(4, 4)
    g2[0, 0] = -3.0  # the sum's sign at (0, 0) is -1; the sum of the signs would be 0
    ups = [ClientUpdate(c, {mod + GRAD_SFX: g for mod in m.modules}, 10, plans[c]) for c, g in ((0, g1), (1, g2))]
    new = m.aggregate(state, ups).tensors
    want = -0.1 * torch.sign(g1 + g2)  # G_hat of G = G_1 + G_2
    assert torch.allclose(0.5 * new[B0] @ new[R0] @ new[A0], want, atol=1e-5)  # rank(G_hat) <= 4 = r: exact
    assert torch.equal(new["head.bias"], state.tensors["head.bias"])  # nobody trained the head


def test_forward_is_w0_plus_s_b_r_a():
    am, m, state, plans = _setup()
    g = torch.Generator().manual_seed(0)
    tensors = {k: torch.randn(v.shape, generator=g) for k, v in state.tensors.items()}
    am.load(tensors)
    m.install(am.model)
    m.install(am.model)  # once per model: a second call adds no second hook
    x = torch.randn(3, 4, generator=g)
    with torch.no_grad():
        got = am.model(x)
        h = x
        for j in range(3):
            mod = f"blocks.{j}.fc"
            w = am.model.blocks[j].fc.base_layer
            delta = 0.5 * tensors[mod + ".lora_B.weight"] @ tensors[f"fedbench_extra.fed_sb.{j}"] \
                @ tensors[mod + ".lora_A.weight"]
            h = h + F.linear(h, w.weight + delta, w.bias)
        want = F.linear(h, tensors["head.weight"], tensors["head.bias"])
    assert torch.allclose(got, want, atol=1e-5)


class _Task:
    """The smallest task: cross-entropy of the model on {"x", "y"} batches."""

    def loss(self, model, batch):
        logits = model(batch["x"])
        return F.cross_entropy(logits, batch["y"]), logits


def test_client_sends_its_summed_dense_gradient_over_its_quota():
    am, m, state, plans = _setup()
    g = torch.Generator().manual_seed(1)
    batches = [{"x": torch.randn(3, 4, generator=g), "y": torch.tensor([0, 1, 2])} for _ in range(3)]
    stats = m.client_statistics(_Task(), am.model, lambda: iter(batches), plans[0])  # quota 4: two batches of 3
    w = am.model.blocks[1].fc.base_layer.weight
    assert not w.requires_grad and w.grad is None  # left as found
    w.requires_grad_(True)
    sum(F.cross_entropy(am.model(b["x"]), b["y"], reduction="sum") for b in batches[:2]).backward()
    assert torch.allclose(stats["blocks.1.fc" + GRAD_SFX], w.grad, atol=1e-5)
    w.grad = None
    w.requires_grad_(False)


def test_traffic_init_round_then_factors_once_then_r():
    am, m, state, plans = _setup()
    head = 4 * (3 * 4 + 3)
    ups = [ClientUpdate(c, {mod + GRAD_SFX: torch.ones(4, 4) for mod in m.modules}, 10, plans[c]) for c in (0, 1)]
    t = m.traffic(plans[0], m.client_payload(state, plans[0]), ups[0].tensors)
    assert t.down_bytes == head and t.up_bytes == 4 * 3 * 4 * 4  # dense 4 x 4 gradient per module
    state = m.aggregate(state, ups)
    for rnd, first in ((2, True), (3, False)):
        plans = m.plan(rnd, [m.ctx.profiles[0]], state, np.random.default_rng(0))
        pay = m.client_payload(state, plans[0])
        up = {k: pay[k] for k in m.upload_keys(plans[0])}
        t = m.traffic(plans[0], pay, up)
        r_part = 4 * 3 * 4 * 4  # 3 modules x R (4 x 4)
        assert t.down_bytes == head + r_part + (4 * 3 * 4 * (4 + 4) if first else 0)  # + B, A once
        assert t.up_bytes == head + r_part and t.down_variants[m.SENT_LABEL] == tensor_bytes(pay)
        state = m.aggregate(state, [ClientUpdate(0, up, 10, plans[0])])


class _States(Callback):
    def __init__(self):
        self.states = []

    def on_round_end(self, log, state):
        self.states.append({k: v.clone() for k, v in state.method.tensors.items()})


def test_b_and_a_stay_fixed_after_the_init_round_and_r_trains(tmp_path):
    keep = _States()
    run = dict(rounds=3, clients=3, per_round=3, seed=0, out=str(tmp_path), measure_flops=False)
    rec, _ = Experiment("fed_sb", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"],
                        callbacks=[keep]).run()
    assert rec["status"] == "ok" and rec["results"]["curve"][0]["train_loss"] is None  # round 1 trains nothing
    first, last = keep.states[0], keep.states[-1]
    lora = [k for k in first if k.endswith(("lora_A.weight", "lora_B.weight"))]
    rs = [k for k in first if k.startswith("fedbench_extra.fed_sb.")]
    assert all(torch.equal(first[k], last[k]) for k in lora)
    assert all(torch.count_nonzero(first[k]) > 0 for k in lora)
    assert all(not torch.equal(first[k], last[k]) for k in rs)
