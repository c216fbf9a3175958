"""ClientStore: each client's private tensors between rounds (FedLoRA's local CNN,
LG-FedAvg's local extractor, ...).

Kept in memory up to ``budget_bytes``; beyond it the least recently used clients are
spilled to ``root/<client>.pt`` and read back when they are sampled again, so the
server's memory stays flat however many clients a federation has. Tensors are stored on
the CPU. Only the engine touches the store: methods declare private keys
(``Method.private_keys``) and never see it.
"""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from pathlib import Path

import torch

from fedbench.runners.adapters import tensor_bytes


class ClientStore:
    def __init__(self, root: str | os.PathLike, budget_bytes: int):
        self.root = Path(root)
        self.budget_bytes = int(budget_bytes)
        self._mem: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()  # LRU order, newest last
        self._mem_bytes = 0
        self._on_disk: set[int] = set()
        self.spills = 0  # clients written to disk so far

    def __contains__(self, client: int) -> bool:
        return client in self._mem or client in self._on_disk

    def __len__(self) -> int:
        return len(self._mem) + len(self._on_disk - set(self._mem))

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    def _path(self, client: int) -> Path:
        return self.root / f"{int(client)}.pt"

    def put(self, client: int, tensors: dict[str, torch.Tensor]) -> None:
        """Keep ``tensors`` (copied to CPU) as ``client``'s private state."""
        if not tensors:
            return
        self._drop_mem(client)
        self._mem[client] = {k: t.detach().to("cpu", copy=True) for k, t in tensors.items()}
        self._mem_bytes += tensor_bytes(self._mem[client])
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

    def _spill(self) -> None:
        while self._mem_bytes > self.budget_bytes and len(self._mem) > 1:
            client, tensors = self._mem.popitem(last=False)
            self._mem_bytes -= tensor_bytes(tensors)
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self._path(client).with_suffix(".tmp")
            torch.save(tensors, tmp)
            os.replace(tmp, self._path(client))
            self._on_disk.add(client)
            self.spills += 1

    def state_dict(self) -> dict[int, dict[str, torch.Tensor]]:
        """Every client's state (memory and disk), for checkpoints."""
        return {c: self.get(c) for c in sorted(set(self._mem) | self._on_disk)}

    def close(self) -> None:
        """Forget everything and remove the spill folder."""
        self._mem.clear()
        self._mem_bytes = 0
        self._on_disk.clear()
        shutil.rmtree(self.root, ignore_errors=True)
