"""fedlora_math on hand-built tensors; expected values written as arithmetic."""

import math

import pytest
import torch

from fedbench.methods import fedlora_math as fm
from fedbench.methods.aggregation import per_class_average, weighted_mean_by_key
from fedbench.methods.base import ClientPlan, ClientUpdate


def ce(logits, label):
    """Cross-entropy of one row, from the definition."""
    return -math.log(math.exp(logits[label]) / sum(math.exp(v) for v in logits))


def kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def softmax(v):
    e = [math.exp(a) for a in v]
    return [a / sum(e) for a in e]


# ------------------------------------------------------------------------------ FedLoRA
def test_fedlora_eq5_weights_the_two_cross_entropies():
    local, adapter, y = [[2.0, 0.0]], [[0.0, 1.0]], torch.tensor([0])
    got = fm.fedlora_local_loss(torch.tensor(local), torch.tensor(adapter), y, mu=0.7)
    assert got.item() == pytest.approx(0.7 * ce(local[0], 0) + 0.3 * ce(adapter[0], 0), rel=1e-6)
    assert fm.fedlora_local_loss(torch.tensor(local), torch.tensor(adapter), y, mu=0.0).item() == \
        pytest.approx(ce(adapter[0], 0), rel=1e-6)


def test_matrix_decomposition_adapter_is_a_rank_r_linear_map():
    torch.manual_seed(0)
    a = fm.MatrixDecompositionAdapter(500, 3, 10)
    h = torch.randn(4, 500)
    assert torch.linalg.matrix_rank(a.weight()).item() == 3 and a.weight().shape == (10, 500)
    assert torch.allclose(a(h), h @ a.weight().T + a.up.bias, atol=1e-5)
    assert sum(p.numel() for p in a.parameters()) == 500 * 3 + 3 * 10 + 10


def test_direct_reduction_adapter_mirrors_fc2_relu_fc3():
    a = fm.DirectReductionAdapter(4, 2, 3)
    with torch.no_grad():
        a.reduce.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, -1.0, 0, 0]]))
        a.reduce.bias.zero_()
        a.out.weight.copy_(torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0]]))
        a.out.bias.zero_()
    h = torch.tensor([[5.0, 2.0, 0.0, 0.0]])  # reduce -> [5, -2] -> relu -> [5, 0]
    assert a(h).tolist() == [[5.0 + 0.0, 2 * 5.0, 3 * 0.0]]


def test_adapter_fedavg_is_weighted_mean_by_key():
    """FedLoRA Eq. 10 reuses aggregation.weighted_mean_by_key with example counts."""
    w0, w1 = torch.tensor([1.0, 4.0]), torch.tensor([3.0, 0.0])
    ups = [ClientUpdate(c, {"adapter.up.weight": w}, n, ClientPlan(c, 0, ())) for c, w, n in ((0, w0, 1), (1, w1, 2))]
    out = weighted_mean_by_key({"adapter.up.weight": torch.zeros(2)}, ups, "examples")
    assert torch.allclose(out["adapter.up.weight"], (w0 * 1 + w1 * 2) / 3)


# ------------------------------------------------------------------ per-class statistics
def test_class_means_and_counts():
    logits = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 9.0]])
    means, counts = fm.class_mean_logits(logits, torch.tensor([0, 0, 2]), 3)
    assert counts.tolist() == [2, 0, 1]
    assert means.tolist() == [[(1 + 3) / 2, (2 + 4) / 2, 0.0], [0.0, 0.0, 0.0], [5.0, 6.0, 9.0]]


def test_per_class_average_weights_by_count_and_leaves_out():
    m = torch.tensor([[[1.0], [10.0]], [[4.0], [0.0]]])  # (K=2, C=2, D=1)
    n = torch.tensor([[1, 3], [2, 0]])  # client 1 has no class-1 examples
    g, tot = per_class_average(m, n)
    assert torch.allclose(g, torch.tensor([[(1 * 1 + 4 * 2) / 3], [10.0]]))
    assert tot.tolist() == [3, 3]
    g0, tot0 = per_class_average(m, n, leave_out=0)
    assert g0.tolist() == [[4.0], [0.0]] and tot0.tolist() == [2, 0]
    # the means of two batches combine to the mean of their union
    x, y = torch.tensor([[1.0], [2.0], [6.0]]), torch.tensor([0, 0, 0])
    b = [fm.class_means(x[:1], y[:1], 1), fm.class_means(x[1:], y[1:], 1)]
    both, _ = per_class_average(torch.stack([b[0][0], b[1][0]]), torch.stack([b[0][1], b[1][1]]))
    assert both.item() == pytest.approx((1 + 2 + 6) / 3)


# ---------------------------------------------------------------------------------- FD
def test_fd_distill_is_kl_to_the_global_logits_of_the_label():
    z = [[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]]
    g = [[2.0, 0.0], [0.0, 1.0]]
    y = torch.tensor([0, 1, 1])
    counts = torch.tensor([4.0, 0.0])  # class 1 has no global logits: only example 0 counts
    got = fm.fd_distill_loss(torch.tensor(z), y, torch.tensor(g), counts)
    assert got.item() == pytest.approx(kl(softmax(g[0]), softmax(z[0])), rel=1e-5)
    all_on = fm.fd_distill_loss(torch.tensor(z), y, torch.tensor(g), torch.tensor([1.0, 1.0]))
    expect = (kl(softmax(g[0]), softmax(z[0])) + kl(softmax(g[1]), softmax(z[1])) + kl(softmax(g[1]), softmax(z[2]))) / 3
    assert all_on.item() == pytest.approx(expect, rel=1e-5)
    assert fm.fd_distill_loss(torch.tensor(g), torch.tensor([0, 1]), torch.tensor(g), counts + 1).item() == \
        pytest.approx(0.0, abs=1e-7)


# ---------------------------------------------------------------------------- FedProto
def test_proto_loss_and_nearest_prototype():
    f = torch.tensor([[1.0, 2.0], [0.0, 0.0], [9.0, 9.0]])
    P = torch.tensor([[0.0, 0.0], [3.0, 4.0], [100.0, 100.0]])
    y = torch.tensor([0, 1, 2])
    counts = torch.tensor([1.0, 2.0, 0.0])  # class 2 has no global prototype
    got = fm.proto_loss(f, y, P, counts, lam=0.5)
    assert got.item() == pytest.approx(0.5 * ((1 + 4) / 2 + (9 + 16) / 2) / 2)  # mean over the D = 2 dims too
    pred = fm.nearest_prototype(f, P, counts)
    assert pred.tolist() == [0, 0, 1]  # (9, 9) is nearest to (100, 100) but class 2 is absent
    assert fm.proto_loss(f[2:], y[2:], P, counts, 1.0).item() == 0.0


def test_nearest_prototype_is_squared_l2_not_l1():
    """A feature at the origin, prototypes (3, 0) and (2, 2): squared L2 3^2 = 9 > 2^2 + 2^2 = 8,
    so class 1 is nearest; in L1 (3 < 2 + 2) it would be class 0. The distances FedProto's
    evaluation reads (``prototype_distances``, ``top1_proto``) are those squared L2s."""
    f = torch.tensor([[0.0, 0.0]])
    P = torch.tensor([[3.0, 0.0], [2.0, 2.0]])
    counts = torch.tensor([1.0, 1.0])
    want = torch.tensor([[3.0 ** 2, 2.0 ** 2 + 2.0 ** 2]])
    assert torch.allclose(fm.prototype_distances(f, P, counts), want, rtol=1e-6)  # cdist's sqrt, squared
    assert fm.nearest_prototype(f, P, counts).tolist() == [1]


# ------------------------------------------------------------------------- FML, FedKD
def test_fml_losses():
    a, b = [[1.0, 0.0]], [[0.0, 3.0]]
    local, meme = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y = torch.tensor([0])
    l_local, l_meme = fm.fml_losses(local, meme, y, alpha=0.5, beta=0.25)
    assert l_local.item() == pytest.approx(0.5 * ce(a[0], 0) + 0.5 * kl(softmax(b[0]), softmax(a[0])), rel=1e-5)
    assert l_meme.item() == pytest.approx(0.25 * ce(b[0], 0) + 0.75 * kl(softmax(a[0]), softmax(b[0])), rel=1e-5)
    l_local.backward()
    assert meme.grad is None  # the local loss does not train the meme model


def test_fedkd_adaptive_weight():
    t, s = [[2.0, 0.0]], [[0.5, 0.0]]
    y = torch.tensor([0])
    l_t, l_s = fm.fedkd_losses(torch.tensor(t), torch.tensor(s), y)
    w = 1 / (ce(t[0], 0) + ce(s[0], 0))
    assert l_t.item() == pytest.approx(ce(t[0], 0) + w * kl(softmax(s[0]), softmax(t[0])), rel=1e-5)
    assert l_s.item() == pytest.approx(ce(s[0], 0) + w * kl(softmax(t[0]), softmax(s[0])), rel=1e-5)
    ht, hs = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 1.0]])
    l_t2, l_s2 = fm.fedkd_losses(torch.tensor(t), torch.tensor(s), y, ht, hs)
    mse = ((1 - 0) ** 2 + (3 - 1) ** 2) / 2
    assert (l_t2 - l_t).item() == pytest.approx(w * mse, rel=1e-5)
    assert (l_s2 - l_s).item() == pytest.approx(w * mse, rel=1e-5)


def test_svd_compress_keeps_the_energy():
    w = torch.diag(torch.tensor([3.0, 2.0, 1.0]))  # energies 9, 4, 1 of 14
    u, s, vh = fm.svd_compress(w, 0.9)  # 9/14 < 0.9 <= 13/14: two values
    assert s.tolist() == [3.0, 2.0]
    assert torch.allclose(u @ torch.diag(s) @ vh, torch.diag(torch.tensor([3.0, 2.0, 0.0])), atol=1e-6)
    assert len(fm.svd_compress(w, 1.0)[1]) == 3 and len(fm.svd_compress(w, 9 / 14)[1]) == 1


# --------------------------------------------------------------------------- LG-FedAvg
def test_lg_fedavg_split_by_prefix():
    from fedbench.tasks.cnn import cnn

    keys = list(cnn(2, 1, 10).state_dict()) + ["header.weight"]
    local, shared = fm.split_keys(keys)
    assert shared == ["head.weight", "head.bias"]
    assert "header.weight" in local and "fc.1.linear.weight" in local and "convs.0.weight" in local
    assert sorted(local + shared) == sorted(keys)
    assert fm.split_keys(keys, ("fc.1.", "head"))[1] == ["fc.1.linear.weight", "fc.1.linear.bias", "head.weight",
                                                         "head.bias"]
