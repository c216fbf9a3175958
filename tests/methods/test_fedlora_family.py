"""FedLoRA and its six baselines end to end on tiny_vision with the Table 1 CNNs
(model=cnn), 2 rounds, 4 clients with CNN-1..4: per-client records, private state
carried between rounds, what goes up and down; plus their server rules on hand-built
updates and the target-metric cost section."""

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from spy import spying

from fedbench.config import build_config
from fedbench.errors import UserError
from fedbench.methods import METHODS
from fedbench.methods.base import ClientPlan, ClientUpdate, MethodContext, MethodState
from fedbench.methods.personalised import assign_arch
from fedbench.methods.fedlora import default_rank
from fedbench.runners.core.state import RoundLog
from fedbench.runners.core.experiment import Experiment
from fedbench.runners.cost.meters import ClientCost
from fedbench.records import validate_record
from fedbench.runners.outputs.summary import target_section

FAMILY = ("fedlora", "standalone", "lg_fedavg", "fml", "fedkd", "fd", "fedproto")
TASK = {"model": "cnn", "n_train_per_domain": 24, "n_test_per_domain": 8}
N_CLASSES = 10
#: parameter names of a Table 1 CNN (the same in CNN-1..5: conv1, conv2, FC1, FC2, FC3) and of its head FC3
HEAD_KEYS = {"head.weight", "head.bias"}
CNN_KEYS = {f"{m}.{p}" for m in ("convs.0", "convs.3", "fc.0.linear", "fc.1.linear") for p in ("weight", "bias")}
CNN_KEYS |= HEAD_KEYS


_RUNS: dict = {}  # (method, config, rounds) -> (exp, rec, spied): each run once per test process


@pytest.fixture
def run_family(tmp_path_factory):
    """run_family(method, method_config=None, rounds=2) -> (experiment, record, what the spy saw);
    the tests only read them, so a run asked for again is the one already made."""

    def run(method, method_config=None, rounds=2):
        key = (method, repr(method_config), rounds)
        if key not in _RUNS:
            out = tmp_path_factory.mktemp(method)
            with spying() as spy:
                run = dict(rounds=rounds, clients=4, per_round=4, seed=0, out=str(out), eval_initial=True,
                           target_metric=0.0, executor="spy")
                exp = Experiment(method, "tiny_vision", run, method_config=method_config, task_config=TASK)
                rec, _ = exp.run()
            assert rec["status"] == "ok", rec["error"]
            validate_record(rec)
            spied = SimpleNamespace(jobs=list(spy.jobs), results=list(spy.results))
            # what each client stored after round 1 (the store hands it back in round 2)
            spied.after_round1 = {j.plan.client: r.private for j, r in zip(spied.jobs, spied.results) if j.round == 1}
            _RUNS[key] = exp, rec, spied
        return _RUNS[key]

    return run


@pytest.mark.parametrize("method", FAMILY)
def test_runs_with_private_cnns_and_local_records(method, run_family):
    exp, rec, spy = run_family(method)
    # per-client local evaluation, heterogeneous architectures by client id
    assert rec["results"]["evaluation"] == "local"
    assert set(rec["results"]["per_client"]) == {"0", "1", "2", "3"}
    assert rec["run"]["client_archs"] == {"0": "cnn1", "1": "cnn2", "2": "cnn3", "3": "cnn4"}
    assert set(rec["results"]["local"]["by_arch"]) == {"cnn1", "cnn2", "cnn3", "cnn4"}
    assert rec["results"]["target"]["reached"] and rec["results"]["target"]["round"] == 1
    # the private state a client starts round 2 with is what it stored after round 1
    round2 = [j for j in spy.jobs if j.round == 2]
    assert len(round2) == 4
    for job in round2:
        stored = spy.after_round1[job.plan.client]
        assert stored is not None and set(stored) == set(exp.method.private_keys(job.plan))
        for k, t in stored.items():
            assert torch.equal(job.private[k], t), k
        # ... and training changed it (the CNN is trained whole in every method)
        res = next(r for j, r in zip(spy.jobs, spy.results) if j is job)
        assert not torch.equal(res.private["convs.0.weight"], stored["convs.0.weight"])
    # nothing private goes up
    for res in spy.results:
        assert not set(res.upload) & set(exp.method.private_keys(ClientPlan(res.client, 0, ())))


def test_standalone_exchanges_nothing(run_family):
    exp, rec, spy = run_family("standalone")
    costs = [c for _, c in exp.state.costs]
    assert costs and all(c.up_bytes == 0 and c.down_bytes == 0 for c in costs)
    assert all(j.payload == {} for j in spy.jobs) and all(r.upload == {} for r in spy.results)
    assert rec["cost"]["traffic_mb_total"] == 0
    assert rec["results"]["target"]["params_transmitted"] == 0


@pytest.mark.parametrize("method,dim", [("fd", N_CLASSES), ("fedproto", 500)])
def test_statistics_methods_upload_per_class_statistics(method, dim, run_family):
    exp, rec, spy = run_family(method)
    name = "fd" if method == "fd" else "proto"
    keys = {f"fedbench_extra.{name}.means", f"fedbench_extra.{name}.counts"}
    for job, res in zip(spy.jobs, spy.results):
        assert set(res.upload) == keys
        assert res.upload[f"fedbench_extra.{name}.means"].shape == (N_CLASSES, dim)
        assert res.upload[f"fedbench_extra.{name}.counts"].sum().item() == len(job.indices)
        assert set(job.payload) == keys
    costs = [c for _, c in exp.state.costs]
    assert all(c.up_bytes == 4 * (N_CLASSES * dim + N_CLASSES) for c in costs)
    # round 1 starts from empty global statistics; round 2 from the clients' average
    r1 = [j for j in spy.jobs if j.round == 1]
    r2 = [j for j in spy.jobs if j.round == 2]
    assert all(j.payload[f"fedbench_extra.{name}.counts"].sum() == 0 for j in r1)
    total = sum(len(j.indices) for j in r1)
    assert all(j.payload[f"fedbench_extra.{name}.counts"].sum().item() == total for j in r2)
    if method == "fedproto":
        assert "top1_proto" in rec["results"]["extra"]


def test_lg_fedavg_shares_the_classifier_only(run_family):
    exp, rec, spy = run_family("lg_fedavg")
    for job, res in zip(spy.jobs, spy.results):
        assert set(job.payload) == set(HEAD_KEYS) == set(res.upload)
        assert set(res.private) == set(CNN_KEYS) - set(HEAD_KEYS)


@pytest.mark.parametrize("method", ["fml", "fedkd"])
def test_shared_model_is_cnn5_and_the_only_upload(method, run_family):
    exp, rec, spy = run_family(method)
    for res in spy.results:
        assert set(res.upload) and all(k.startswith("fedbench_extra.shared.") for k in res.upload)
        assert res.upload["fedbench_extra.shared.fc.0.linear.weight"].shape == (500, 800)  # CNN-5's FC1
        assert set(res.private) == set(CNN_KEYS)
    assert "top1_shared" in rec["results"]["extra"]


def test_fedlora_uploads_the_adapter_and_averages_it(run_family):
    exp, rec, spy = run_family("fedlora", rounds=1)
    keys = {"fedbench_extra.adapter.down.weight", "fedbench_extra.adapter.up.weight", "fedbench_extra.adapter.up.bias"}
    for res in spy.results:
        assert set(res.upload) == keys and set(res.private) == set(CNN_KEYS)
    assert set(rec["results"]["extra"]) >= {"top1_local", "top1_adapter"}
    # the two phases each trained something
    r = spy.results[0]
    assert not torch.equal(r.upload["fedbench_extra.adapter.down.weight"],
                           spy.jobs[0].payload["fedbench_extra.adapter.down.weight"])


def test_fedlora_phase2_leaves_the_cnn_and_phase1_the_adapter(tmp_path):
    """Phase ``local`` trains only CNN tensors, phase ``adapter`` only adapter tensors."""
    exp = Experiment("fedlora", "tiny_vision", dict(rounds=1, clients=4, per_round=4, seed=0, out=str(tmp_path)),
                     task_config=TASK)
    exp.setup()
    phases = exp.method.local_phases(ClientPlan(0, 0, (), arch="cnn1"))
    assert [p.name for p in phases] == ["local", "adapter"]
    assert set(phases[0].trainable) == set(CNN_KEYS)
    assert set(phases[1].trainable) == {k for k in exp.method.ctx.extra_keys if k.startswith("fedbench_extra.adapter.")}
    exp.store.close()


def test_fedlora_direct_adapter_in_the_homogeneous_setting(run_family):
    exp, rec, spy = run_family("fedlora", method_config={"archs": "cnn1", "rank": 7}, rounds=1)
    assert set(rec["run"]["client_archs"].values()) == {"cnn1"}
    assert spy.results[0].upload["fedbench_extra.adapter.reduce.weight"].shape == (7, 2000)  # FC1 of CNN-1 -> rank


def test_fedlora_default_rank_is_below_the_class_count(run_family):
    """No rank configured: d_1 = C // 2, a genuinely low-rank 500 x C factorisation (tiny_vision: C = 10)."""
    assert [default_rank(c) for c in (2, 10, 100)] == [2 // 2, 10 // 2, 100 // 2]
    exp, rec, spy = run_family("fedlora", rounds=1)
    assert spy.results[0].upload["fedbench_extra.adapter.down.weight"].shape == (10 // 2, 500)


def test_fedlora_config_is_checked():
    cls = METHODS.get("fedlora").config_cls
    with pytest.raises(UserError, match="adapter"):
        build_config(cls, {"adapter": "direct", "archs": "hetero"}, "method")
    with pytest.raises(UserError, match="mu"):
        build_config(cls, {"mu": 1.5}, "method")


def cnn_ctx() -> MethodContext:
    """The context a Table 1 CNN task gives (CNN-1's model; the task's five architectures)."""
    from fedbench.tasks.cnn import ARCHS
    from fedbench.tasks.cnn_task import cnn_bundle

    parts = cnn_bundle("cnn1", 3, N_CLASSES, 32).parts
    return MethodContext(n_layers=2, layer_keys={0: [], 1: []}, head_keys=["head.weight"], profiles={}, lora_r=8,
                         lora_alpha=16.0, n_classes=N_CLASSES, parts=parts, archs=ARCHS,
                         build_model=lambda arch: cnn_bundle(arch, 3, N_CLASSES, 32))


@pytest.mark.parametrize("method,field", [("fedlora", "archs"), ("fml", "archs"), ("fml", "shared_arch")])
def test_architectures_must_be_the_tasks(method, field):
    """archs / shared_arch name one of the architectures the task offers (Task.archs), not a table of the methods'."""
    cls = METHODS.get(method)
    METHODS.get(method)(build_config(cls.config_cls, {field: "cnn3"}, "method"), cnn_ctx())  # one of the task's
    with pytest.raises(UserError, match=f"method.{field}.*cnn1, cnn2, cnn3, cnn4, cnn5"):
        cls(build_config(cls.config_cls, {field: "cnn9"}, "method"), cnn_ctx())


def test_widths_come_from_the_declared_parts():
    """FedLoRA's adapters and FedProto's prototypes are sized by the widths the model declares."""
    ctx = cnn_ctx()
    ctx = MethodContext(**{**ctx.__dict__, "parts": dataclasses.replace(ctx.parts, widths=(6, 7))})
    fedlora, fedproto = METHODS.get("fedlora"), METHODS.get("fedproto")
    down = fedlora.extra_modules(fedlora.config_cls(rank=3), ctx, None)["adapter"].down
    assert down.weight.shape == (3, 7)  # r's declared width, not a table's 500
    direct = fedlora.extra_modules(fedlora.config_cls(archs="cnn3", rank=3), ctx, None)["adapter"].reduce
    assert direct.weight.shape == (3, 1000)  # h's width as CNN-3's own model declares it (its FC1)
    assert fedproto.extra_modules(fedproto.config_cls(), ctx, None)["proto"].means.shape == (N_CLASSES, 7)


def test_family_needs_a_model_that_declares_its_parts(tmp_path):
    run = dict(rounds=1, out=str(tmp_path))
    task = {"model": "vit", "n_train_per_domain": 8, "n_test_per_domain": 4}
    with pytest.raises(UserError):  # the ViT has no 'none' profile (the family trains whole models)
        Experiment("fedlora", "tiny_vision", run, task_config=task).run()
    with pytest.raises(UserError, match="declares no parts"):
        Experiment("fedlora", "tiny_vision", run, method_config={"lora_targets": "qv"}, task_config=task).run()


def test_client_architecture_rule():
    family = ("a", "b", "c")
    assert [assign_arch(c, "hetero", family) for c in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]
    assert assign_arch(5, "b", family) == "b"
    # the default reproduces FedLoRA's assignment by client id, CNN-(c mod 5 + 1): the task's architectures in turn
    m = METHODS.get("lg_fedavg")(METHODS.get("lg_fedavg").config_cls(), cnn_ctx())
    assert [m.client_arch(c) for c in range(12)] == [f"cnn{c % 5 + 1}" for c in range(12)]


def test_family_refuses_a_model_that_declares_no_parts():
    ctx = MethodContext(n_layers=2, layer_keys={0: [], 1: []}, head_keys=["head.weight"], profiles={}, lora_r=8,
                        lora_alpha=16.0)
    with pytest.raises(UserError, match="declares no parts"):
        METHODS.get("fedproto")(METHODS.get("fedproto").config_cls(), ctx)


# ------------------------------------------------------------ server rules on hand-built updates
def _update(client, tensors, n):
    return ClientUpdate(client, tensors, n, ClientPlan(client, 0, ()))


@pytest.mark.parametrize("method,name", [("fd", "fd"), ("fedproto", "proto")])
def test_statistics_aggregation_is_a_count_weighted_per_class_mean(method, name):
    cls = METHODS.get(method)
    m = cls.__new__(cls)  # the rule needs no context
    km, kc = f"fedbench_extra.{name}.means", f"fedbench_extra.{name}.counts"
    state = MethodState({km: torch.zeros(3, 2), kc: torch.zeros(3), "head.weight": torch.ones(1)})
    ups = [_update(0, {km: torch.tensor([[1.0, 2.0], [3.0, 3.0], [0.0, 0.0]]), kc: torch.tensor([1.0, 3.0, 0.0])}, 4),
           _update(1, {km: torch.tensor([[4.0, 8.0], [0.0, 0.0], [0.0, 0.0]]), kc: torch.tensor([2.0, 0.0, 0.0])}, 2)]
    out = m.aggregate(state, ups)
    # class 0: (1*[1,2] + 2*[4,8]) / 3; class 1: client 0 only; class 2: nobody -> zero, count 0
    assert torch.allclose(out.tensors[km], torch.tensor([[3.0, 6.0], [3.0, 3.0], [0.0, 0.0]]))
    assert torch.equal(out.tensors[kc], torch.tensor([3.0, 3.0, 0.0]))
    assert torch.equal(out.tensors["head.weight"], torch.ones(1))


def test_standalone_aggregation_changes_nothing():
    cls = METHODS.get("standalone")
    state = MethodState({"head.weight": torch.ones(2)})
    assert cls.aggregate(cls.__new__(cls), state, [_update(0, {}, 3)]) is state


# ------------------------------------------------------------------ target metric
def test_target_section_counts_cost_until_the_first_round_reaching_it():
    logs = [RoundLog(1, 0.5, None, 0, 0), RoundLog(2, 0.8, None, 0, 0), RoundLog(3, 0.9, None, 0, 0)]

    def cost(up, flops):
        c = ClientCost(client=0, tier=0)
        c.up_bytes, c.down_bytes, c.flops_total = up, 400, flops
        return c

    costs = [(1, cost(400, 1e12)), (2, cost(800, 2e12)), (3, cost(4000, 4e12))]
    got = target_section(0.75, logs, costs)
    assert got["reached"] and got["round"] == 2
    assert got["params_transmitted"] == (400 + 400 + 800 + 400) / 4
    assert got["tflops"] == pytest.approx(3.0)
    missed = target_section(0.95, logs, costs)
    assert not missed["reached"] and missed["round"] is None and missed["tflops"] is None
    assert target_section(None, logs, costs) is None


# ------------------------------------------------------------------ presets
@pytest.mark.parametrize("preset", ["fedlora_cifar10.yaml", "fedlora_cifar100.yaml", "fedlora_fmnist_cpu.yaml"])
def test_presets_validate(preset, tmp_path):
    """With or without ``../shared`` (:func:`smoke.preset_here`)."""
    from smoke import preset_here

    from fedbench.runners.core.sweep import load_sweep

    runs = load_sweep(preset_here(Path(__file__).resolve().parents[2] / "benchmarks" / preset, tmp_path))
    assert {r.spec.method for r in runs} == set(FAMILY)
