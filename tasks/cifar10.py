"""CIFAR-10 with FedLoRA's Table 1 CNNs (papers/fedlora_model_heterogeneous.txt, Sec. 6.1).

FedLoRA's CIFAR-10 setting: 2 of 10 classes per client, each client's data split 8:1:1
into train / val / test, CNN-1 for every client (model-homogeneous) or CNN-1..5 by client
id (model-heterogeneous). Images are fed at 32x32, normalised with CIFAR-10's statistics.

Sources (first that applies):

- ``--data-dir`` holding (or being) the original ``cifar-10-batches-py`` folder (pickled
  ``data_batch_1``..``5``, ``test_batch``, ``batches.meta``);
- ``--data-dir`` holding a ``datasets`` ``save_to_disk`` folder (``train`` / ``test``,
  columns ``img`` and ``label`` as on the hub);
- no ``--data-dir``: HF ``uoft-cs/cifar10`` (downloaded, or from the HF cache offline).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import TaskData
from fedbench.tasks.cifar_pickles import batch_arrays, label_names
from fedbench.tasks.cnn_task import CNNTask, CNNTaskConfig, image_task_data
from fedbench.tasks.image_sources import ImageColumns, read_image_source

log = logging.getLogger(__name__)

HF_ID = "uoft-cs/cifar10"
FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
N_CLASSES = 10
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # CIFAR-10 train set, per channel


@dataclass(frozen=True)
class Cifar10Config(CNNTaskConfig):
    hf_id: str = cfg_field(HF_ID, "HF dataset id used when no --data-dir is given")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "hf_id", self.hf_id.strip() != "", "must name an HF dataset")


def _missing(why: str) -> UserError:
    return UserError(f"cifar10: {why}; download the original {FOLDER} archive (cifar-10-python.tar.gz from "
                     f"https://www.cs.toronto.edu/~kriz/cifar.html, unpacked) or HF dataset {HF_ID} "
                     f"(datasets.load_dataset + save_to_disk) and pass --data-dir <folder>")


def read_batches_folder(root: Path) -> tuple[dict, list[str]] | None:
    """The original pickled batches under ``root`` or ``root/cifar-10-batches-py`` (read
    without running code, labels checked against the class list; see
    :mod:`fedbench.tasks.cifar_pickles`); None if absent."""
    for folder in (root, root / FOLDER):
        if (folder / "test_batch").is_file() and any((folder / n).is_file() for n in TRAIN_FILES):
            absent = [n for n in TRAIN_FILES if not (folder / n).is_file()]
            if absent:
                raise _missing(f"{folder} lacks {', '.join(absent)}")
            meta = folder / "batches.meta"
            names = label_names(meta, b"label_names", "cifar10") if meta.is_file() else []
            n_classes, classes = (len(names), str(meta)) if names else (N_CLASSES, "CIFAR-10")
            splits = {}
            for split, files in (("train", TRAIN_FILES), ("test", ("test_batch",))):
                parts = [batch_arrays(folder / n, b"labels", n_classes, "cifar10", classes) for n in files]
                splits[split] = (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
                if not len(splits[split][1]):
                    raise UserError(f"cifar10: the {split} batches in {folder} hold no images")
            return splits, names
    return None


@TASKS.register("cifar10", "CIFAR-10, FedLoRA Table 1 CNN-1..5 at 32 px (top-1)")
class Cifar10(CNNTask):
    config_cls = Cifar10Config

    def load(self) -> TaskData:
        splits, names = read_image_source("cifar10", self.config.data_dir, self.config.hf_id, read_batches_folder,
                                          ImageColumns("img", "label", "RGB", 32, N_CLASSES), _missing)
        return image_task_data("cifar10", splits, names, MEAN, STD, in_channels=3)
