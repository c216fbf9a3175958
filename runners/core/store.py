"""ClientStore: each client's private tensors between rounds (FedLoRA's local CNN,
LG-FedAvg's local extractor, ...).

Kept in memory up to ``budget_bytes``; beyond it the least recently used clients are
spilled to ``root/<client>.pt`` and read back when they are needed again, so the server's
memory stays flat however many clients a federation has. Tensors are stored on the CPU.
Only the engine touches the store: methods declare private keys (``Method.private_keys``)
and never see it. ``flush`` writes every client's state to ``root`` (what a checkpoint
relies on: the folder sits next to the record, named after the run id); ``adopt``
takes such a folder back when a run resumes.
"""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from pathlib import Path

import torch

from fedbench.methods.base import tensor_bytes
from fedbench.outfiles import write_with


class ClientStore:
    def __init__(self, root: str | os.PathLike, budget_bytes: int):
        self.root = Path(root)
        self.budget_bytes = int(budget_bytes)
        self._mem: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()  # LRU order, newest last
        self._mem_bytes = 0
        self._on_disk: set[int] = set()  # clients whose latest state is in root
        self._dirty: set[int] = set()  # in memory, newer than on disk
        self.spills = 0  # clients written to disk to free memory

    def __contains__(self, client: int) -> bool:
        return client in self._mem or client in self._on_disk

    def __len__(self) -> int:
        return len(set(self._mem) | self._on_disk)

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    def clients(self) -> list[int]:
        return sorted(set(self._mem) | self._on_disk)

    def _path(self, client: int) -> Path:
        return self.root / f"{int(client)}.pt"

    def put(self, client: int, tensors: dict[str, torch.Tensor]) -> None:
        """Keep ``tensors`` (copied to CPU) as ``client``'s private state."""
        if not tensors:
            return
        self._drop_mem(client)
        self._mem[client] = {k: t.detach().to("cpu", copy=True) for k, t in tensors.items()}
        self._mem_bytes += tensor_bytes(self._mem[client])
        self._dirty.add(client)
        self._spill()

    def get(self, client: int) -> dict[str, torch.Tensor] | None:
        """``client``'s private state, or None if it has none yet."""
        if client in self._mem:
            self._mem.move_to_end(client)
            return dict(self._mem[client])
        if client in self._on_disk:
            return torch.load(self._path(client), map_location="cpu", weights_only=True)
        return None

    def _drop_mem(self, client: int) -> None:
        old = self._mem.pop(client, None)
        if old is not None:
            self._mem_bytes -= tensor_bytes(old)

    def _write(self, client: int, tensors: dict[str, torch.Tensor]) -> None:
        write_with(self._path(client), lambda fh: torch.save(tensors, fh), self.root)
        self._on_disk.add(client)
        self._dirty.discard(client)

    def _spill(self) -> None:
        while self._mem_bytes > self.budget_bytes and len(self._mem) > 1:
            client, tensors = self._mem.popitem(last=False)
            self._mem_bytes -= tensor_bytes(tensors)
            if client in self._dirty:
                self._write(client, tensors)
            self.spills += 1

    def flush(self) -> None:
        """Write every client whose state in memory is newer than on disk."""
        for client in sorted(self._dirty):
            self._write(client, self._mem[client])

    def adopt(self, clients: list[int]) -> None:
        """Take back the flushed states of ``clients`` in ``root`` (a resumed run)."""
        missing = [c for c in clients if not self._path(c).exists()]
        if missing:
            raise FileNotFoundError(f"client store {self.root} lacks client {missing[0]}'s state")
        self._on_disk.update(clients)

    def clear(self) -> None:
        """Forget everything and remove the folder (a run that starts afresh)."""
        self.release()
        self._on_disk.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def release(self) -> None:
        """Drop the memory copies; the folder stays (for a checkpoint of a run that did not finish)."""
        self._mem.clear()
        self._mem_bytes = 0
        self._dirty.clear()

    close = clear
