"""``noisy_blobs``: Gaussian blobs in 8 dimensions, classified by a 2-block MLP.

The tutorial's example of a task with a config of its own (docs/tutorial/add-task.md):
saved as ``tasks/noisy_blobs.py`` it is ``--task noisy_blobs``. The data are made up from
a fixed seed, so every run sees the same examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedbench.config import cfg_field, check, check_int
from fedbench.tasks import TASKS
from fedbench.tasks.base import ArrayDataset, ClassificationTask, ModelBundle, RunDefaults, TaskConfig, TaskData

N_IN, WIDTH = 8, 16


@dataclass(frozen=True)
class NoisyBlobsConfig(TaskConfig):
    n_classes: int = cfg_field(4, "number of classes (blob centres)")
    n_train: int = cfg_field(300, "training examples")
    n_test: int = cfg_field(100, "test examples")
    noise: float = cfg_field(1.0, "std of the Gaussian noise around each centre (the centres' std is 2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "data_dir", self.data_dir is None, "noisy_blobs makes its own data; give no --data-dir")
        check_int(self, "n_classes", 2, 100)
        check_int(self, "n_train", 1, 100_000)
        check_int(self, "n_test", 1, 100_000)
        check(self, "noise", self.noise >= 0, "must be a number >= 0")


class MLP(nn.Module):
    def __init__(self, n_classes: int):
        super().__init__()
        self.proj = nn.Linear(N_IN, WIDTH)
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(2)])
        self.head = nn.Linear(WIDTH, n_classes)

    def forward(self, x):  # (B, N_IN) -> (B, n_classes)
        return self.head(self.blocks(torch.relu(self.proj(x))))


@TASKS.register("noisy_blobs", "Gaussian blobs in 8 dimensions, a 2-block MLP (top-1)")
class NoisyBlobs(ClassificationTask):
    config_cls = NoisyBlobsConfig
    tiny = True  # runs on a CPU in seconds: one torch thread by default
    run_defaults = RunDefaults(clients=4, optimizer="adamw", lr=0.05, batch_size=32)

    def load(self) -> TaskData:
        c = self.config
        rng = np.random.default_rng(0)
        centres = rng.normal(size=(c.n_classes, N_IN)) * 2
        y = rng.integers(0, c.n_classes, c.n_train + c.n_test)
        x = centres[y] + rng.normal(size=(len(y), N_IN)) * c.noise
        ds = ArrayDataset({"x": torch.tensor(x, dtype=torch.float32), "y": torch.from_numpy(y)})
        train, test = np.arange(c.n_train), np.arange(c.n_train, len(y))
        return TaskData(train=ds.subset(train), test=ds.subset(test), train_labels=y[:c.n_train],
                        n_classes=c.n_classes)

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        # LoRA goes on the first Linear of each block ("lin" profile); proj and head are
        # trained whole by every client and averaged by the server
        return ModelBundle(MLP(data.n_classes), "blocks", {"lin": ["0"]}, ["proj", "head"], default_target="lin")

    def forward(self, model, batch):
        return model(batch["x"])
