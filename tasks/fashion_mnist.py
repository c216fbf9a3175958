"""Fashion-MNIST with FedLoRA's Table 1 CNNs: a real-data CPU stand-in for its CIFAR-10 setting.

10 classes, 60,000 train / 10,000 test 28x28 grayscale images (../shared/data/fashion-mnist).
The 28x28 images are zero-padded to 32x32 (2 px of black background per side, as LeNet-5
fed MNIST) and the CNNs take ``in_channels=1``; every later layer has Table 1's dimensions
(see :mod:`fedbench.tasks.cnn`). Normalised with the train set's mean/std.

Sources (first that applies):

- ``--data-dir`` holding the original IDX files (``train-images-idx3-ubyte[.gz]``,
  ``train-labels-idx1-ubyte[.gz]``, ``t10k-images-idx3-ubyte[.gz]``,
  ``t10k-labels-idx1-ubyte[.gz]``), directly or in torchvision's ``FashionMNIST/raw/``;
- ``--data-dir`` holding a ``datasets`` ``save_to_disk`` folder (columns ``image``, ``label``);
- no ``--data-dir``: HF ``zalando-datasets/fashion_mnist`` (downloaded, or from the HF cache).
"""

from __future__ import annotations

import gzip
import logging
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import TaskData
from fedbench.tasks.cnn_task import CNNTask, CNNTaskConfig, image_task_data
from fedbench.tasks.image_sources import ImageColumns, read_image_source

log = logging.getLogger(__name__)

HF_ID = "zalando-datasets/fashion_mnist"
CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049  # 0x0803: uint8, 3 dims; 0x0801: uint8, 1 dim
SIDE, PAD = 28, 2  # 28 + 2 * 2 = 32, Table 1's input side
MAX_IDX_BYTES = 2**30  # one IDX file's data (Fashion-MNIST's largest is 47 MB): refused beyond, before reading
MEAN, STD = (0.2860,), (0.3530,)  # Fashion-MNIST train set, pixel values in [0, 1]


@dataclass(frozen=True)
class FashionMnistConfig(CNNTaskConfig):
    hf_id: str = cfg_field(HF_ID, "HF dataset id used when no --data-dir is given")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "hf_id", self.hf_id.strip() != "", "must name an HF dataset")


def _missing(why: str) -> UserError:
    return UserError(f"fashion_mnist: {why}; download the four original IDX files (train-images-idx3-ubyte.gz, "
                     f"train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz from "
                     f"https://github.com/zalandoresearch/fashion-mnist) into one folder, or HF dataset {HF_ID} "
                     f"(datasets.load_dataset + save_to_disk), and pass --data-dir <folder>")


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX file (optionally gzipped) as a uint8 array of its header's dims.

    Header, big-endian: two zero bytes, the element type (0x08 = uint8), the number of
    dims, then one int32 per dim; ``magic`` = (type << 8) | dims, e.g. 2051 for images.
    The header is read first and only the bytes it announces (at most :data:`MAX_IDX_BYTES`)
    are decompressed after it, so a gzip bomb is never unpacked.
    """
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4 or int.from_bytes(head, "big") != magic:
                found = int.from_bytes(head, "big") if len(head) == 4 else None
                raise UserError(f"fashion_mnist: {path} is not an IDX file with magic {magic} (found {found})")
            n_dims = magic & 0xFF
            raw_dims = f.read(4 * n_dims)
            dims = tuple(int(d) for d in np.frombuffer(raw_dims, dtype=">i4")) if len(raw_dims) == 4 * n_dims else ()
            size = math.prod(dims)
            if len(dims) != n_dims or min(dims) < 0 or size > MAX_IDX_BYTES:
                raise UserError(f"fashion_mnist: {path}: header dims {dims} are not those of a Fashion-MNIST file "
                                f"(at most {MAX_IDX_BYTES} bytes)")
            data = f.read(size + 1)
    except (OSError, EOFError, zlib.error) as e:  # gzip: BadGzipFile (an OSError), truncated, corrupt deflate data
        raise UserError(f"fashion_mnist: cannot read {path} ({e})") from None
    if len(data) != size:
        got = f"more than {size}" if len(data) > size else str(len(data))
        raise UserError(f"fashion_mnist: {path} is truncated or padded: header dims {dims}, {got} data bytes")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def _find(folder: Path, name: str) -> Path | None:
    for p in (folder / name, folder / f"{name}.gz"):
        if p.is_file():
            return p
    return None


def read_idx_folder(root: Path) -> tuple[dict, list[str]] | None:
    """The four IDX files under ``root`` or ``root/FashionMNIST/raw``; None if none is there."""
    for folder in (root, root / "FashionMNIST" / "raw"):
        paths = {n: _find(folder, n) for pair in FILES.values() for n in pair}
        if not any(paths.values()):
            continue
        absent = [n for n, p in paths.items() if p is None]
        if absent:
            raise _missing(f"{folder} lacks {', '.join(absent)}[.gz]")
        out = {}
        for split, (img_name, lbl_name) in FILES.items():
            x = read_idx(paths[img_name], IMAGES_MAGIC)  # (N, 28, 28)
            y = read_idx(paths[lbl_name], LABELS_MAGIC).astype(np.int64)  # (N,)
            if x.shape[1:] != (SIDE, SIDE) or not len(x):
                raise UserError(f"fashion_mnist: {paths[img_name]} holds {len(x)} images of {x.shape[1]}x{x.shape[2]} "
                                f"pixels; Fashion-MNIST's are {SIDE}x{SIDE}, and a split needs at least one")
            if len(x) != len(y):
                raise UserError(f"fashion_mnist: {paths[img_name]} has {len(x)} images but "
                                f"{paths[lbl_name]} has {len(y)} labels")
            bad = np.flatnonzero(y >= len(CLASS_NAMES))
            if len(bad):
                raise UserError(f"fashion_mnist: {paths[lbl_name]}: labels[{bad[0]}] = {y[bad[0]]} is not a class id "
                                f"in 0..{len(CLASS_NAMES) - 1} (Fashion-MNIST's {len(CLASS_NAMES)} classes)")
            out[split] = (x[:, None], y)  # (N, 1, 28, 28)
        return out, list(CLASS_NAMES)
    return None


def pad_to_32(x: np.ndarray) -> np.ndarray:
    """(N, 1, 28, 28) uint8 -> (N, 1, 32, 32), zeros (background) around."""
    return np.pad(x, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))


@TASKS.register("fashion_mnist", "Fashion-MNIST, FedLoRA Table 1 CNN-1..5, 28 px zero-padded to 32 (top-1)")
class FashionMnist(CNNTask):
    config_cls = FashionMnistConfig

    def load(self) -> TaskData:
        splits, names = read_image_source("fashion_mnist", self.config.data_dir, self.config.hf_id, read_idx_folder,
                                          ImageColumns("image", "label", "L", SIDE, len(CLASS_NAMES)), _missing)
        (xtr, ytr), (xte, yte) = splits["train"], splits["test"]  # (N, 1, 28, 28) from every source
        splits = {"train": (pad_to_32(xtr), ytr), "test": (pad_to_32(xte), yte)}
        return image_task_data("fashion_mnist", splits, names or list(CLASS_NAMES), MEAN, STD, in_channels=1)
