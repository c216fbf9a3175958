"""Checkpoints: a run can be killed (SIGKILL, SIGTERM, Ctrl-C, power loss) and re-run with
the same command; it continues from its last finished round and ends with the record an
uninterrupted run would have written (bit-exact metrics on CPU).

After every ``run.checkpoint_every`` rounds the :class:`Checkpointer` callback writes,
atomically, next to the run's record (``<run_id>.ckpt``): the global method state, the
round log and client costs so far, the meter's measurements and the evaluation results;
the clients' private state is flushed to the ClientStore's folder beside it
(``<run_id>.clients/``, kept until the run ends ``ok``). Nothing else needs saving: every random draw of a round comes
from a stream derived from (seed, purpose, round, client) (``runners/seeds.py``), not from
a generator that carries state across rounds. The checkpoint is removed when the run ends
``ok`` unless ``run.keep_checkpoints``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from fedbench.methods.base import MethodState
from fedbench.runners.callbacks import Callback

VERSION = 2


def checkpoint_path(record_path: Path) -> Path:
    return record_path.with_suffix(".ckpt")


class Checkpointer(Callback):
    def __init__(self, path: Path, every: int):
        self.path, self.every = path, every

    def on_round_end(self, exp, log) -> None:
        if self.every > 0 and (log.round % self.every == 0 or log.round == exp.run_cfg.rounds):
            save(self.path, exp, log.round)


def save(path: Path, exp, rnd: int) -> None:
    blob: dict[str, Any] = {
        "version": VERSION, "run_id": exp.run_id(), "round": rnd,
        "state": {"tensors": exp.state.tensors, "extra": exp.state.extra},
        "store_clients": exp.store.clients(), "logs": exp.history.logs, "costs": exp.history.costs,
        "meter": exp.worker.meter, "last_eval": exp.last_eval, "initial_eval": exp.initial_eval,
        "per_client": exp.per_client, "elapsed": exp.elapsed(),
        "server": (exp.server.flops, exp.server.seconds),
    }
    exp.store.flush()  # the clients' private state: in the store's folder beside the record
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".ckpt.tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)


def restore(path: Path, exp) -> int:
    """Load the checkpoint at ``path`` into ``exp`` (set up already); returns the round it
    finished, or 0 when there is none for this run."""
    if not path.exists():
        exp.store.clear()  # a fresh start: no private state of an older attempt
        return 0
    blob = torch.load(path, map_location=exp.device, weights_only=False)
    if blob.get("version") != VERSION or blob.get("run_id") != exp.run_id():
        exp.store.clear()
        return 0
    exp.state = MethodState(blob["state"]["tensors"], blob["state"]["extra"])
    exp.store.adopt(blob["store_clients"])
    exp.history.logs[:] = blob["logs"]
    exp.history.costs[:] = blob["costs"]
    if exp.worker.meter is not None and blob["meter"] is not None:
        exp.worker.meter.__dict__.update(blob["meter"].__dict__)
    exp.last_eval, exp.initial_eval = blob["last_eval"], blob["initial_eval"]
    if blob["per_client"] is not None:
        exp.per_client = blob["per_client"]
    exp.server.flops, exp.server.seconds = blob["server"]
    exp.elapsed_before = blob["elapsed"]
    return int(blob["round"])


def remove(path: Path) -> None:
    for p in (path, path.with_suffix(".ckpt.tmp")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
