"""Finished results are never lost: a re-run skips, a forced re-run replaces the record
only when it ends ok, signals and a full disk keep every earlier file, and a checkpoint
can never run code."""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedbench import outfiles
from fedbench.runners.outputs import checkpoint
from fedbench.runners.cli.cli import main
from fedbench.runners.core.experiment import Experiment

from smoke import SMALL_TASK_CONFIGS

SETS = [a for k, v in SMALL_TASK_CONFIGS["tiny_text"].items() for a in ("--set", f"task.{k}={v}")]


def _argv(out, *extra):
    return ["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "2", "--clients", "2", "--out", str(out),
            "--no-progress", *SETS, *extra]


def _record(out) -> Path:
    found = [p for p in Path(out).rglob("*.json") if p.name.count(".") == 1]
    assert len(found) == 1, found
    return found[0]


def test_rerunning_a_finished_run_prints_one_line_and_leaves_the_record(tmp_path, capsys):
    assert main(_argv(tmp_path)) == 0
    path = _record(tmp_path)
    before = path.read_bytes()
    capsys.readouterr()
    assert main(_argv(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "done already" in out and "--force" in out
    assert path.read_bytes() == before


def test_a_failed_forced_rerun_never_replaces_the_ok_record(tmp_path, monkeypatch, capsys):
    assert main(_argv(tmp_path)) == 0
    path = _record(tmp_path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise RuntimeError("injected failure in training")

    monkeypatch.setattr("fedbench.runners.executors.worker.train_client", boom)
    assert main(_argv(tmp_path, "--force")) == 1
    assert path.read_bytes() == before  # the finished record is untouched ...
    failed = json.loads(path.with_suffix(".failed.json").read_text())  # ... the failed one lies beside it
    assert failed["status"] == "failed" and "injected failure" in failed["error"]


def test_a_full_disk_is_one_line_and_keeps_every_earlier_file(tmp_path, monkeypatch, capsys):
    assert main(_argv(tmp_path, "--set", "keep_checkpoints=true")) == 0
    path = _record(tmp_path)
    ckpt = checkpoint.checkpoint_path(path)
    before, ckpt_before = path.read_bytes(), ckpt.read_bytes()
    capsys.readouterr()

    def full(tmp, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outfiles, "_rename", full)
    code = main(_argv(tmp_path, "--force", "--set", "keep_checkpoints=true"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err
    assert path.read_bytes() == before and ckpt.read_bytes() == ckpt_before
    assert not list(tmp_path.rglob("*.tmp"))  # no half-written temp file left behind


class _RunsCode:
    """Unpickling this creates a marker file: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _spec_path(tmp_path):
    exp = Experiment("fedavg", "tiny_text", {"rounds": 2, "clients": 2, "out": str(tmp_path)},
                     task_config=SMALL_TASK_CONFIGS["tiny_text"])
    return exp, checkpoint.checkpoint_path(exp.record_path())


@pytest.mark.parametrize("content", ["crafted", "truncated", "empty", "garbage"])
def test_an_unreadable_checkpoint_is_moved_aside_and_the_run_starts_over(content, tmp_path, caplog):
    exp, ckpt = _spec_path(tmp_path)
    ckpt.parent.mkdir(parents=True)
    marker = tmp_path / "code_ran"
    if content == "crafted":
        torch.save({"version": checkpoint.VERSION, "run_id": exp.spec.run_id, "state": _RunsCode(marker)}, ckpt)
        with open(tmp_path / "plain.pkl", "wb") as fh:  # the same object through plain pickle does run code
            pickle.dump(_RunsCode(tmp_path / "control"), fh)
        with open(tmp_path / "plain.pkl", "rb") as fh:
            pickle.load(fh)
        assert (tmp_path / "control").exists()
    elif content == "truncated":
        torch.save({"version": checkpoint.VERSION, "run_id": exp.spec.run_id, "round": 1}, ckpt)
        ckpt.write_bytes(ckpt.read_bytes()[:40])
    else:
        ckpt.write_bytes(b"" if content == "empty" else random.Random(0).randbytes(300))
    rec, path = exp.run()
    assert not marker.exists()  # nothing in the checkpoint ran
    assert rec["status"] == "ok" and rec["run"]["rounds_completed"] == 2
    assert rec["run"]["resume"]["from_round"] == 0 and ckpt.name in rec["run"]["resume"]["discarded_checkpoint"]
    assert ckpt.with_suffix(".ckpt.corrupt").exists() and not ckpt.exists()
    assert any("cannot be read" in r.getMessage() and ckpt.name in r.getMessage() for r in caplog.records)


def test_no_bytes_in_a_checkpoint_file_fail_the_run(tmp_path):
    """Random bytes raise whatever the unpickler trips on (IndexError, UnicodeDecodeError, ...;
    CI once drew an IndexError): every one is an unreadable checkpoint, none a failed run."""
    from fedbench.runners.core.store import ClientStore

    store = ClientStore(tmp_path / "clients", budget_bytes=10**6)
    rng = random.Random(1)
    for i in range(300):
        ckpt = tmp_path / f"r{i}.ckpt"
        ckpt.write_bytes(rng.randbytes(rng.choice([1, 2, 8, 40, 300, 2000])))
        restored = checkpoint.restore(ckpt, "run", store, torch.device("cpu"))
        assert restored.state is None and restored.discarded, i
        assert not ckpt.exists() and ckpt.with_suffix(".ckpt.corrupt").exists()


def _popen(out, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "fedbench", *_argv(out, *extra)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("delay", [0.3, 3.0])
def test_sigterm_at_any_moment_of_a_forced_rerun_keeps_the_finished_record(delay, tmp_path):
    assert main(_argv(tmp_path)) == 0
    path = _record(tmp_path)
    before = path.read_bytes()
    proc = _popen(tmp_path, "--force", "--rounds", "200")  # another run id: still running when signalled
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert path.read_bytes() == before


def test_two_sigterms_in_a_row_still_write_the_cancelled_record(tmp_path):
    proc = _popen(tmp_path, "--rounds", "200", "--clients", "4")
    deadline = time.time() + 240
    while time.time() < deadline and not list(tmp_path.rglob("*.ckpt")) and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    # 130; or killed by the second signal itself when it came after the command had finished
    assert proc.returncode in (130, -signal.SIGTERM), out
    rec = json.loads(_record(tmp_path).read_text())
    assert rec["status"] == "cancelled" and "CANCELLED" in out and "Traceback" not in out


def test_sigterm_during_set_up_still_writes_a_record(tmp_path, monkeypatch):
    def interrupted(self):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the task's data load

    monkeypatch.setattr("fedbench.tasks.tiny.TinyText.load", interrupted)
    rec, path = Experiment("fedavg", "tiny_text", {"rounds": 2, "clients": 2, "out": str(tmp_path)},
                           task_config=SMALL_TASK_CONFIGS["tiny_text"]).run()
    assert rec["status"] == "cancelled" and "SIGTERM" in rec["error"] and path.exists()
