"""LoRA-FAIR: the server's correction of B by hand (one SGD step, the ridge variant), the
cosine never drops, lambda -> infinity is FedIT."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.aggregation import fair_correction, flat_cosine, ridge_correction, weighted_mean_by_key
from fedbench.methods.base import ClientUpdate
from fedbench.methods.lora_fair import LoRAFair, LoRAFairConfig
from helpers import method_setup

M = "blocks.0.fc"
A0, B0 = M + ".lora_A.weight", M + ".lora_B.weight"


def _factors(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 5, generator=g), torch.randn(3, 2, generator=g), torch.randn(3, 5, generator=g)


def test_one_sgd_step_from_zero_is_the_cosine_gradient():
    """In units of sigma = |T| / |A_bar|: u = dB / sigma steps by lr * sigma * (d cos / d X) A^T
    (X = (B_bar + sigma u) A_bar), so dB = sigma^2 lr (d cos / d X) A^T."""
    a, b, t = _factors()
    x = b @ a  # (3, 5)
    cos = (t * x).sum() / (t.norm() * x.norm())
    grad_x = t / (t.norm() * x.norm()) - cos * x / x.norm() ** 2  # d cos / d X; the lambda term is 0 at dB = 0
    sigma = t.norm() / a.norm()
    db, before, after = fair_correction(a, b, t, lam=0.5, steps=1, lr=0.01)
    assert torch.allclose(db, sigma ** 2 * 0.01 * grad_x @ a.T, atol=1e-6)
    assert abs(float(before) - float(cos)) < 1e-6 and after > before


def test_two_steps_follow_autograd_of_the_objective():
    """The objective in units of sigma: 1 - cos(T, (B_bar + sigma u) A_bar) + lam |u|^2, dB = sigma u."""
    a, b, t = _factors(1)
    lam, lr = 0.5, 0.01
    sigma = t.norm() / a.norm()
    u = torch.zeros_like(b, requires_grad=True)
    opt = torch.optim.SGD([u], lr=lr)
    for _ in range(2):
        opt.zero_grad()
        (1 - flat_cosine(t, (b + sigma * u) @ a) + lam * u.square().sum()).backward()
        opt.step()
    got, _, _ = fair_correction(a, b, t, lam=lam, steps=2, lr=lr)
    assert torch.allclose(got, sigma * u.detach(), atol=1e-6)


def test_the_solve_is_scale_free():
    """The same problem at the size of realistic updates (|dW| ~ 1e-3) and x1000: dB scales by
    1000 and the cosines are equal; scaling A_bar and the target by 10 leaves dB as it was.
    The correction stays of B_bar's order at both sizes (the absolute solver gave |dB| = 3 |B_bar|
    at 1e-3 and dB = 0 at x1000: audit, 2026-11-28)."""
    a, b, t = _factors(4)
    small = 1e-3 / t.norm()
    a_s, b_s, t_s = a, b * small, t * small  # |T| = 1e-3
    db, before, after = fair_correction(a_s, b_s, t_s, lam=0.01, steps=100, lr=0.01)
    big, before_big, after_big = fair_correction(a_s, 1000 * b_s, 1000 * t_s, lam=0.01, steps=100, lr=0.01)
    assert torch.allclose(big, 1000 * db, rtol=1e-4, atol=0)
    assert torch.isclose(after, after_big, atol=1e-6) and torch.isclose(before, before_big, atol=1e-6)
    wide, _, after_wide = fair_correction(10 * a_s, b_s, 10 * t_s, lam=0.01, steps=100, lr=0.01)
    assert torch.allclose(wide, db, rtol=1e-4, atol=0) and torch.isclose(after, after_wide, atol=1e-6)
    assert after > before and db.norm() < b_s.norm()


def test_ridge_variant_by_hand():
    a = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])  # A_bar (2, 3): A A^T = diag(1, 4)
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    t = torch.tensor([[3.0, 0.0, 1.0], [0.0, 6.0, 0.0]])
    lam = 0.5
    rhs = (t - b @ a) @ a.T  # [[2, 0], [0, 8]]
    want = torch.tensor([[2.0 / (1 + lam), 0.0], [0.0, 8.0 / (4 + lam)]])  # rhs (A A^T + lam I)^-1
    assert torch.allclose(rhs, torch.tensor([[2.0, 0.0], [0.0, 8.0]]))
    assert torch.allclose(ridge_correction(a, b, t, lam), want)


def test_problems_stacked_on_a_leading_axis_are_solved_independently():
    (a0, b0, t0), (a1, b1, t1) = _factors(2), _factors(3)
    db, before, after = fair_correction(torch.stack([a0, a1]), torch.stack([b0, b1]), torch.stack([t0, t1]),
                                        lam=0.01, steps=20, lr=0.01)
    for i, (a, b, t) in enumerate(((a0, b0, t0), (a1, b1, t1))):
        one, cb, ca = fair_correction(a, b, t, lam=0.01, steps=20, lr=0.01)
        assert torch.allclose(db[i], one, atol=1e-6) and torch.isclose(after[i], ca, atol=1e-6)


def test_cosine_never_drops_and_infinite_lambda_is_no_correction():
    for seed in range(5):
        a, b, t = _factors(seed)
        db, before, after = fair_correction(a, b, t, lam=0.01, steps=100, lr=0.01)
        assert after >= before and torch.count_nonzero(db) > 0
        assert abs(float(after) - float(flat_cosine(t, (b + db) @ a))) < 1e-6
        stiff, before, after = fair_correction(a, b, t, lam=1e8, steps=100, lr=0.01)
        assert torch.equal(stiff, torch.zeros_like(b)) and torch.equal(after, before)
        assert torch.allclose(ridge_correction(a, b, t, 1e8), torch.zeros_like(b), atol=1e-6)


def _setup(**kw):
    _, m, state, plans = method_setup(LoRAFair, [(0, 3, 4)] * 3, LoRAFairConfig(lora_r=4, lora_alpha=8.0, **kw))
    g = torch.Generator().manual_seed(1)
    ups = [ClientUpdate(c, {k: torch.randn(v.shape, generator=g) for k, v in state.tensors.items()}, n, plans[c])
           for c, n in enumerate([1, 2, 5])]
    return m, state, ups


def test_server_corrects_only_b_towards_the_averaged_update():
    assert METHODS.get("lora_fair") is LoRAFair
    m, state, ups = _setup()
    fedit = weighted_mean_by_key(state.tensors, ups, "examples")
    new = m.aggregate(state, ups)
    assert torch.equal(new.tensors[A0], fedit[A0]) and torch.equal(new.tensors["head.bias"], fedit["head.bias"])
    target = (1 * ups[0].tensors[B0] @ ups[0].tensors[A0] + 2 * ups[1].tensors[B0] @ ups[1].tensors[A0]
              + 5 * ups[2].tensors[B0] @ ups[2].tensors[A0]) / 8
    db, before, after = fair_correction(fedit[A0], fedit[B0], target, 0.01, 100, 0.01)
    assert torch.allclose(new.tensors[B0], fedit[B0] + db, atol=1e-6)
    assert after > before
    assert new.extra["cosine"]["after"] >= new.extra["cosine"]["before"]


def test_infinite_lambda_is_fedit():
    for solver in ("sgd", "ridge"):
        m, state, ups = _setup(lam=1e8, solver=solver)
        fedit = weighted_mean_by_key(state.tensors, ups, "examples")
        new = m.aggregate(state, ups).tensors
        assert all(torch.allclose(new[k], fedit[k], atol=1e-6) for k in fedit)
