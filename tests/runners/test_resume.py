"""Resume: a run killed after round k continues from its checkpoint when run again and
ends with the record of an uninterrupted run (metrics bit-exact on CPU)."""

import pytest

from fedbench.runners.outputs import checkpoint
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.experiment import Experiment

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


CASES = [("fedavg", "tiny_text", {}), ("fed_hello_fim", "tiny_text", {}),
         # private client state (each client's CNN) lives in the ClientStore's folder across the kill
         ("fedlora", "tiny_vision", {"model": "cnn", "n_train_per_domain": 24, "n_test_per_domain": 4})]


@pytest.mark.parametrize("method,task,task_config", CASES)
def test_killed_run_resumes_to_the_uninterrupted_record(method, task, task_config, tmp_path):
    setting = "2/-" if task_config else "iid"
    full, _ = Experiment(method, task, dict(RUN, setting=setting, out=str(tmp_path / "full")),
                         task_config=task_config).run()
    run = dict(RUN, setting=setting, out=str(tmp_path / "killed"))
    cut, path = Experiment(method, task, run, task_config=task_config, callbacks=[KillAt(2)]).run()
    assert cut["status"] == "cancelled" and cut["run"]["rounds_completed"] == 1
    assert checkpoint.checkpoint_path(path).exists()
    assert path.with_suffix(".clients").is_dir() == bool(task_config)  # private state kept for the resume
    resumed, path2 = Experiment(method, task, run, task_config=task_config).run()
    assert path2 == path and resumed["status"] == "ok" and resumed["run"]["rounds_completed"] == 3
    assert _comparable(resumed) == _comparable(full)
    assert not checkpoint.checkpoint_path(path).exists()  # removed once the run ended ok
    assert not path.with_suffix(".clients").exists()


def test_keep_checkpoints(tmp_path):
    rec, path = Experiment("fedavg", "tiny_text", dict(RUN, rounds=1, keep_checkpoints=True, out=str(tmp_path))).run()
    assert rec["status"] == "ok" and checkpoint.checkpoint_path(path).exists()
