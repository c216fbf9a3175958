"""LoRA-A2: the learning rates of the two factors, the client's rank selection over the
whole model, and a tiny_text run: each client trains and sends exactly r_k M ranks of the
round's factor (the others stay at their global values), within its upload budget, and its
scoring FLOPs are counted."""

import numpy as np
import torch
import torch.nn.functional as F

from fedbench.methods import METHODS
from fedbench.methods.base import MASK_SFX
from fedbench.methods.lora_a2 import LoRAA2
from fedbench.runners.train import TrainSettings, phase_optimizer
from smoke import SMALL_TASK_CONFIGS
from tee import Tee

HEAD = {"head.weight", "head.bias"}


class _Task:
    """The loss tiny_am's model needs: cross-entropy of its logits."""

    def loss(self, model, batch):
        out = model(batch["x"])
        return F.cross_entropy(out, batch["y"]), out


def _setup(tiny_am, ctx_for, ranks, r=4):
    am = tiny_am(r=r, alpha=float(r))
    ctx = ctx_for(am, [(t, 3, k) for t, k in enumerate(ranks)])
    m = LoRAA2(LoRAA2.config_cls(lora_r=r, lora_alpha=float(r)), ctx)
    return am, m, m.init_state(am.read(am.all_keys))


def _plans(m, state, rnd):
    return m.plan(rnd, list(m.ctx.profiles.values()), state, np.random.default_rng(rnd))


def test_registered_b_at_the_runs_lr_a_at_lr_over_the_ratio(tiny_am, ctx_for):
    """B-round: every tensor at the run's lr (0.1 here); A-round: A at 0.1 / 16, the head at 0.1."""
    assert METHODS.get("lora_a2") is LoRAA2
    am, m, state = _setup(tiny_am, ctx_for, [1, 4])
    settings = TrainSettings(1, 8, "sgd", 0.1, 0.0, 0.0, None, None)
    for rnd, factor, lr in ((1, "B", 0.1), (2, "A", 0.1 / 16)):
        plan = _plans(m, state, rnd)[0]
        (phase,) = m.local_phases(plan)
        keys = {f"blocks.{j}.fc.lora_{factor}.weight" for j in range(3)}
        assert plan.factor == factor and set(phase.trainable) == keys | HEAD
        params = am.set_trainable(phase.trainable)
        opt = phase_optimizer(params, phase, settings)
        by_param = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        assert {k: by_param[id(p)] for k, p in zip(phase.trainable, params)} == \
            {k: (lr if k in keys else 0.1) for k in phase.trainable}


def test_rank_selection_spends_the_budget_over_the_whole_model(tiny_am, ctx_for):
    """A-round, R = 4, 3 modules, r_0 = 1 and r_1 = 4: client 0 selects r_0 M = 3 ranks, client 1
    all 12. Score of (m, i) = ||B_m[:, i]|| ||G_A[i, :]||: with B zero but for column 2 of
    block 1 and column 0 of block 2 (twice as large), ranks with a zero B column score 0 and
    the selection is these two (then the earliest zero score: block 0, rank 0)."""
    am, m, state = _setup(tiny_am, ctx_for, [1, 4])
    b = {j: torch.zeros(4, 4) for j in range(3)}
    b[1][:, 2], b[2][:, 0] = 1.0, 2.0
    am.load({f"blocks.{j}.fc.lora_B.weight": b[j] for j in range(3)})
    am.set_trainable(["head.weight"])
    plans = _plans(m, state, 2)
    g = torch.Generator().manual_seed(0)
    batch = {"x": torch.randn(16, 4, generator=g), "y": torch.randint(0, 3, (16,), generator=g)}
    sel = m.client_masks(_Task(), am.model, lambda: iter([batch]), plans[0])
    assert {k: v.flatten().nonzero().flatten().tolist() for k, v in sel.items()} == {
        "blocks.0.fc.lora_A.weight": [0], "blocks.1.fc.lora_A.weight": [2], "blocks.2.fc.lora_A.weight": [0]}
    assert all(v.shape == (4, 1) for v in sel.values())  # a row of A per rank
    assert sum(int(v.sum()) for v in m.client_masks(_Task(), am.model, lambda: iter([batch]), plans[1]).values()) == 12
    # the scoring leaves no gradient and the trainable flags as they were
    assert all(p.grad is None for p in am.model.parameters())
    assert [n for n, p in am.model.named_parameters() if p.requires_grad] == ["head.weight"]


def test_a_run_sends_exactly_its_budget_and_keeps_the_other_ranks(tmp_path):
    """tiny_text, R = 16, tiers 1 / 4 / 16, batch 8 (equal batches): each upload's masks select
    r_k M ranks; in round 1 (B = 0) an unselected column of B is still 0; the scoring FLOPs
    are in the client's total (more than its steps' (forward + backward) x steps)."""
    run = dict(rounds=2, clients=3, per_round=3, roc="1:1:1", seed=0, batch_size=8, out=str(tmp_path))
    exp = Tee("lora_a2", "tiny_text", run, method_config={"lora_r": 16},
              task_config={**SMALL_TASK_CONFIGS["tiny_text"], "n_train": 48})
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    ranks = {t["tier"]: t["rank"] for t in rec["run"]["tiers"]}
    assert sorted(ranks.values()) == [1, 4, 16]
    for (rnd, client), res in exp.results.items():
        masks = {k[: -len(MASK_SFX)]: v for k, v in res.upload.items() if k.endswith(MASK_SFX)}
        factor = "lora_B" if rnd == 1 else "lora_A"
        assert masks and all(factor in k for k in masks)
        r_k = ranks[res.cost.tier]
        assert sum(int(v.sum()) for v in masks.values()) == r_k * len(masks)
        if rnd == 1:
            for k, v in masks.items():
                assert not res.upload[k][:, ~v.flatten()].any(), k
        c = res.cost
        assert c.flops_total > (c.flops_forward_step + c.flops_backward_step) * c.steps
