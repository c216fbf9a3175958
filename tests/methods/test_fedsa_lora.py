"""FedSA-LoRA: only A travels and is averaged; B and the head stay in each client's store;
the run is scored by personalised (local) evaluation."""

import torch

from fedbench.methods import METHODS
from fedbench.methods.base import ClientUpdate, tensor_bytes
from fedbench.methods.fedsa_lora import FedSALoRA, FedSALoRAConfig
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.experiment import Experiment
from smoke import SMALL_TASK_CONFIGS
from helpers import method_setup

A0, B0 = "blocks.0.fc.lora_A.weight", "blocks.0.fc.lora_B.weight"


def _setup():
    return method_setup(FedSALoRA, [(0, 3, 4)] * 2, FedSALoRAConfig(lora_r=4, lora_alpha=8.0))


def test_only_a_travels_b_and_the_head_are_private():
    assert METHODS.get("fedsa_lora") is FedSALoRA and FedSALoRA.evaluation == "local"
    am, m, state, plans = _setup()
    a_keys = {f"blocks.{j}.fc.lora_A.weight" for j in range(3)}
    b_keys = {f"blocks.{j}.fc.lora_B.weight" for j in range(3)}
    pay = m.client_payload(state, plans[0])
    assert set(pay) == set(m.upload_keys(plans[0])) == a_keys
    assert set(m.private_keys(plans[0])) == b_keys | {"head.weight", "head.bias"}
    (phase,) = m.local_phases(plans[0])
    assert set(phase.trainable) == a_keys | b_keys | {"head.weight", "head.bias"}
    assert set(m.model_keys(plans[0])) <= set(pay) | set(m.private_keys(plans[0]))
    up = {k: pay[k] + 1.0 for k in m.upload_keys(plans[0])}
    t = m.traffic(plans[0], pay, up)
    assert t.down_bytes == t.up_bytes == tensor_bytes(pay) == 4 * 3 * 4 * 4  # 3 modules x A (r x d_in)


def test_a_is_example_weighted_and_nothing_else_changes():
    am, m, state, plans = _setup()
    ups = [ClientUpdate(c, {k: torch.full_like(state.tensors[k], v) for k in m.upload_keys(plans[c])}, n, plans[c])
           for c, (v, n) in enumerate([(1.0, 1), (5.0, 3)])]
    new = m.aggregate(state, ups)
    assert torch.equal(new.tensors[A0], torch.full((4, 4), (1.0 * 1 + 5.0 * 3) / 4))
    assert torch.equal(new.tensors[B0], state.tensors[B0])
    assert set(m.eval_tensors(new)) == set(m.upload_keys(plans[0]))


class _KeepStore(Callback):
    """Copies every client's private state at the end of the run's last round (the store
    is emptied when a run ends)."""

    def __init__(self):
        self.exp, self.states = None, {}

    def on_round_end(self, log, state):
        if log.round == self.exp.spec.run.rounds:
            self.states = {c: self.exp.store.get(c) for c in range(self.exp.fed.n_clients)}


def test_each_client_keeps_its_own_b_and_head_and_is_scored_locally(tmp_path):
    run = dict(rounds=2, clients=3, per_round=3, seed=0, out=str(tmp_path), setting="2/-", measure_flops=False)
    keep = _KeepStore()
    exp = keep.exp = Experiment("fedsa_lora", "tiny_text", run, task_config=SMALL_TASK_CONFIGS["tiny_text"],
                                callbacks=[keep])
    rec, _ = exp.run()
    assert rec["status"] == "ok" and rec["results"]["evaluation"] == "local"
    assert set(rec["results"]["per_client"]) == {"0", "1", "2"}
    b_key = next(k for k in exp.am.all_keys if k.endswith("lora_B.weight"))
    head = exp.am.head_keys[0]
    stores = [keep.states[c] for c in range(3)]
    assert all(torch.count_nonzero(s[b_key]) > 0 for s in stores)  # B trained on the client ...
    assert not torch.equal(stores[0][b_key], stores[1][b_key])  # ... and kept apart per client
    assert not torch.equal(stores[0][head], stores[1][head])
    assert torch.count_nonzero(exp.state.method.tensors[b_key]) == 0  # the server never sees a B
