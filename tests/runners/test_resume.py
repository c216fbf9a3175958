"""Resume: a run killed after round k continues from its checkpoint when run again and
ends with the record of an uninterrupted run (metrics bit-exact on CPU)."""

import time

import pytest
import torch

from fedbench.runners.outputs import checkpoint
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.experiment import Experiment

from smoke import SMALL_TASK_CONFIGS

RUN = dict(rounds=3, clients=4, per_round=2, seed=2, roc="1:1:1")


class KillAt(Callback):
    """Interrupts the run during round ``rnd`` (after round rnd - 1's checkpoint)."""

    def __init__(self, rnd):
        self.rnd = rnd

    def on_client_end(self, rnd, cost):
        if rnd == self.rnd:
            raise KeyboardInterrupt


def _comparable(rec):
    cost = {k: v for k, v in rec["cost"].items() if "seconds" not in k and k != "rss_peak_gb"}  # measured, per process
    return rec["results"], cost, rec["run"]["sampled_clients"]


TEXT = SMALL_TASK_CONFIGS["tiny_text"]
CASES = [("fedavg", "tiny_text", TEXT), ("fed_hello_fim", "tiny_text", TEXT),
         # private client state (each client's CNN) lives in the ClientStore's folder across the kill
         ("fedlora", "tiny_vision", {"model": "cnn", "n_train_per_domain": 24, "n_test_per_domain": 4})]


@pytest.mark.parametrize("method,task,task_config", CASES)
def test_killed_run_resumes_to_the_uninterrupted_record(method, task, task_config, tmp_path):
    personal = task == "tiny_vision"  # the FedLoRA family: private CNNs
    setting = "2/-" if personal else "iid"
    full, _ = Experiment(method, task, dict(RUN, setting=setting, out=str(tmp_path / "full")),
                         task_config=task_config).run()
    run = dict(RUN, setting=setting, out=str(tmp_path / "killed"))
    cut, path = Experiment(method, task, run, task_config=task_config, callbacks=[KillAt(2)]).run()
    assert cut["status"] == "cancelled" and cut["run"]["rounds_completed"] == 1
    assert checkpoint.checkpoint_path(path).exists()
    assert path.with_suffix(".clients").is_dir() == personal  # private state kept for the resume
    resumed, path2 = Experiment(method, task, run, task_config=task_config).run()
    assert path2 == path and resumed["status"] == "ok" and resumed["run"]["rounds_completed"] == 3
    assert _comparable(resumed) == _comparable(full)
    assert not checkpoint.checkpoint_path(path).exists()  # removed once the run ended ok
    assert not path.with_suffix(".clients").exists()


def test_keep_checkpoints(tmp_path):
    run = dict(RUN, rounds=1, keep_checkpoints=True, out=str(tmp_path), executor="stub")  # bookkeeping: no training
    rec, path = Experiment("fedavg", "tiny_text", run, task_config=TEXT).run()
    assert rec["status"] == "ok" and checkpoint.checkpoint_path(path).exists()


class SlowFirstRoundThenKill(Callback):
    """Round 1 takes ``pause`` seconds longer; the run is interrupted after round 1's checkpoint."""

    def __init__(self, pause):
        self.pause = pause

    def on_client_end(self, rnd, cost):
        if rnd == 1:
            time.sleep(self.pause)

    def on_round_end(self, log, state):
        if log.round == 1:
            raise KeyboardInterrupt


def test_resumed_run_counts_the_seconds_before_the_interruption(tmp_path):
    """cost.seconds_total of a resumed run is the time up to its checkpoint plus the time
    of the resumed part: it dropped the first part (83.6 s against 94.2 s of its own rounds)."""
    run = dict(RUN, rounds=2, out=str(tmp_path), executor="stub")  # bookkeeping: no client needs to train
    cut, path = Experiment("fedavg", "tiny_text", run, task_config=TEXT, callbacks=[SlowFirstRoundThenKill(2.0)]).run()
    assert cut["status"] == "cancelled" and cut["run"]["rounds_completed"] == 1
    saved, _ = checkpoint.read(checkpoint.checkpoint_path(path), cut["run"]["run_id"], torch.device("cpu"))
    assert 2.0 < saved.elapsed_before <= cut["cost"]["seconds_total"]  # set up, round 1 (with its pause), saved
    resumed, _ = Experiment("fedavg", "tiny_text", run, task_config=TEXT).run()
    c = resumed["cost"]
    assert resumed["status"] == "ok" and resumed["run"]["resume"]["from_round"] == 1
    assert c["seconds_total"] > saved.elapsed_before
    assert c["seconds_total"] >= c["round_seconds_total"] + c["eval_seconds_total"]  # both rounds' time, and more
