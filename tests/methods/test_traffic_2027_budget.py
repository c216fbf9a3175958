"""Traffic per client-round of Fed-pilot and FedHL against shared/docs/methods-2027.md
(BERT-base q/v: d = 768, L = 24 adapted matrices; scalars per client-round, the head
counted apart; one rank of both factors = 1536 per matrix = 36,864 over the 24).

As in test_traffic_2026 (whose small-width twin, tests/traffic_twin.py, this reuses: a
random-init 12-layer BERT of width 48 with LoRA on query and value), each method's hooks
run two rounds with made-up uploads; the measured bytes must be the formula at d = 48, and
the formula at d = 768 the spec's number."""

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientAPI, ClientProfile, ClientUpdate, MemoryAPI, MethodContext, tensor_bytes
from fedbench.methods.fed_pilot import INDEX_BYTES, SCORE_BYTES, SELECTED
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.runners.executors.selection import select_plan

from traffic_twin import L, UNIT, twin  # 24 matrices; r (d_in + d_out) over them per rank

#: the spec's numbers at d = 768 (scalars per client-round, head apart)
TABLE = {
    # r = 8, 12 of 24 matrices trained (the 6-of-12-layer tier): up 1536 r |K| + |K| indices, down 36,864 r
    # + 24 scores
    "fed_pilot": {"up": 147_456, "down": 294_912, "indices": 12, "scores": 24},
    # a rank-1 client; ranks (1, 4, 16) took part last round: dense dW 768^2 x 24, stacked 36,864 (1 + 4 + 16)
    "fedhl": {"up": 36_864, "down": 14_155_776, "stacked": 36_864 * (1 + 4 + 16)},
}


def formula(method: str, d: int) -> dict:
    return {
        "fed_pilot": {"up": 2 * d * 8 * 12, "down": 8 * UNIT(d), "indices": 12, "scores": L},
        "fedhl": {"up": 1 * UNIT(d), "down": d * d * L, "stacked": (1 + 4 + 16) * UNIT(d)},
    }[method]


@pytest.mark.parametrize("method", sorted(TABLE))
def test_formula_at_bert_base_width_is_the_spec_table(method):
    assert formula(method, 768) == TABLE[method]


class Accountant(MemoryAPI):
    """Step bytes with the structure of the real ones (an activation block per layer from the
    lowest trained one up, gradient + Adam per trained byte): the budget logic only."""

    def __init__(self, am):
        self.am = am

    def step_bytes(self, method, plan, trainable):
        p = tensor_bytes(self.am.read(trainable))
        low = min((j for j, ks in self.am.layer_keys.items() if set(ks) & set(trainable)), default=12)
        return {"params": 10**6, "grads": p, "optimizer": 2 * p, "activations": 10**5 * (12 - low)}


class Scores(ClientAPI):
    def grad_sq_norms(self, keys, batches):
        return {k: 1.0 for k in keys}


def _run(key: str, config: dict, profiles: dict, client: int):
    """Two rounds of ``key``'s hooks; ``client``'s Traffic of round 2 and its head bytes."""
    am = AdapterModel(twin(), config["lora_r"], 16.0, 0.0, "qv")
    cls = METHODS.get(key)
    ctx = MethodContext(n_layers=12, layer_keys=am.layer_keys, head_keys=am.head_keys, profiles=profiles,
                        lora_r=config["lora_r"], lora_alpha=16.0, rounds=2, memory=Accountant(am))
    m = cls(cls.config_cls(lora_alpha=16.0, **config), dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))
    assert len(m.ctx.all_keys) == 2 * L + 2
    state = m.init_state(am.read(am.all_keys + m.base_weights_needed()))
    g = torch.Generator().manual_seed(0)
    for rnd in (1, 2):
        ups = []
        for c, plan in m.plan(rnd, list(profiles.values()), state, np.random.default_rng(rnd)).items():
            plan = select_plan(m, plan, Scores())
            pay = m.client_payload(state, plan)
            up = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in pay.items()
                  if k in set(m.upload_keys(plan))}
            if c == client:
                traffic = m.traffic(plan, pay, up)
                head = (tensor_bytes({k: pay[k] for k in m.ctx.head_keys}),
                        tensor_bytes({k: up[k] for k in m.ctx.head_keys}))
                n_chosen = len(plan.extra.get(SELECTED, ()))
            ups.append(ClientUpdate(c, up, 10, plan))
        state = m.aggregate(state, ups)
    return traffic, head, n_chosen


def test_fed_pilot_traffic_on_the_twin_is_the_formula():
    """Tiers of 6, 9 and 12 layers; the 6-layer client trains the 12 matrices of its top 6 layers."""
    profiles = {c: ClientProfile(c, c, n, 8, 10) for c, n in enumerate((6, 9, 12))}
    t, (head_down, head_up), n_chosen = _run("fed_pilot", {"lora_r": 8}, profiles, client=0)
    want = formula("fed_pilot", 48)
    assert n_chosen == want["indices"]
    assert (t.up_bytes - head_up - INDEX_BYTES * n_chosen) // 4 == want["up"]
    assert (t.down_bytes - head_down - SCORE_BYTES * want["scores"]) // 4 == want["down"]


def test_fedhl_traffic_on_the_twin_is_the_formula():
    """Ranks 1, 4 and 16 (global rank 16): client 0's round-2 up is its rank-1 factors, its down
    the dense dW of round 1 (headline) and the stacked factors of its 3 participants (alternative)."""
    profiles = {c: ClientProfile(c, c, 12, r, 10) for c, r in enumerate((1, 4, 16))}
    t, (head_down, head_up), _ = _run("fedhl", {"lora_r": 16}, profiles, client=0)
    want = formula("fedhl", 48)
    fedhl = METHODS.get("fedhl")
    assert (t.up_bytes - head_up) // 4 == want["up"]
    assert (t.down_bytes - head_down) // 4 == want["down"]
    assert (t.down_variants[fedhl.STACKED_LABEL] - head_down) // 4 == want["stacked"]
