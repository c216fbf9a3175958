"""The ray engine gives the local engine's record; parallel sweeps land, skip and survive failures.

Skipped where Ray is not installed (``pip install 'fedbench-peft[ray]'``). One local Ray
instance (2 CPUs, no dashboard) serves the whole module.
"""

import json
import sys

import pytest

ray = pytest.importorskip("ray")

from fedbench.methods import METHODS  # noqa: E402
from fedbench.methods.base import ClientPlan, LocalPhase, Method  # noqa: E402
from fedbench.runners.outputs.callbacks import Callback  # noqa: E402
from fedbench.runners.cli.cli import main  # noqa: E402
from fedbench.runners.core.experiment import Experiment  # noqa: E402
from fedbench.runners.outputs.summary import PROCESS_MEASURES  # noqa: E402

from smoke import SMALL_TASK_CONFIGS, one_per_family  # noqa: E402
from helpers import run_ok

RUN = dict(rounds=2, clients=4, per_round=4)


class PrivateHeadAvg(Method):
    """Test-only: FedAvg of the LoRA, each client keeps its own head (private state), local evaluation."""

    evaluation = "local"

    def plan(self, rnd, clients, state, rng):
        return {p.client: ClientPlan(p.client, p.tier, tuple(range(self.ctx.n_layers))) for p in clients}

    def client_payload(self, state, plan):
        return {k: state.tensors[k] for k in self.ctx.keys_for_layers(range(self.ctx.n_layers), head=False)}

    def private_keys(self, plan):
        return list(self.ctx.head_keys)

    def upload_keys(self, plan):
        return self.ctx.keys_for_layers(plan.train_layers, head=False)

    def local_phases(self, plan):
        return (LocalPhase("train", tuple(self.upload_keys(plan) + self.private_keys(plan))),)


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the test-only method travels to the actors by value (its module is not importable there)
    ray.cloudpickle.register_pickle_by_value(sys.modules[PrivateHeadAvg.__module__])
    yield
    ray.shutdown()


@pytest.fixture
def private_head_method():
    METHODS.add("test_private_head", PrivateHeadAvg)
    yield "test_private_head"
    METHODS.remove("test_private_head")


def _run(tmp_path, method, runner, workers: int = 2):
    workers = {"workers": workers} if runner == "ray" else {}  # --workers is the ray executor's only
    rec, _, exp = run_ok(method, "tiny_text", {**RUN, "out": str(tmp_path / runner), "runner": runner, **workers},
                         task_config=SMALL_TASK_CONFIGS["tiny_text"])
    return rec, exp


def _same_record(a, b):
    assert a["results"] == b["results"]
    assert {k: v for k, v in a["cost"].items() if k not in PROCESS_MEASURES} == \
        {k: v for k, v in b["cost"].items() if k not in PROCESS_MEASURES}
    # every client-round was metered once in each engine, measured or reused
    assert a["cost"]["meter_measurements"] + a["cost"]["meter_reused"] == \
        b["cost"]["meter_measurements"] + b["cost"]["meter_reused"]
    assert a["run"]["run_id"] == b["run"]["run_id"]


@pytest.mark.parametrize("method", one_per_family(["fedavg", "fed_hello_gd_uniform"], ("fedavg",)))
def test_ray_executor_gives_the_local_record(tmp_path, method):
    """One actor (an actor's start-up is most of this test's time); the clients shared out over
    two: the private-state test below."""
    local, _ = _run(tmp_path, method, "local")
    remote, _ = _run(tmp_path, method, "ray", workers=1)
    assert remote["run"]["runner"] == "ray"
    _same_record(local, remote)


def test_ray_executor_private_state_and_local_evaluation(tmp_path, private_head_method):
    local, exp_l = _run(tmp_path, private_head_method, "local")
    remote, exp_r = _run(tmp_path, private_head_method, "ray")
    _same_record(local, remote)
    assert len(exp_l.state.per_client) == 4 and exp_l.state.per_client == exp_r.state.per_client  # every client's own model
    assert ray.is_initialized()  # an executor that joined a running instance leaves it up


def _preset(tmp_path, body: str) -> str:
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items())
    p = tmp_path / "p.yaml"
    p.write_text(f"task: tiny_text\n{body}\nrun: {{rounds: 1, clients: 2}}\ntask_config: {{{task_cfg}}}\n"
                 f"out: {tmp_path / 'res'}\n")
    return str(p)


def test_parallel_sweep_lands_records_and_skips_them(tmp_path, capsys):
    # two runs for two workers: one each at once (a third would only wait for a free worker)
    preset = _preset(tmp_path, "methods: [fedavg]\nseeds: [0, 1]")
    assert main(["sweep", preset, "--no-progress", "--workers", "2"]) == 0
    assert "2 runs, 0 already done, 0 failed" in capsys.readouterr().out
    recs = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("*.json")]
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    assert {r["run"]["run_config"]["seed"] for r in recs} == {0, 1}
    assert {r["env"]["threads"] for r in recs} == {1}
    assert main(["sweep", preset, "--no-progress", "--workers", "2"]) == 0
    assert "2 runs, 2 already done, 0 failed" in capsys.readouterr().out
    assert ray.is_initialized()  # a sweep that joined a running instance leaves it up


def test_parallel_sweep_records_a_failed_run_and_goes_on(tmp_path, capsys):
    # SGD with lr 1e6 makes the loss explode from round 1: that run ends `failed` (divergence), the other is fine
    preset = _preset(tmp_path, "methods: [fedavg]\nresources: [{lr: 1.0e+6, optimizer: sgd, rounds: 2}, {}]")
    assert main(["sweep", preset, "--no-progress", "--workers", "2"]) == 1
    assert "2 runs, 0 already done, 1 failed" in capsys.readouterr().out
    statuses = sorted(json.loads(p.read_text())["status"] for p in (tmp_path / "res").rglob("*.json"))
    assert statuses == ["failed", "ok"]


def test_a_run_that_sent_no_record_is_recorded_from_its_checkpoint(tmp_path):
    """A run whose task raised or was lost: the driver's record says the rounds its checkpoint
    holds (it said 0 rounds beside a 2-round checkpoint), and says it failed."""
    from fedbench.runners.executors.ray_sweep import record_from_checkpoint
    from fedbench.records import validate_record
    from fedbench.runners.core.spec import build_spec

    class StopAt2(Callback):
        def on_round_end(self, log, state):
            if log.round == 2:
                raise KeyboardInterrupt  # after round 2's checkpoint

    run = {**RUN, "rounds": 3, "out": str(tmp_path)}
    spec = build_spec("fedavg", "tiny_text", run, {}, SMALL_TASK_CONFIGS["tiny_text"])
    cut, _ = Experiment(spec, callbacks=[StopAt2()]).run()
    rec = record_from_checkpoint(spec, "failed", "NodeDiedError: the node died")
    validate_record(rec)
    assert rec["status"] == "failed" and rec["error"] == "NodeDiedError: the node died"
    assert rec["run"]["rounds_completed"] == 2 and [p["round"] for p in rec["results"]["curve"]] == [1, 2]
    assert rec["results"]["curve"] == cut["results"]["curve"]
    assert 0 < rec["cost"]["seconds_total"] <= cut["cost"]["seconds_total"]
    (tmp_path / "tiny_text").rename(tmp_path / "moved")  # no checkpoint: a record of 0 rounds
    assert record_from_checkpoint(spec, "failed", "x")["run"]["rounds_completed"] == 0


def test_actor_builds_the_default_model_before_its_first_job(tmp_path):
    """Built on the first job, the model held up round 1 of every ray run (8.8 s against
    5.1 s for later rounds, benchmarks/ray_speedup.py); the actor builds it at start-up."""
    from fedbench.runners.executors.ray_executor import ClientActor

    exp = Experiment("fedavg", "tiny_text", {**RUN, "out": str(tmp_path)}, task_config=SMALL_TASK_CONFIGS["tiny_text"])
    exp.setup()
    actor = ClientActor(exp.worker_spec, exp.profiles, exp.data)
    assert list(actor.worker.pool._models) == [exp.pool.default_arch]
