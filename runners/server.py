"""Server-side tools a method may use (e.g. Fed-HeLLo's FIM scores on a proxy set).

Everything the server computes is metered apart from the clients: FLOPs and seconds go
to the record's ``server_tflops_total`` / ``server_seconds_total``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import torch

from fedbench.runners.adapters import AdapterModel
from fedbench.runners.meters import Stopwatch, count_flops
from fedbench.tasks.base import Task


class ServerTools:
    def __init__(self, am: AdapterModel, task: Task, proxy: Any | None, device: torch.device):
        self.am, self.task, self.proxy, self.device = am, task, proxy, device
        self.flops = 0.0
        self.seconds = 0.0

    @property
    def proxy_size(self) -> int:
        return 0 if self.proxy is None else len(self.proxy)

    @contextlib.contextmanager
    def metered(self) -> Iterator[None]:
        """Count FLOPs and wall time of server-side work."""
        with Stopwatch(self.device) as sw, count_flops() as fc:
            yield
        self.flops += float(fc.get_total_flops())
        self.seconds += sw.seconds

    def proxy_indices(self) -> np.ndarray:
        return np.arange(self.proxy_size)
