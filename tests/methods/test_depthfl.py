"""DepthFL: classifiers per block group, the self-distillation loss against a hand
computation, owner averaging, and evaluation by the ensemble and by the last head."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate
from fedbench.methods.depth_hetero import DepthFL, DepthFLConfig, depthfl_loss, exit_blocks, kd_weight
from fedbench.runners.core.evaluation import Evaluator
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.base import ArrayDataset, ClassificationTask, TaskConfig
from helpers import method_setup, plain_state


class _Task(ClassificationTask):
    """x (B, 4) -> the tiny net's logits; block outputs are (B, 4) features already."""

    def __init__(self):
        super().__init__(TaskConfig())

    def forward(self, model, batch):
        return model(batch["x"])


def _setup(n_blocks, budgets, **kw):
    return method_setup(DepthFL, [(t, d, 4) for t, d in enumerate(budgets)], DepthFLConfig(**kw), rounds=4,
                        extras=True, state=plain_state, plan_round=2, n_blocks=n_blocks)


def _hand_loss(logits, y, w):
    """sum_k CE_k + w sum_k sum_{j!=k} KL(p_j || p_k) / (n - 1), with numpy, per formula."""
    zs = [z.detach().double().numpy() for z in logits]
    logp = [z - np.log(np.exp(z).sum(1, keepdims=True)) for z in zs]
    n, b = len(zs), len(y)
    total = sum(-lp[np.arange(b), y].mean() for lp in logp)
    for k in range(n):
        for j in range(n):
            if j != k:
                total += w * (np.exp(logp[j]) * (logp[j] - logp[k])).sum(1).mean() / (n - 1)
    return total


def test_classifier_positions_and_plans():
    assert METHODS.get("depthfl") is DepthFL
    am, m, state, plans = _setup(12, [2, 6, 7, 12])
    assert m.exits == [2, 5, 8, 11]  # after blocks 3, 6, 9, 12 (1-based)
    assert plans[0].skip  # a budget of 2 blocks holds no classifier
    assert plans[1].blocks == tuple(range(6)) and plans[1].extra["exits"] == [0, 1] and not plans[1].train_head
    assert plans[2].blocks == tuple(range(6))  # 7 blocks: up to its last classifier
    assert plans[3].extra["exits"] == [0, 1, 2, 3] and plans[3].train_head
    assert plans[3].extra["kd_weight"] == pytest.approx(math.exp(-5 * (1 - 2 / 4) ** 2))
    assert kd_weight(4, 4) == 1.0 and kd_weight(0, 4) == pytest.approx(math.exp(-5))
    up = m.upload_keys(plans[1])
    assert "fedbench_extra.exit1.weight" in up and "fedbench_extra.exit2.weight" not in up
    # only the classifiers it holds travel: no final head for a client that does not reach it
    assert "head.weight" not in up and "head.weight" not in m.client_payload(state, plans[1])
    assert "head.weight" not in m.model_keys(plans[1]) and "head.weight" in m.client_payload(state, plans[3])
    assert set(m.client_payload(state, plans[1])) == set(m.model_keys(plans[1]))
    assert m.hidden_blocks(plans[1]) == (2, 5) and m.hidden_blocks(None) == (2, 5, 8)


def test_loss_formula_against_hand_computation():
    torch.manual_seed(0)
    logits = [torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)]
    y = torch.tensor([0, 2, 1, 1, 0])
    for w in (0.0, 0.3):
        assert depthfl_loss(logits, y, w).item() == pytest.approx(_hand_loss(logits, y, w), rel=1e-5)
    assert depthfl_loss(logits[:1], y, 1.0).item() == pytest.approx(_hand_loss(logits[:1], y, 0.0), rel=1e-5)


def test_client_loss_on_a_tiny_model():
    am, m, state, plans = _setup(6, [3, 6], group_size=3)
    task, x, y = _Task(), torch.randn(8, 4), torch.randint(0, 3, (8,))
    batch = {"x": x, "y": y}
    full = plans[1]
    with am.capture(m.hidden_blocks(full)) as hidden:
        am.set_trainable(m.upload_keys(full))
        loss = m.client_loss(task, am.model, batch, full, hidden)
        loss.backward()
    h = am.model.blocks[:3](x)  # output of block 3 (index 2)
    by_hand = _hand_loss([am.model.fedbench_extra.exit0(h), am.model(x)], y.numpy(), full.extra["kd_weight"])
    assert loss.item() == pytest.approx(by_hand, rel=1e-5)
    assert am.model.fedbench_extra.exit0.weight.grad is not None and am.model.head.weight.grad is not None
    short = plans[0]  # 3 blocks: its one classifier, no distillation, not the task head
    with am.capture(m.hidden_blocks(short)) as hidden, am.subset_blocks(short.blocks):
        loss = m.client_loss(task, am.model, batch, short, hidden)
    exit0 = am.model.fedbench_extra.exit0(am.model.blocks[:3](x))
    assert loss.item() == pytest.approx(_hand_loss([exit0], y.numpy(), 0.0), rel=1e-5)


def test_owner_averaging_of_the_classifiers():
    am, m, state, plans = _setup(6, [3, 6], group_size=3)
    ups = []
    for c, n, v in [(0, 1, 1.0), (1, 3, 5.0)]:
        ups.append(ClientUpdate(c, {k: torch.full_like(state.tensors[k], v) for k in m.upload_keys(plans[c])}, n, plans[c]))
    new = m.aggregate(state, ups).tensors
    assert torch.allclose(new["fedbench_extra.exit0.weight"], torch.full((3, 4), (1 * 1.0 + 3 * 5.0) / 4))
    assert torch.allclose(new["head.weight"], torch.full((3, 4), 5.0))  # only the full-depth client
    assert torch.allclose(new["blocks.4.fc.lora_A.weight"], torch.full((4, 4), 5.0))


def test_evaluation_records_ensemble_and_last_head():
    am, m, state, plans = _setup(6, [6], group_size=3)
    task = _Task()
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    fed = SimpleNamespace(test=ArrayDataset({"x": x, "y": y}), test_domains=None)
    res, _ = Evaluator(m, task, am, fed, None, None).evaluate(state, None)  # the runner's evaluation path
    with torch.no_grad():
        last = am.model(x)
        ens = (am.model.fedbench_extra.exit0(am.model.blocks[:3](x)) + last) / 2
    acc = lambda z: float((z.argmax(-1) == y).float().mean())
    assert res.extra["top1_ensemble"] == pytest.approx(acc(ens)) and res.extra["top1_last"] == pytest.approx(acc(last))
    assert res.value == res.extra["top1_ensemble"]
    m_last = DepthFL(DepthFLConfig(eval_head="last", group_size=3), m.ctx)
    assert Evaluator(m_last, task, am, fed, None, None).evaluate(state, None)[0].value == pytest.approx(acc(last))


def test_exits_scale_with_depth_and_are_recorded():
    assert exit_blocks(12) == [2, 5, 8, 11]  # after blocks 3, 6, 9, 12 (1-based)
    assert exit_blocks(6) == [1, 2, 4, 5]  # 4 exits on 6 blocks: after 2, 3, 5, 6 (round half up of 1.5, 3, 4.5, 6)
    assert exit_blocks(24) == [5, 11, 17, 23] and exit_blocks(2) == [0, 1]
    assert exit_blocks(6, group_size=3) == [2, 5] and exit_blocks(7, group_size=3) == [2, 5, 6]
    assert exit_blocks(12, n_exits=3) == [3, 7, 11]


def test_exit_heads_initialised_like_the_task_head_and_depthfl_beats_chance(tmp_path):
    from smoke import SMALL_TASK_CONFIGS

    cfg = dict(SMALL_TASK_CONFIGS["tiny_vision"], n_train_per_domain=64)
    run = dict(rounds=8, clients=4, per_round=4, roc="1:1:1", seed=0, out=str(tmp_path),
               measure_flops=False)  # a learning check: the FLOP meter is not what it tests
    exp = Experiment("depthfl", "tiny_vision", run, task_config=cfg)
    exp.setup()
    head_std = float(exp.am.model.head.weight.std())
    for k in range(len(exp.method.exits) - 1):
        w = exp.am.model.get_submodule(f"fedbench_extra.exit{k}").weight
        assert float(w.std()) == pytest.approx(head_std, rel=0.25)  # timm ViT head: trunc-normal std 0.02
        assert torch.count_nonzero(exp.am.model.get_submodule(f"fedbench_extra.exit{k}").bias) == 0
    rec, _ = Experiment("depthfl", "tiny_vision", run, task_config=cfg).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["run"]["method_layout"]["exits_after_blocks"] == exp.method.layout()["exits_after_blocks"]
    chance = 1.0 / exp.data.n_classes
    assert rec["results"]["final"] > chance + 0.1, rec["results"]["curve"]
