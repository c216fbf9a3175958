"""A BERT-shaped twin for traffic tests: a random-init 12-layer BERT of width 48 with LoRA
on query and value (the 24 adapted matrices of BERT-base q/v), on which a method's hooks run
a few rounds with made-up uploads (tests/methods/test_traffic_*.py)."""

import dataclasses
from typing import Callable

import numpy as np
import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientProfile, ClientUpdate, tensor_bytes
from fedbench.methods.fed_sb import GRAD_SFX, INIT
from fedbench.runners.executors.adapters import AdapterModel, method_context
from fedbench.tasks.base import ModelBundle

L, R, N = 24, 8, 3  # adapted matrices (12 layers x q, v), rank, clients per round
UNIT = lambda d: 2 * d * L  # noqa: E731 - one unit of rank: r (d_in + d_out) over the L matrices


def twin() -> ModelBundle:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=48, num_hidden_layers=12, num_attention_heads=3,
                     intermediate_size=96, max_position_embeddings=32, num_labels=3)
    model = BertForSequenceClassification(cfg)
    targets = {"qv": ["attention.self.query", "attention.self.value"]}
    return ModelBundle(model, "bert.encoder.layer", targets, ["classifier"], default_target="qv")


def measure_traffic(key: str, config: dict, ranks: list[int], rounds: int, select: Callable | None = None):
    """Run ``rounds`` rounds of ``key``'s hooks with N clients (made-up uploads: the payload
    plus noise; ``select(method, plan, generator)``, if given, stands for the client's
    ``Method.client_select``: the plan it trains) and return client 0's Traffic of the last
    round and its head bytes."""
    am = AdapterModel(twin(), R, 16.0, 0.0, "qv")
    cls = METHODS.get(key)
    cfg = cls.config_cls(**{"lora_r": R, "lora_alpha": 16.0, **config})
    profiles = {c: ClientProfile(c, 0, 12, r, 10) for c, r in enumerate(ranks)}
    ctx = method_context(am, profiles, rounds)
    head = am.model.get_submodule("classifier")
    am.attach_extra(cls.extra_modules(cfg, ctx, head))
    cls.patch_model(cfg, am.model)
    m = cls(cfg, dataclasses.replace(ctx, extra_keys=list(am.extra_keys)))
    assert len(m.ctx.all_keys) == 2 * L + 2  # A and B of 24 matrices + the head
    state = m.init_state(am.read(am.all_keys + m.base_weights_needed()))
    g = torch.Generator().manual_seed(0)
    for rnd in range(1, rounds + 1):
        plans = m.plan(rnd, list(profiles.values()), state, np.random.default_rng(rnd))
        ups = []
        for c, plan in plans.items():
            pay = m.client_payload(state, plan)
            plan = plan if select is None else select(m, plan, g)
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
