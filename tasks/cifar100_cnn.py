"""CIFAR-100 with FedLoRA's Table 1 CNNs (papers/fedlora_model_heterogeneous.txt, Sec. 6.1,
Table 3): the CNN counterpart of ``cifar100`` (which is Fed-HeLLo's ViT setting).

FedLoRA's CIFAR-100 setting: 10 of 100 classes per client (``--setting 10/-``), each
client's data split 8:1:1, CNN-1 for every client or CNN-1..5 by client id. Images are
fed at 32x32, normalised with CIFAR-100's train statistics. Sources: as ``cifar100``
(``--data-dir`` with ``cifar-100-python`` or a ``save_to_disk`` folder, else HF
``uoft-cs/cifar100``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


from fedbench.config import cfg_field
from fedbench.tasks import TASKS
from fedbench.tasks.base import TaskData
from fedbench.tasks.cifar100 import HF_ID, read_source
from fedbench.tasks.cnn_task import CNNTask, CNNTaskConfig, image_task_data

log = logging.getLogger(__name__)

MEAN, STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)  # CIFAR-100 train set, per channel


@dataclass(frozen=True)
class Cifar100CNNConfig(CNNTaskConfig):
    hf_id: str = cfg_field(HF_ID, "HF dataset id used when no --data-dir is given")


@TASKS.register("cifar100_cnn", "CIFAR-100, FedLoRA Table 1 CNN-1..5 at 32 px (top-1)")
class Cifar100CNN(CNNTask):
    config_cls = Cifar100CNNConfig

    def load(self) -> TaskData:
        splits, names = read_source(self.config.data_dir, self.config.hf_id)
        return image_task_data("cifar100_cnn", splits, names, MEAN, STD, in_channels=3)
