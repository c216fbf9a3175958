"""Faults end a run with a record that says so: SIGTERM (schedulers, `timeout`) like Ctrl-C,
a loss that explodes but stays finite, bad data found while training."""

import json
import os
import signal
import subprocess
import sys
import time

from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment

RUN = dict(clients=4, per_round=2, seed=0)


def test_exploding_finite_loss_fails_the_run(tmp_path, monkeypatch):
    """The loss grows 1e4x after round 1 (4 steps: 2 clients x 2 batches) but stays finite:
    failed after two such rounds."""
    from fedbench.tasks.tiny import TinyText

    loss = TinyText.loss
    steps = {"n": 0}

    def exploding(self, model, batch):
        steps["n"] += 1
        value, out = loss(self, model, batch)
        return (value * 1e4 if steps["n"] > 4 else value), out

    monkeypatch.setattr(TinyText, "loss", exploding)
    # no meter: its measuring pass of the first step would be one more call of the loss
    rec, _ = Experiment("fedavg", "tiny_text", dict(RUN, rounds=6, measure_flops=False, out=str(tmp_path)),
                        task_config={"n_train": 160, "n_test": 48}).run()
    assert rec["status"] == "failed" and "diverged" in rec["error"], rec["error"]
    assert rec["run"]["rounds_completed"] == 3  # round 1 normal, rounds 2 and 3 over the bound


def test_bad_data_found_while_training_is_a_failed_record(tmp_path, monkeypatch):
    from fedbench.tasks.tiny import TinyText

    calls = {"n": 0}
    loss = TinyText.loss

    def unreadable(self, model, batch):
        calls["n"] += 1
        if calls["n"] > 3:
            raise UserError("unreadable image /data/x.jpg: truncated file")
        return loss(self, model, batch)

    monkeypatch.setattr(TinyText, "loss", unreadable)
    rec, _ = Experiment("fedavg", "tiny_text", dict(RUN, rounds=3, out=str(tmp_path)),
                        task_config={"n_train": 160, "n_test": 48}).run()
    assert rec["status"] == "failed" and "unreadable image /data/x.jpg" in rec["error"]


def test_a_failure_while_setting_up_still_writes_a_valid_record(tmp_path, monkeypatch):
    """A bug hit half-way through set-up (here: building the server tools, after the
    partition and the tiers) leaves a `failed` record with what was set up."""
    from fedbench.runners.core import experiment
    from fedbench.records import validate_record

    def broken(*args, **kwargs):
        raise RuntimeError("server tools broke")

    monkeypatch.setattr(experiment, "ServerTools", broken)
    rec, path = Experiment("fedavg", "tiny_text", dict(RUN, rounds=1, out=str(tmp_path)),
                           task_config={"n_train": 160, "n_test": 48}).run()
    tb = path.with_name(path.stem + ".traceback.txt")
    assert rec["status"] == "failed" and rec["error"] == f"RuntimeError: server tools broke (traceback in {tb.name} beside the record)"
    assert "server tools broke" in tb.read_text() and "Traceback" in tb.read_text()
    validate_record(json.loads(path.read_text()))
    assert rec["run"]["n_clients"] == 4 and rec["run"]["client_tiers"] and rec["run"]["holdout_indices"]
    assert rec["run"]["method_layout"] == {} and rec["run"]["client_archs"] == {}


def test_sigterm_records_cancelled_with_the_finished_rounds(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "fedbench", "run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "200",
           "--clients", "4", "--per-round", "2", "--out", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    ckpts = []
    while time.time() < deadline and not ckpts and proc.poll() is None:  # a checkpoint: a round finished
        time.sleep(0.5)
        ckpts = list(tmp_path.rglob("*.ckpt"))
    assert ckpts, f"no round finished in time: {proc.poll()} {proc.stdout.read() if proc.poll() is not None else ''}"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    rec = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert rec["status"] == "cancelled" and "SIGTERM" in rec["error"]
    assert rec["run"]["rounds_completed"] >= 1
