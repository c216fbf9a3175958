"""Checkpoints: a run can be killed (SIGKILL, SIGTERM, Ctrl-C, power loss) and re-run with
the same command; it continues from its last finished round and ends with the record an
uninterrupted run would have written (bit-exact metrics on CPU).

A checkpoint is the :class:`~fedbench.runners.core.state.RunState` (``state_dict()``: tensors
and plain data only) plus the clients' private state, which the ClientStore flushes to its
folder beside the record (``<run_id>.clients/``, kept until the run ends ``ok``). It is
written atomically next to the record (``<run_id>.ckpt``: temp file, fsync, rename) after
every ``run.checkpoint_every`` rounds by :class:`Checkpointer`, and read with
``torch.load(weights_only=True)``: a checkpoint crafted to run code on load is refused
like any other unreadable one. An unreadable checkpoint (truncated, empty, garbage,
crafted) is named in one warning line, moved aside (``.ckpt.corrupt``) and the run starts
over from round 0, which its record says (``run.resume``). Nothing else needs saving:
every random draw of a round comes from a stream derived from (seed, purpose, round,
client) (``runners/core/seeds.py``), not from a generator that carries state across rounds.
The checkpoint is removed when the run ends ``ok`` unless ``run.keep_checkpoints``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from fedbench.outfiles import check_output, write_with
from fedbench.runners.outputs.callbacks import Callback
from fedbench.runners.core.state import RoundLog, RunState
from fedbench.runners.core.store import ClientStore

log = logging.getLogger(__name__)

VERSION = 3


def checkpoint_path(record_path: Path) -> Path:
    return record_path.with_suffix(".ckpt")


def clients_path(record_path: Path) -> Path:
    """The client store's folder of the run whose record is at ``record_path``."""
    return record_path.with_suffix(".clients")


class Checkpointer(Callback):
    """Saves the run after every ``every`` rounds and after the last."""

    def __init__(self, path: Path, every: int, rounds: int, run_id: str, store: ClientStore,
                 sync: Callable[[RunState], None]):
        self.path, self.every, self.rounds, self.run_id, self.store = path, every, rounds, run_id, store
        self.sync = sync  # brings the state's meter and server figures up to date before a save

    def on_round_end(self, log_: RoundLog, state: RunState):
        if self.every > 0 and (log_.round % self.every == 0 or log_.round == self.rounds):
            self.sync(state)
            save(self.path, self.run_id, state, self.store)
        return None


def save(path: Path, run_id: str, state: RunState, store: ClientStore) -> None:
    store.flush()  # the clients' private state: in the store's folder beside the record
    blob = {"version": VERSION, "run_id": run_id, "round": state.rounds_done, "state": state.state_dict(),
            "store_clients": store.clients()}
    # the one safe writer: atomic (a full disk leaves the previous checkpoint as it was)
    write_with(path, lambda fh: torch.save(blob, fh), path.parent)


def read(path: Path, run_id: str, device: torch.device) -> tuple[RunState, list[int]] | None:
    """The state and the store's clients saved at ``path`` for ``run_id``; None where the
    file is another run's or another version's. Changes nothing; an unreadable file raises."""
    blob = torch.load(path, map_location=device, weights_only=True)
    if not isinstance(blob, dict):
        raise ValueError(f"not a checkpoint (a {type(blob).__name__})")
    if blob.get("version") != VERSION or blob.get("run_id") != run_id:
        return None
    return RunState.from_state_dict(blob["state"]), [int(c) for c in blob["store_clients"]]


@dataclass
class Restored:
    state: RunState | None  # None: start from round 0
    discarded: str | None = None  # the checkpoint moved aside because it could not be read


def restore(path: Path, run_id: str, store: ClientStore, device: torch.device) -> Restored:
    """The run state saved at ``path`` for ``run_id`` (its clients adopted by ``store``), or
    a fresh start: no checkpoint, another run's or version's, or an unreadable one (moved
    aside, named in a warning)."""
    if not path.exists():
        store.clear()  # a fresh start: no private state of an older attempt
        return Restored(None)
    try:
        saved = read(path, run_id, device)
        if saved is None:
            store.clear()
            return Restored(None)
        state, clients = saved
        store.adopt(clients)
    except Exception as e:  # noqa: BLE001 -- weights_only runs no code, so whatever bytes raise is unreadable
        # (random bytes raise IndexError, UnicodeDecodeError, OverflowError, ... from the unpickler)
        aside = check_output(path.with_suffix(".ckpt.corrupt"), path.parent)  # never over a device or a link out
        os.replace(path, aside)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        log.warning("checkpoint %s cannot be read (%s): moved aside to %s; the run starts again from round 0",
                    path, reason[:200], aside.name)
        store.clear()
        return Restored(None, discarded=f"{path.name}: {reason[:200]}")
    return Restored(state)


def remove(path: Path) -> None:
    for p in (path, path.with_suffix(".ckpt.tmp")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
