"""Traffic per client-round of the 2024-2026 federated LoRA methods against the table of
shared/docs/methods-2026.md (BERT-base q/v: d = 768, L = 24 adapted matrices, r = R = 8,
N = 3 clients; scalars per client-round, the head counted separately).

Each method's hooks run two or three rounds on a small-width twin (a random-init 12-layer
BERT of width 48, LoRA on query and value: the same 24 matrices) with made-up uploads;
the measured bytes must be the table's formula at d = 48, and the formula at d = 768 must
be the table's number."""

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientProfile, ClientUpdate, MethodContext, tensor_bytes
from fedbench.methods.fed_sb import GRAD_SFX, INIT
from fedbench.runners.executors.adapters import AdapterModel
from fedbench.tasks.base import ModelBundle

L, R, N = 24, 8, 3  # adapted matrices (12 layers x q, v), rank, clients per round
UNIT = lambda d: 2 * d * L  # noqa: E731 - one unit of rank: r (d_in + d_out) over the L matrices

#: the spec's table, BERT-base (d = 768): (up, down[, down variant]) in scalars per client-round
TABLE = {
    "fedit": (294_912, 294_912),
    "lora_fair": (294_912, 294_912),
    "ffa_lora": (147_456, 147_456),
    "fedsa_lora": (147_456, 147_456),
    "fedex_lora": (294_912, 294_912 + 884_736, 14_155_776),  # down factored; the dense residual alone
    "fed_sb": (1_536, 1_536),
    "fed_plora": (36_864 * 2, 294_912),  # r_i = 2 of R = 8
    "raflora": (36_864 * 2, 36_864 * 2),  # r_k = 2
    "hlora": (36_864 * 2, 36_864 * 2),
}


def formula(method: str, d: int) -> tuple[int, ...]:
    """The table's entries as functions of the width d (d_in = d_out = d)."""
    return {
        "fedit": (R * UNIT(d), R * UNIT(d)),
        "lora_fair": (R * UNIT(d), R * UNIT(d)),
        "ffa_lora": (R * d * L, R * d * L),  # B only
        "fedsa_lora": (R * d * L, R * d * L),  # A only
        "fedex_lora": (R * UNIT(d), R * UNIT(d) + N * R * UNIT(d), d * d * L),
        "fed_sb": (R * R * L, R * R * L),
        "fed_plora": (2 * UNIT(d), R * UNIT(d)),
        "raflora": (2 * UNIT(d), 2 * UNIT(d)),
        "hlora": (2 * UNIT(d), 2 * UNIT(d)),
    }[method]


@pytest.mark.parametrize("method", sorted(TABLE))
def test_formula_at_bert_base_width_is_the_spec_table(method):
    assert formula(method, 768) == TABLE[method]


def _twin() -> ModelBundle:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=48, num_hidden_layers=12, num_attention_heads=3,
                     intermediate_size=96, max_position_embeddings=32, num_labels=3)
    model = BertForSequenceClassification(cfg)
    targets = {"qv": ["attention.self.query", "attention.self.value"]}
    return ModelBundle(model, "bert.encoder.layer", targets, ["classifier"], default_target="qv")


def _measure(key: str, config: dict, ranks: list[int], rounds: int):
    """Run ``rounds`` rounds of ``key``'s hooks with N clients (made-up uploads: the payload
    plus noise) and return client 0's Traffic of the last round and its head bytes."""
    am = AdapterModel(_twin(), R, 16.0, 0.0, "qv")
    cls = METHODS.get(key)
    cfg = cls.config_cls(**{"lora_r": R, "lora_alpha": 16.0, **config})
    profiles = {c: ClientProfile(c, 0, 12, r, 10) for c, r in enumerate(ranks)}
    ctx = MethodContext(n_layers=12, layer_keys=am.layer_keys, head_keys=am.head_keys, profiles=profiles,
                        lora_r=R, lora_alpha=16.0, rounds=rounds)
    head = am.model.get_submodule("classifier")
    am.attach_extra(cls.extra_modules(cfg, ctx, head))
    m = cls(cfg, dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))
    assert len(m.ctx.all_keys) == 2 * L + 2  # A and B of 24 matrices + the head
    state = m.init_state(am.read(am.all_keys + m.base_weights_needed()))
    g = torch.Generator().manual_seed(0)
    for rnd in range(1, rounds + 1):
        plans = m.plan(rnd, list(profiles.values()), state, np.random.default_rng(rnd))
        ups = []
        for c, plan in plans.items():
            pay = m.client_payload(state, plan)
            private = {k: am.read([k])[k] for k in m.private_keys(plan)}
            up = {k: v + 0.01 * torch.randn(v.shape, generator=g)
                  for k, v in (pay | private).items() if k in set(m.upload_keys(plan))}
            if key == "fed_sb" and plan.extra[INIT]:  # its init round sends dense gradients
                up = {mod + GRAD_SFX: torch.randn(48, 48, generator=g) for mod in m.modules}
            if c == 0:
                traffic = m.traffic(plan, pay, up)
                head_down = tensor_bytes({k: pay[k] for k in m.ctx.head_keys if k in pay})
                head_up = tensor_bytes({k: up[k] for k in m.ctx.head_keys if k in up})
            ups.append(ClientUpdate(c, up, 10, plan))
        state = m.aggregate(state, ups)
    return traffic, head_down, head_up


CASES = {  # method -> (registry key, config, tier ranks, rounds measured)
    "fedit": ("fedavg", {}, [R] * N, 2),
    "lora_fair": ("lora_fair", {"steps": 2}, [R] * N, 2),
    "ffa_lora": ("ffa_lora", {}, [R] * N, 2),
    "fedsa_lora": ("fedsa_lora", {}, [R] * N, 2),
    "fedex_lora": ("fedex_lora", {}, [R] * N, 2),  # round 2 carries round 1's residual of N clients
    "fed_sb": ("fed_sb", {"lora_alpha": 8.0}, [R] * N, 3),  # round 1 inits, round 2 sends B and A once
    "fed_plora": ("fed_plora", {}, [2, R, R], 2),
    "raflora": ("raflora", {}, [2, 4, R], 2),
    "hlora": ("hlora", {}, [2, 4, R], 2),
}


@pytest.mark.parametrize("method", sorted(TABLE))
def test_measured_traffic_on_the_twin_is_the_formula(method):
    key, config, ranks, rounds = CASES[method]
    t, head_down, head_up = _measure(key, config, ranks, rounds)
    want = formula(method, 48)
    assert (t.up_bytes - head_up) // 4 == want[0]
    assert (t.down_bytes - head_down) // 4 == want[1]
    if method == "fedex_lora":
        dense = (t.down_variants[METHODS.get("fedex_lora").DENSE_LABEL] - head_down) // 4
        assert dense - R * UNIT(48) == want[2]  # the adapter + one dense residual per matrix
