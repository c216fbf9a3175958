"""One run of a Ray sweep, on whichever node Ray puts it: the task's side of
:mod:`~fedbench.runners.executors.ray_sweep`.

The run trains in a scratch folder of its node (:func:`~fedbench.runners.executors.ray_files.scratch_root`),
from the checkpoint the driver holds, sends each checkpoint it writes to the driver's node
before its next round (:class:`ShipCheckpoints`) and returns its record and the other files
it wrote (:mod:`~fedbench.runners.executors.ray_files`); it never touches the driver's
records directory. The record's ``env`` names the host and the Ray node that ran it.

Ray's graceful cancel (``ray.cancel``) interrupts the task's main thread the way SIGINT
does, which does nothing where the worker inherited SIGINT ignored (a sweep started in the
background from a script: ``nohup fedbench sweep ... &``). So the task installs Python's
own SIGINT handler while the run trains (a cancelled run then writes its ``cancelled``
record) and ignores SIGINT from the moment the record is made until it has returned it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator

from fedbench.runners.core.spec import RunSpec
from fedbench.runners.core.state import RoundLog, RunState
from fedbench.runners.executors.ray_files import Mirror, scratch_root, write_files
from fedbench.runners.outputs import checkpoint
from fedbench.runners.outputs.callbacks import Callback, Stop


class ShipCheckpoints(Callback):
    """After a round whose checkpoint the run wrote (``run.checkpoint_every``), the
    checkpoint and the client store's changed files go to the driver (``send`` returns once
    the driver's node has written them)."""

    def __init__(self, mirror: Mirror, ckpt: Path, clients: Path, send: Callable[[dict[str, bytes]], None]):
        self.mirror, self.ckpt, self.clients, self.send = mirror, ckpt, clients, send

    def on_round_end(self, log: RoundLog, state: RunState) -> Stop | None:
        if self.ckpt.is_file() and self.mirror.stale(self.ckpt):
            self.send(self.mirror.changed([self.clients, self.ckpt]))  # the clients first, the checkpoint last
        return None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Python's SIGINT handler (KeyboardInterrupt) inside, SIGINT ignored after, the
    process's own handler back at the very end (main thread only: nothing elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the record is made: a late cancel cannot lose it


def run_task(spec: RunSpec, cpus: float, desk) -> dict:
    """One run in a Ray worker: ``{"record", "files", "gone"}``: its record, the files it
    wrote besides (paths relative to the records directory, bytes) that the driver has not
    got yet, and the checkpoint files it removed (it ended ``ok``). ``spec.run.out`` is the
    driver's records directory; ``desk`` the driver's :class:`~fedbench.runners.executors.ray_files.DriverFiles`."""
    import ray
    import torch

    from fedbench.runners.cli.launch import execute
    from fedbench.runners.core.environment import resolve_threads

    host, node = socket.gethostname(), ray.get_runtime_context().get_node_id()
    ray.get(desk.started.remote(spec.run_id, host, node))
    if spec.run.threads is None:  # the cores given to the run (1 for the tiny tasks); not in the run id
        threads = min(max(1, int(cpus)), resolve_threads(None, spec.task_cls.tiny))
        spec = dataclasses.replace(spec, run=dataclasses.replace(spec.run, threads=threads))
    torch.set_num_threads(spec.run.threads)
    root = scratch_root()
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.run_id}.", dir=root))
    old_sigint = signal.getsignal(signal.SIGINT)
    try:
        local = dataclasses.replace(spec, run=dataclasses.replace(spec.run, out=str(scratch)))
        record = local.record_path()
        ckpt, clients = checkpoint.checkpoint_path(record), checkpoint.clients_path(record)

        def rel(p: Path) -> str:
            return p.relative_to(scratch).as_posix()

        mirror = Mirror(scratch)
        held = ray.get(desk.checkpoint.remote(spec.run.out, rel(ckpt), rel(clients)))
        write_files(scratch, held)
        mirror.mark(held)
        ship = ShipCheckpoints(mirror, ckpt, clients, lambda files: ray.get(desk.put.remote(spec.run.out, files)))
        with interruptible():
            rec, path = execute(local, progress=False, callbacks=[ship])
        rec["env"].update(host=host, ray_node=node)
        others = sorted(p for p in scratch.rglob("*") if p.is_file() and p != path and p != ckpt
                        and clients not in p.parents)
        files = mirror.changed([clients, *others, ckpt])
        gone = [rel(p) for p in (ckpt, clients) if not p.exists()]
        return {"record": rec, "files": files, "gone": gone}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if threading.current_thread() is threading.main_thread() and old_sigint is not None:
            signal.signal(signal.SIGINT, old_sigint)


__all__ = ["ShipCheckpoints", "interruptible", "run_task"]
