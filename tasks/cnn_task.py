"""Base of the small-image tasks whose models are FedLoRA's Table 1 CNNs (cifar10, fashion_mnist).

Task contract for per-client models: ``archs()`` names the models a client may get
(``cnn1``..``cnn5``) and ``build_model(data, arch)`` builds one from the loaded data's
shape (no ``load()`` call: the task holds no data). The "blocks" of the
:class:`ModelBundle` are the two hidden FC layers (``fc.0`` = FC1, ``fc.1`` = FC2), the
only layers that exist in every CNN and where FedLoRA puts its adapter (Sec. 4); the
LoRA profile ``fc`` targets their ``linear``. FC3 (``head``) is the classifier. The bundle
declares the CNN's parts (:data:`CNN_PARTS`): feature extractor = convs + FC1,
representation = FC2 (500-d), head = FC3.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
import torch

from fedbench.config import cfg_field
from fedbench.tasks.base import ClassificationTask, ModelBundle, ModelParts, RunDefaults, TaskConfig, TaskData
from fedbench.tasks.cnn import ARCHS, arch_index, cnn

#: LoRA target profiles: ``fc`` (peft LoRA on FC1/FC2) and ``none`` (no peft LoRA: the
#: FedLoRA family trains whole CNNs and brings its own adapter as an extra module)
LORA_TARGETS = {"fc": ["linear"], "none": []}

#: the parts of every Table 1 CNN (its forward is this chain): the convs and FC1 extract
#: features (FC1's output: FedLoRA's direct-reduction adapter input), FC2 gives the 500-d
#: representation (FedProto's prototypes, the decomposition adapter's input), FC3 classifies;
#: a model's bundle adds the widths of its FC1 and FC2 outputs (``ModelParts.widths``)
CNN_PARTS = ModelParts(feature_extractor=("convs", "fc.0"), representation=("fc.1",), head=("head",))


def cnn_bundle(arch: str | None, in_channels: int, n_classes: int, img_size: int) -> ModelBundle:
    """The :class:`ModelBundle` of Table 1 CNN ``arch`` (None = cnn1): blocks = FC1, FC2;
    head = FC3; parts :data:`CNN_PARTS` with their widths (FC1's, 500)."""
    model = cnn(arch_index(arch), in_channels, n_classes, img_size)
    parts = dataclasses.replace(CNN_PARTS, widths=(model.fc1_dim, model.feature_dim))
    return ModelBundle(model, "fc", {k: list(v) for k, v in LORA_TARGETS.items()}, ["head"], default_target="fc",
                       parts=parts)


@dataclass(frozen=True)
class CNNTaskConfig(TaskConfig):
    model: str | None = cfg_field(None, "CNN of FedLoRA Table 1 when the method does not pick one per client: "
                                        "cnn1..cnn5 (None = cnn1)")

    def __post_init__(self) -> None:
        super().__post_init__()
        arch_index(self.model)  # UserError for an unknown name


class CNNTask(ClassificationTask):
    """Classification with a Table 1 CNN; subclasses implement ``load`` and put
    ``in_channels`` and ``img_size`` (the side fed to the model) in ``TaskData.info``."""

    config_cls = CNNTaskConfig
    # FedLoRA Sec. 6.1 trains with SGD; its tuned lr / batch size did not survive in the
    # text we have, so these are the middle of its lr grid and a common batch size.
    run_defaults = RunDefaults(optimizer="sgd", lr=0.01, batch_size=64)

    def archs(self) -> tuple[str, ...]:
        return ARCHS

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        return cnn_bundle(arch or self.config.model, data.info["in_channels"], data.n_classes, data.info["img_size"])

    def forward(self, model, batch):
        return model(batch["x"])  # (B, n_classes)


def image_task_data(task: str, splits: dict, names: list[str], mean, std, in_channels: int) -> TaskData:
    """TaskData of a small image task from uint8 splits ``{"train": (x (N, C, S, S), y), "test": ...}``:
    normalised with ``mean``/``std`` at the images' own side; ``info`` carries what the
    CNNs need (``in_channels``, ``img_size``)."""
    from fedbench.tasks.cifar100 import UInt8Images

    (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
    side = int(xtr.shape[-1])
    n_classes = max(int(max(ytr.max(), yte.max())) + 1, len(names))
    logging.getLogger(__name__).info("%s: %d train / %d test images, %d classes, %d px", task, len(ytr), len(yte),
                                     n_classes, side)
    return TaskData(
        train=UInt8Images(torch.from_numpy(np.ascontiguousarray(xtr)), ytr, side, mean, std),
        test=UInt8Images(torch.from_numpy(np.ascontiguousarray(xte)), yte, side, mean, std),
        train_labels=ytr, n_classes=n_classes,
        info={"class_names": names, "n_train": len(ytr), "n_test": len(yte), "in_channels": in_channels,
              "img_size": side},
    )
