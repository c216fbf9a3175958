"""The files of a Ray sweep's runs come back to the driver's node.

A run of ``fedbench sweep --workers/--address`` never writes the records directory
(``--out``) from the node it runs on: it trains in a scratch folder private to that node
(``$FEDBENCH_SCRATCH``, else ``<system temp>/fedbench-scratch``; removed when the task ends)
and its files travel back:

* each checkpoint (``<run_id>.ckpt`` and the client store's changed ``<run_id>.clients/``
  files), as soon as the run has written it and before its next round, to
  :class:`DriverFiles`, an actor pinned to the driver's node, which writes them into
  ``--out`` (the clients' files first, the checkpoint last, each atomically);
* at the end, the record and every other file the run wrote (a saved model, tracker logs),
  returned by the task; the driver writes them, the record with the one record writer.

So ``--out`` needs to exist on the driver's node only, and a run started again (retried
after its node died, or a re-run of the sweep after the driver died) starts from the
checkpoint the driver holds: :meth:`DriverFiles.checkpoint` sends it to the run's node.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from fedbench.outfiles import write_bytes

#: environment variable naming a node's scratch folder for the runs it executes
SCRATCH_ENV = "FEDBENCH_SCRATCH"


def scratch_root() -> Path:
    """This node's folder for the runs it executes (``$FEDBENCH_SCRATCH``, else under the
    system temp folder)."""
    return Path(os.environ.get(SCRATCH_ENV) or Path(tempfile.gettempdir()) / "fedbench-scratch")


def _under(root: Path, rel: str) -> Path:
    """``root / rel``, refused unless ``rel`` is a relative path that stays under ``root``."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise ValueError(f"not a path under the records directory: {rel!r}")
    return root / rel


def write_files(root: str | os.PathLike, files: dict[str, bytes]) -> None:
    """Write ``files`` (path relative to ``root`` -> bytes) under ``root``, in the given
    order, each atomically through :func:`fedbench.outfiles.write_bytes` (a device, FIFO or
    symlink out of ``root`` in the way is refused)."""
    root = Path(root)
    for rel, data in files.items():
        write_bytes(_under(root, rel), data, root)  # the one safe writer: nothing outside root


def remove_paths(root: str | os.PathLike, rels: list[str]) -> None:
    """Remove the files or folders ``rels`` (relative to ``root``) where they exist."""
    for rel in rels:
        path = _under(Path(root), rel)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def read_checkpoint(root: str | os.PathLike, ckpt: str, clients: str) -> dict[str, bytes]:
    """The checkpoint ``ckpt`` under ``root`` with its client store's files (``clients``,
    a folder), ready for :func:`write_files` (clients first, the checkpoint last); empty
    where there is no checkpoint."""
    root = Path(root)
    path = _under(root, ckpt)
    if not path.is_file():
        return {}
    folder = _under(root, clients)
    out = {f"{clients}/{p.name}": p.read_bytes()
           for p in sorted(folder.glob("*.pt")) if p.is_file()} if folder.is_dir() else {}
    out[ckpt] = path.read_bytes()
    return out


class Mirror:
    """What a run's scratch folder holds that the driver has not got yet (by size and
    modification time of each file)."""

    def __init__(self, root: Path):
        self.root = root
        self.sent: dict[str, tuple[int, int]] = {}

    def _sig(self, path: Path) -> tuple[int, int]:
        st = path.stat()
        return st.st_mtime_ns, st.st_size

    def mark(self, rels) -> None:
        """``rels`` are on the driver as they are here."""
        for rel in rels:
            self.sent[rel] = self._sig(self.root / rel)

    def stale(self, path: Path) -> bool:
        """Whether the file ``path`` is new or changed since it was last marked."""
        return self.sent.get(path.relative_to(self.root).as_posix()) != self._sig(path)

    def changed(self, paths: list[Path]) -> dict[str, bytes]:
        """Of the files ``paths`` (and the files under the folders among them), those new or
        changed since they were last marked, in the order given, marked now."""
        files = []
        for p in paths:
            files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p] if p.is_file() else []
        out = {}
        for f in files:
            rel = f.relative_to(self.root).as_posix()
            if self.sent.get(rel) != self._sig(f):
                out[rel] = f.read_bytes()
                self.mark([rel])
        return out


class DriverFiles:
    """A Ray actor on the driver's node: writes the runs' checkpoints into the records
    directory, hands them to a run that starts again, and knows where each run last started."""

    def __init__(self) -> None:
        self.where: dict[str, dict] = {}

    def started(self, run_id: str, host: str, node: str) -> None:
        self.where[run_id] = {"host": host, "ray_node": node}

    def placement(self, run_id: str) -> dict:
        """``{"host", "ray_node"}`` of the run's last start (Nones where it never started)."""
        return dict(self.where.get(run_id) or {"host": None, "ray_node": None})

    def checkpoint(self, root: str, ckpt: str, clients: str) -> dict[str, bytes]:
        return read_checkpoint(root, ckpt, clients)

    def put(self, root: str, files: dict[str, bytes]) -> None:
        write_files(root, files)


__all__ = ["DriverFiles", "Mirror", "SCRATCH_ENV", "read_checkpoint", "remove_paths", "scratch_root",
           "write_files"]
