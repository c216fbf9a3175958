"""FLoRA: stacking is exact for mixed ranks, the server scaling is the client's own, the
merged weights are the next base and are sent (and counted) in every payload."""

import numpy as np
import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, MethodState, Traffic, tensor_bytes
from fedbench.methods.flora import FLoRA
from fedbench.methods.aggregation import stack_lora
from fedbench.methods.rank_hetero import AuthorsRuleConfig
from fedbench.runners.executors.train import adapter_for
from helpers import method_setup

M = "blocks.1.fc"
A1, B1, W1 = M + ".lora_A.weight", M + ".lora_B.weight", M + ".base_layer.weight"
ALPHA = 8.0


def _setup(ranks):
    return method_setup(FLoRA, [(t, 3, r) for t, r in enumerate(ranks)], AuthorsRuleConfig(lora_r=4, lora_alpha=ALPHA),
                        base=True, alpha=ALPHA)


def _updates(m, state, plans, sizes):
    g = torch.Generator().manual_seed(5)
    ups = []
    for c, n in enumerate(sizes):
        r = plans[c].rank
        t = {k: state.tensors[k].clone() for k in m.ctx.head_keys}
        for mod in m.modules:
            t[mod + ".lora_A.weight"] = torch.randn(r, 4, generator=g)
            t[mod + ".lora_B.weight"] = torch.randn(4, r, generator=g)
        ups.append(ClientUpdate(c, t, n, plans[c]))
    return ups


def test_stack_lora_product_is_the_weighted_sum():
    a = [torch.randn(1, 5), torch.randn(3, 5)]
    b = [torch.randn(6, 1), torch.randn(6, 3)]
    sa, sb = stack_lora(list(zip(a, b)), [0.25, 2.0])
    assert sa.shape == (4, 5) and sb.shape == (6, 4)
    assert torch.allclose(sb @ sa, 0.25 * b[0] @ a[0] + 2.0 * b[1] @ a[1], atol=1e-6)


def test_merged_update_is_exact_for_mixed_ranks():
    assert METHODS.get("flora") is FLoRA
    am, m, state, plans = _setup([1, 2, 4])
    ups = _updates(m, state, plans, [1, 2, 3])
    new = m.aggregate(state, ups)
    p = [1 / 6, 2 / 6, 3 / 6]
    expected = sum(p[i] * (ALPHA / r) * ups[i].tensors[B1] @ ups[i].tensors[A1] for i, r in enumerate([1, 2, 4]))
    assert torch.allclose(new.tensors[W1] - state.tensors[W1], expected, atol=1e-5)
    # the LoRA of the global (evaluation) adapter stays zero: everything is in the base
    assert torch.count_nonzero(new.tensors[B1]) == 0


def test_server_scaling_is_each_clients_peft_scaling():
    """For one client, what the server merges equals peft's own delta of that client's
    trained adapter (alpha_i / r_i). The authors' code merged with alpha_stack / r_stack,
    which this would catch (2x off here for a rank-2 client of a rank-4 stack)."""
    am, m, state, plans = _setup([2])
    (up,) = _updates(m, state, plans, [7])
    name = adapter_for(am, plans[0])
    am.load({k: v for k, v in up.tensors.items() if "lora_" in k}, name)
    new = m.aggregate(state, [up])
    assert torch.allclose(new.tensors[W1] - state.tensors[W1], am.model.blocks[1].fc.get_delta_weight(name), atol=1e-5)


def test_payload_sends_merged_weights_and_a_fresh_seeded_lora():
    am, m, state, plans = _setup([1, 2, 4])
    new = m.aggregate(state, _updates(m, state, plans, [1, 2, 3]))
    nxt = m.plan(2, list(m.ctx.profiles.values()), new, np.random.default_rng(1))
    pay = m.client_payload(new, nxt[1])
    assert torch.equal(pay[W1], new.tensors[W1])
    assert pay[A1].shape == (2, 4) and torch.count_nonzero(pay[B1]) == 0
    assert pay[A1].abs().max() <= 1 / 4 ** 0.5  # peft's init bound 1/sqrt(d_in)
    assert torch.equal(m.client_payload(new, nxt[1])[A1], pay[A1])  # seeded by the plan
    assert not torch.equal(m.client_payload(new, nxt[2])[A1][:2], pay[A1])
    # traffic: 3 dense 4x4 weights + fresh rank-r LoRA + head (3x4 + 3), float32
    assert tensor_bytes(pay) == 4 * (3 * 16 + 3 * 2 * (4 + 4) + 3 * 4 + 3)


def test_runner_applies_payload_base_weights_to_one_client_only(tiny_am):
    am = tiny_am()
    before = am.read([W1])[W1]
    with am.base_overlay({W1: before + 1.0, A1: torch.zeros(4, 4)}):
        am.load({W1: before + 1.0})
        assert torch.equal(am.param(W1), before + 1.0)
    assert torch.equal(am.param(W1), before)
    assert am.base_keys([W1, A1, "head.weight"]) == [W1]


def test_eval_state_is_the_merged_model():
    am, m, state, plans = _setup([1, 4])
    new = m.aggregate(state, _updates(m, state, plans, [1, 1]))
    x = torch.randn(2, 4)
    with am.base_overlay(new.tensors):
        am.load(new.tensors)
        merged = am.model(x)
    am.load(MethodState(state.tensors).tensors)
    plain = am.model(x)
    assert not torch.allclose(merged, plain)  # the merged base changed the global model
    assert torch.allclose(am.model(x), plain)  # and was restored afterwards


def test_traffic_headline_is_the_stack_and_merged_weights_are_the_alternative():
    am, m, state, plans = _setup([1, 2, 4])
    head = tensor_bytes({k: state.tensors[k] for k in m.ctx.head_keys})
    pay = m.client_payload(state, plans[0])
    up = {k: pay[k] for k in m.upload_keys(plans[0])}
    # round 1: nothing stacked yet, clients hold W_0
    assert m.traffic(plans[0], pay, up) == Traffic(head, tensor_bytes(up), {FLoRA.MERGED_LABEL: tensor_bytes(pay)})
    new = m.aggregate(state, _updates(m, state, plans, [1, 2, 3]))
    plans2 = m.plan(2, list(m.ctx.profiles.values()), new, np.random.default_rng(1))
    pay2 = m.client_payload(new, plans2[0])
    elsize = pay2[W1].element_size()
    stack = sum((1 + 2 + 4) * (4 + 4) * elsize for _ in m.modules)  # sum_i r_i (d_in + d_out) per module
    traffic = m.traffic(plans2[0], pay2, up)
    assert traffic.down_bytes == stack + head and traffic.up_bytes == tensor_bytes(up)
    assert traffic.down_variants == {FLoRA.MERGED_LABEL: tensor_bytes(pay2)}


def test_record_has_both_traffic_counts(tmp_path):
    from fedbench.runners.core.experiment import Experiment
    from smoke import SMALL_TASK_CONFIGS

    rec, _ = Experiment("flora", "tiny_text", dict(rounds=2, clients=3, per_round=3, roc="1:1:1", out=str(tmp_path)),
                        task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "ok", rec["error"]
    alt = rec["cost"]["traffic_alt_mb_per_client_round"][FLoRA.MERGED_LABEL]
    assert alt["down"] > rec["cost"]["traffic_mb_per_client_round"]["down"] > 0
    assert alt["up"] == rec["cost"]["traffic_mb_per_client_round"]["up"]
    assert set(alt["by_tier"]) == {"0", "1", "2"}
