"""LoRA-A2: the learning rates of the two factors, the client's rank selection over the
whole model (``Method.client_select``), and a tiny_text run: each client trains and sends
exactly r_k M ranks of the round's factor (the others stay at their global values), within
its upload budget, with its scoring FLOPs counted."""

import numpy as np
import torch

from fedbench.methods import METHODS
from fedbench.methods.alternating import RANKS
from fedbench.methods.client_api import ClientAPI
from fedbench.methods.lora_a2 import LoRAA2
from fedbench.runners.core.spec import TrainSettings
from fedbench.runners.executors.train import phase_optimizer
from smoke import SMALL_TASK_CONFIGS
from tee import Tee
from helpers import method_setup

HEAD = {"head.weight", "head.bias"}


def _setup(ranks, r=4):
    s = method_setup(LoRAA2, [(t, 3, k) for t, k in enumerate(ranks)], LoRAA2.config_cls(lora_r=r, lora_alpha=float(r)),
                     plan_round=None, r=r, alpha=float(r))
    return s.am, s.m, s.state


def _plans(m, state, rnd):
    return m.plan(rnd, list(m.ctx.profiles.values()), state, np.random.default_rng(rnd))


def test_registered_b_at_the_runs_lr_a_at_lr_over_the_ratio():
    """B-round: every tensor at the run's lr (0.1 here); A-round: A at 0.1 / 16, the head at 0.1."""
    assert METHODS.get("lora_a2") is LoRAA2
    am, m, state = _setup([4, 4])
    settings = TrainSettings(1, 8, "sgd", 0.1, 0.0, 0.0, None, None)
    for rnd, factor, lr in ((1, "B", 0.1), (2, "A", 0.1 / 16)):
        plan = _plans(m, state, rnd)[0]
        plan.extra[RANKS] = {mod: [0, 1, 2, 3] for mod in m.modules}  # what client_select adds
        (phase,) = m.local_phases(plan)
        keys = {f"blocks.{j}.fc.lora_{factor}.weight" for j in range(3)}
        assert plan.factor == factor and set(phase.trainable) == keys | HEAD
        params = am.set_trainable(phase.trainable)
        opt = phase_optimizer(params, phase, settings)
        by_param = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        assert {k: by_param[id(p)] for k, p in zip(phase.trainable, params)} == \
            {k: (lr if k in keys else 0.1) for k in phase.trainable}


class _Client(ClientAPI):
    """A client whose factor values and gradients the test sets."""

    def __init__(self, values, grads):
        self._values, self._grads = values, grads

    def values(self, keys):
        return {k: self._values[k] for k in keys}

    def gradients(self, keys, batches):
        return {k: self._grads[k] for k in keys}


def test_rank_selection_spends_the_budget_over_the_whole_model():
    """A-round, R = 4, 3 modules, r_0 = 1, r_1 = 4. Score (m, i) = ||B_m[:, i]|| ||G_A[i, :]||
    with every G_A row of norm 1 and B zero but column 2 of block 1 (norm 2) and column 0 of
    block 2 (norm 4): scores 4 (block 2, rank 0) > 2 (block 1, rank 2) > 0 (the rest, the
    earliest first: block 0, rank 0). Client 0 keeps those r_0 M = 3; client 1 all 12."""
    am, m, state = _setup([1, 4])
    values = dict(state.tensors)
    for j in range(3):
        values[f"blocks.{j}.fc.lora_B.weight"] = torch.zeros(4, 4)
    values["blocks.1.fc.lora_B.weight"][:, 2] = 1.0  # column norm sqrt(4) = 2
    values["blocks.2.fc.lora_B.weight"][:, 0] = 2.0  # column norm sqrt(16) = 4
    grads = {f"blocks.{j}.fc.lora_A.weight": torch.eye(4) for j in range(3)}  # row norms 1
    plans = _plans(m, state, 2)
    chosen = m.client_select(plans[0], _Client(values, grads))
    assert chosen.extra[RANKS] == {"blocks.0.fc": [0], "blocks.1.fc": [2], "blocks.2.fc": [0]}
    assert chosen.factor == "A" and chosen.train_layers == plans[0].train_layers
    everything = m.client_select(plans[1], _Client(values, grads)).extra[RANKS]
    assert everything == {mod: [0, 1, 2, 3] for mod in m.modules}
    (phase,) = m.local_phases(chosen)
    assert phase.trained_slices == (("blocks.0.fc.lora_A.weight", 0, (0,)), ("blocks.1.fc.lora_A.weight", 0, (2,)),
                                    ("blocks.2.fc.lora_A.weight", 0, (0,)))  # rows of A


def test_a_run_sends_exactly_its_budget_and_keeps_the_other_ranks(tmp_path):
    """tiny_text, R = 16, tiers 1 / 4 / 16: each client's plan keeps r_k M ranks; in round 1
    (B = 0) an unselected column of B is still 0 after training; the scoring FLOPs are in the
    client's total (more than its steps' (forward + backward) x steps at equal batches)."""
    run = dict(rounds=2, clients=3, per_round=3, roc="1:1:1", seed=0, batch_size=8, out=str(tmp_path))
    exp = Tee("lora_a2", "tiny_text", run, method_config={"lora_r": 16},
              task_config={**SMALL_TASK_CONFIGS["tiny_text"], "n_train": 48})
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    ranks = {t["tier"]: t["rank"] for t in rec["run"]["tiers"]}
    assert sorted(ranks.values()) == [1, 4, 16]
    for (rnd, client), res in exp.results.items():
        chosen = res.plan.extra[RANKS]
        assert res.plan.factor == ("B" if rnd == 1 else "A")
        assert sum(len(v) for v in chosen.values()) == ranks[res.cost.tier] * len(chosen)
        if rnd == 1:
            for mod, kept in chosen.items():
                b = res.upload[mod + ".lora_B.weight"]
                assert not b[:, [i for i in range(16) if i not in kept]].any(), mod
            assert any(res.upload[mod + ".lora_B.weight"][:, kept].any() for mod, kept in chosen.items())
        c = res.cost
        assert c.flops_total > (c.flops_forward_step + c.flops_backward_step) * c.steps
