"""CIFAR-100 with a pretrained ViT (Fed-HeLLo, fed_hello.txt Sec. IV-A).

Fed-HeLLo fine-tunes ViT-base (ImageNet-21k, timm ``vit_base_patch16_224.augreg_in21k``)
with LoRA on query and value (rank 16, alpha 16, dropout 0.1), 100 clients, 10 per round,
batch 128, AdamW, settings ``iid``, ``20/1.0``, ``10/1.0``; metric top-1. The 32x32 images
are upscaled to the model's input side (224) on the fly, batch by batch.

Sources (first that applies):

- ``--data-dir`` holding a ``datasets`` ``save_to_disk`` folder (a DatasetDict with
  ``train`` / ``test`` splits, columns ``img`` and ``fine_label``, as on the hub);
- ``--data-dir`` holding (or being) the original ``cifar-100-python`` folder (pickled
  ``train`` / ``test`` / ``meta`` files);
- no ``--data-dir``: HF ``uoft-cs/cifar100`` (downloaded, or read from the HF cache when
  the hub cannot be reached).

The official train/test split is used as is; exact duplicate images across it (if any)
are reported in the log, not removed.

Deviation: timm's ViT fuses q, k, v in one linear layer ``attn.qkv``; the ``qv`` profile
puts LoRA on it (see :mod:`fedbench.tasks.models`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import RunDefaults, TaskData
from fedbench.tasks.cifar_pickles import batch_arrays, label_names
from fedbench.tasks.image_domains import VisionConfig, VisionTask
from fedbench.tasks.image_sources import ImageColumns, read_image_source
from fedbench.tasks.partition import check_disjoint

log = logging.getLogger(__name__)

HF_ID = "uoft-cs/cifar100"
N_CLASSES = 100


@dataclass(frozen=True)
class Cifar100Config(VisionConfig):
    hf_id: str = cfg_field(HF_ID, "HF dataset id used when no --data-dir is given")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "hf_id", self.hf_id.strip() != "", "must name an HF dataset")


class UInt8Images:
    """Images held as uint8 (N, 3, H, W); ``batch`` resizes to ``img_size`` and normalises."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray, img_size: int, mean: Sequence[float],
                 std: Sequence[float]):
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        self.img_size = img_size
        self.mean = torch.tensor(mean, dtype=torch.float32)[None, :, None, None]  # (1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32)[None, :, None, None]

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, idx) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
        x = self.images[idx].to(torch.float32).div_(255.0)  # (B, 3, 32, 32)
        if x.shape[-1] != self.img_size:
            x = F.interpolate(x, size=(self.img_size, self.img_size), mode="bicubic", align_corners=False)
        x = (x.clamp_(0.0, 1.0) - self.mean) / self.std  # (B, 3, S, S)
        return {"x": x, "y": torch.from_numpy(self.labels[idx.numpy()])}

    def __getitem__(self, i: int) -> dict:
        b = self.batch([i])
        return {"x": b["x"][0], "y": int(b["y"][0])}

    def subset(self, idx) -> "UInt8Images":
        idx = np.asarray(idx, dtype=np.int64)
        return UInt8Images(self.images[torch.from_numpy(idx)], self.labels[idx], self.img_size,
                           self.mean.flatten().tolist(), self.std.flatten().tolist())


def _missing(why: str) -> UserError:
    return UserError(f"cifar100: {why}; download HF dataset {HF_ID} (datasets.load_dataset + save_to_disk) or the "
                     f"original cifar-100-python archive from https://www.cs.toronto.edu/~kriz/cifar.html and pass "
                     f"--data-dir <folder>")


def read_python_folder(folder: Path) -> tuple[dict, list[str]]:
    """The original pickles: {'train'|'test': (uint8 (N,3,32,32), fine labels)}, class names;
    read without running code, labels checked against the class list
    (:mod:`fedbench.tasks.cifar_pickles`)."""
    meta = folder / "meta"
    names = label_names(meta, b"fine_label_names", "cifar100") if meta.is_file() else []
    n_classes, classes = (len(names), str(meta)) if names else (N_CLASSES, "CIFAR-100")
    out = {}
    for split in ("train", "test"):
        out[split] = batch_arrays(folder / split, b"fine_labels", n_classes, "cifar100", classes)
        if not len(out[split][1]):
            raise UserError(f"cifar100: {folder / split} holds no images")
    return out, names


def _read_folder(root: Path) -> tuple[dict, list[str]] | None:
    """The original ``cifar-100-python`` pickles in ``root`` or ``root/cifar-100-python``."""
    for folder in (root, root / "cifar-100-python"):
        if (folder / "train").is_file() and (folder / "test").is_file():
            return read_python_folder(folder)
    return None


def read_source(data_dir: str | None, hf_id: str) -> tuple[dict, list[str]]:
    """Splits and class names: the original pickles, a save_to_disk folder or the hub
    (:func:`~fedbench.tasks.image_sources.read_image_source`)."""
    return read_image_source("cifar100", data_dir, hf_id, _read_folder,
                             ImageColumns("img", "fine_label", "RGB", 32, N_CLASSES), _missing)


def _digests(x: np.ndarray) -> list[str]:
    return [hashlib.blake2b(row.tobytes(), digest_size=12).hexdigest() for row in x]


@TASKS.register("cifar100", "CIFAR-100, ViT-B/16 in21k upscaled 32 -> 224 (top-1)")
class Cifar100(VisionTask):
    config_cls = Cifar100Config
    default_profile = "qv"  # Fed-HeLLo: LoRA on query and value
    run_defaults = RunDefaults(optimizer="adamw", lr=1e-3, batch_size=128, clients=100)  # Fed-HeLLo
    server_holdout = 100  # Fed-HeLLo's CIFAR-100 proxy set

    def load(self) -> TaskData:
        splits, names = read_source(self.config.data_dir, self.config.hf_id)
        (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
        try:
            check_disjoint(_digests(xtr), _digests(xte))
        except ValueError as e:
            log.warning("cifar100: the official split has identical images on both sides: %s", e)
        n_classes = max(int(max(ytr.max(), yte.max())) + 1, len(names))
        size, mean, std = self.image_settings()
        log.info("cifar100: %d train / %d test images, %d classes, fed at %d px", len(ytr), len(yte),
                 n_classes, size)
        return TaskData(
            train=UInt8Images(torch.from_numpy(xtr), ytr, size, mean, std),
            test=UInt8Images(torch.from_numpy(xte), yte, size, mean, std),
            train_labels=ytr, n_classes=n_classes,
            info={"class_names": names, "n_train": len(ytr), "n_test": len(yte)},
        )
