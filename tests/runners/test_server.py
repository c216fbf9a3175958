"""ServerTools: metering and the per-layer gradient score (Fed-HeLLo's FIM, Eq. 4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.core.server import ServerTools
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, TaskConfig

D, R, ALPHA = 3, 2, 4.0  # width, LoRA rank, alpha (scaling alpha / r = 2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(D, D)

    def forward(self, h):
        return torch.tanh(self.fc(h))


class TinyNet(nn.Module):
    def __init__(self, depth: int = 3):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
        self.head = nn.Linear(D, 2)

    def forward(self, x):
        return self.head(self.blocks(x))


class TinyTask(ClassificationTask):
    def forward(self, model, batch):
        return model(batch["x"])


def make_server(n_proxy: int = 5):
    torch.manual_seed(0)
    bundle = ModelBundle(TinyNet(), "blocks", {"qv": ["fc"]}, ["head"], default_target="qv")
    am = AdapterModel(bundle, R, ALPHA, 0.0, "qv")
    g = torch.Generator().manual_seed(1)
    tensors = {k: torch.randn(am.param(k).shape, generator=g) for k in am.all_keys}  # B != 0: A gets gradient
    am.load(tensors)
    proxy = ArrayDataset({"x": torch.randn(n_proxy, D, generator=g), "y": torch.tensor([0, 1, 1, 0, 1][:n_proxy])})
    return ServerTools(am, TinyTask(TaskConfig()), proxy, torch.device("cpu")), am, tensors, proxy


def hand_scores(am: AdapterModel, tensors, proxy) -> tuple[dict[int, float], dict[int, float]]:
    """The model written out by hand: h <- tanh(h (W0 + s B A)^T + b) per block, then the head.
    Returns (mean over examples of per-example ||grad||^2, ||grad of the batch-mean loss||^2)."""
    params = dict(am.model.named_parameters())
    s = ALPHA / R
    W0 = [params[f"blocks.{j}.fc.base_layer.weight"].detach() for j in range(3)]
    b = [params[f"blocks.{j}.fc.base_layer.bias"].detach() for j in range(3)]
    A = [tensors[f"blocks.{j}.fc.lora_A.weight"].clone().requires_grad_(True) for j in range(3)]  # (r, d)
    B = [tensors[f"blocks.{j}.fc.lora_B.weight"].clone().requires_grad_(True) for j in range(3)]  # (d, r)
    Wh, bh = tensors["head.weight"], tensors["head.bias"]

    def loss(x, y):  # x (n, d), y (n,)
        h = x
        for j in range(3):
            h = torch.tanh(h @ (W0[j] + s * B[j] @ A[j]).T + b[j])
        return nn.functional.cross_entropy(h @ Wh.T + bh, y)

    x, y = proxy.tensors["x"], proxy.tensors["y"]
    per_example = {j: 0.0 for j in range(3)}
    for i in range(len(y)):
        grads = torch.autograd.grad(loss(x[i : i + 1], y[i : i + 1]), A + B)
        for j in range(3):
            per_example[j] += float(grads[j].pow(2).sum() + grads[3 + j].pow(2).sum()) / len(y)
    grads = torch.autograd.grad(loss(x, y), A + B)
    batch = {j: float(grads[j].pow(2).sum() + grads[3 + j].pow(2).sum()) for j in range(3)}
    return per_example, batch


def test_layer_grad_sq_norms_equals_hand_computation():
    server, am, tensors, proxy = make_server()
    expected, batch_version = hand_scores(am, tensors, proxy)
    am.param("head.weight").requires_grad_(True)  # some prior state the helper must restore
    am.model.train()
    got = server.layer_grad_sq_norms(tensors, am.layer_keys)
    assert set(got) == {0, 1, 2}
    for j in range(3):
        assert got[j] == pytest.approx(expected[j], rel=1e-5)
    # the per-example mean is not the batch gradient's norm: a batched helper would fail here
    assert any(abs(batch_version[j] - expected[j]) > 1e-3 * expected[j] for j in range(3))
    assert am.param("head.weight").requires_grad
    assert not am.param("blocks.0.fc.lora_A.weight").requires_grad
    assert am.model.training
    assert server.flops > 0 and server.seconds > 0


def test_layer_grad_sq_norms_needs_a_proxy():
    server, am, tensors, _ = make_server()
    server.proxy = None
    with pytest.raises(RuntimeError, match="proxy"):
        server.layer_grad_sq_norms(tensors, am.layer_keys)


def test_metered_counts_flops_and_nested_blocks_once():
    server, *_ = make_server()
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with server.metered():
        a @ b
    once = server.flops
    assert once == 2 * 8 * 16 * 4
    with server.metered():
        with server.metered():
            a @ b
    assert server.flops == 2 * once


def test_flops_of_score_pass_scale_with_proxy_size():
    small, am_s, t_s, _ = make_server(2)
    small.layer_grad_sq_norms(t_s, am_s.layer_keys)
    big, am_b, t_b, _ = make_server(4)
    big.layer_grad_sq_norms(t_b, am_b.layer_keys)
    assert np.isclose(big.flops, 2 * small.flops)
