"""The engine end to end with a test method that uses every per-client feature: two
architectures, private per-client state, a statistics upload and local evaluation.
The method and its task live here (not registered for users: added for the test only)."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from torch import nn
from spy import spying

from fedbench.methods import METHODS
from fedbench.methods.aggregation import weighted_mean_by_key
from fedbench.methods.base import ClientPlan, LocalPhase, Method, MethodState, extra_module
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, TaskData

WIDTH = {"small": 4, "wide": 12}
N_IN, N_CLASSES = 6, 3


class _Net(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.proj = nn.Linear(N_IN, d)
        self.blocks = nn.Sequential(nn.Linear(d, d), nn.Linear(d, d))
        self.head = nn.Linear(d, N_CLASSES)

    def forward(self, x):  # (B, N_IN) -> (B, C)
        return self.head(torch.relu(self.blocks(self.proj(x))))


class TwoArchTask(ClassificationTask):
    """Gaussian blobs; two architectures of different width."""

    def load(self):
        rng = np.random.default_rng(0)
        centers = rng.normal(size=(N_CLASSES, N_IN)) * 2
        y = rng.integers(0, N_CLASSES, 240)
        x = centers[y] + rng.normal(size=(240, N_IN))
        ds = ArrayDataset({"x": torch.tensor(x, dtype=torch.float32), "y": torch.from_numpy(y)})
        return TaskData(train=ds, test=ds.subset(np.arange(60)), train_labels=y, n_classes=N_CLASSES)

    def archs(self):
        return ("small", "wide")

    def build_model(self, data, arch=None):
        return ModelBundle(_Net(WIDTH[arch or "small"]), "blocks", {"none": []}, ["head"], default_target="none")

    def forward(self, model, batch):
        return model(batch["x"])


class PrivateStatsMethod(Method):
    """Private extractor + head per client (its architecture's shapes); a shared linear map
    on the raw input (an extra module, same shape in every architecture) is averaged;
    clients also upload their per-class example counts (statistics)."""

    evaluation = "local"

    def client_arch(self, client):
        return "small" if client % 2 == 0 else "wide"

    @classmethod
    def extra_modules(cls, config, ctx, head):
        return {"shared": nn.Linear(N_IN, N_CLASSES)}

    def _private(self):
        return ["proj.weight", "proj.bias", "head.weight", "head.bias"]

    def plan(self, rnd, clients, state, rng):
        return {p.client: ClientPlan(p.client, p.tier, (), arch=self.client_arch(p.client)) for p in clients}

    def client_payload(self, state, plan):
        return {k: v for k, v in state.tensors.items() if k.startswith("fedbench_extra.")}

    def model_keys(self, plan):
        return self._private() + list(self.ctx.extra_keys)

    def private_keys(self, plan):
        return self._private()

    def upload_keys(self, plan):
        return list(self.ctx.extra_keys)

    def local_phases(self, plan):
        return (LocalPhase("private", tuple(self._private())), LocalPhase("shared", tuple(self.ctx.extra_keys)))

    def _logits(self, model, batch):
        return model(batch["x"]) + extra_module(model, "shared")(batch["x"])

    def client_loss(self, task, model, batch, plan, hidden, phase="train"):
        return nn.functional.cross_entropy(self._logits(model, batch), batch["y"])

    def eval_logits(self, task, model, batch, hidden):
        return {"combined": self._logits(model, batch)}

    def client_statistics(self, task, model, batches, plan):
        counts = torch.zeros(N_CLASSES)
        for b in batches():
            counts += torch.bincount(b["y"], minlength=N_CLASSES).float()
        return {"stats.class_counts": counts}

    def aggregate(self, state, updates):
        shared = [type(u)(u.client, {k: v for k, v in u.tensors.items() if not k.startswith("stats.")},
                          u.n_examples, u.plan) for u in updates]
        tensors = weighted_mean_by_key(state.tensors, shared, "examples")
        seen = sum((u.tensors["stats.class_counts"] for u in updates), torch.zeros(N_CLASSES))
        return MethodState(tensors, {**state.extra, "class_counts": seen.tolist()})


@pytest.fixture
def registered():
    TASKS.add("_two_arch", TwoArchTask, "test task")
    METHODS.add("_private_stats", PrivateStatsMethod, "test method")
    yield
    TASKS.remove("_two_arch")
    METHODS.remove("_private_stats")


def test_private_state_archs_statistics_and_local_evaluation(registered, tmp_path):
    with spying() as spy:
        rec, _ = Experiment("_private_stats", "_two_arch",
                            dict(rounds=3, clients=6, per_round=4, seed=0, out=str(tmp_path), lr=0.05,
                                 executor="spy")).run()
    jobs, results = spy.jobs, spy.results
    assert rec["status"] == "ok", rec["error"]

    # each client's model is its architecture: private tensors have that arch's shapes
    for job, res in zip(jobs, results):
        arch = "small" if job.plan.client % 2 == 0 else "wide"
        assert job.plan.arch == arch
        assert res.private["head.weight"].shape == (N_CLASSES, WIDTH[arch])
    assert rec["run"]["client_archs"] == {str(c): ("small" if c % 2 == 0 else "wide") for c in range(6)}

    # state persists: what a client stored after round r is what it is handed next time
    last: dict[int, dict] = {}
    checked = 0
    for job, res in zip(jobs, results):
        c = job.plan.client
        if c in last:
            assert job.private is not None
            for k, v in last[c].items():
                assert torch.equal(job.private[k], v)
            checked += 1
        else:
            assert job.private is None  # first visit: fresh from the architecture
        last[c] = res.private
    assert checked > 0

    # statistics were uploaded (and counted as traffic); the method aggregated them
    assert all("stats.class_counts" in r.upload for r in results)
    assert all(r.cost.up_bytes == sum(t.numel() * t.element_size() for t in r.upload.values()) for r in results)

    # local evaluation: a score per client, and their summary
    res = rec["results"]
    assert res["evaluation"] == "local"
    assert sorted(res["per_client"]) == [str(c) for c in range(6)]
    scores = list(res["per_client"].values())
    assert res["final"] == pytest.approx(np.mean(scores)) and res["local"]["min"] == pytest.approx(min(scores))
    assert set(res["local"]["by_arch"]) == {"small", "wide"}
    assert res["final"] > 1 / N_CLASSES + 0.2  # the blobs are easy: the clients learned


def test_private_state_is_not_a_hidden_channel(registered, tmp_path):
    """A method whose model uses a tensor it neither sends nor keeps fails the run."""

    class Leaky(PrivateStatsMethod):
        def private_keys(self, plan):
            return []

    METHODS.add("_leaky", Leaky, "test")
    try:
        rec, _ = Experiment("_leaky", "_two_arch", dict(rounds=1, clients=2, out=str(tmp_path))).run()
    finally:
        METHODS.remove("_leaky")
    assert rec["status"] == "failed" and "neither sent nor" in rec["error"]
