"""Multi-domain image classification from local folders: DomainNet and NICO++ (FedRA).

FedRA (fedra_2024_v2_arxiv.txt, Sec. 4.1) fine-tunes a 12-block ViT-B/16 or MLP-Mixer
B/16 pre-trained on ImageNet-21k (timm) on NICO++ (60 classes, six styles: autumn, dim,
grass, outdoor, rock, water) and DomainNet ("only the first 100 categories"; six domains);
clients are domains (``domain``) or Dirichlet(0.5) splits of domains
(``domain+dir(0.5)x5``), with layer budgets 12, 10, 8, 6, 4, 3. Fed-HeLLo uses DomainNet
with ``25/D1`` / ``15/D1`` splits. Quality is top-1 per domain and their mean.

Both tasks read the same on-disk layout (also PACS, ``../shared/data/pacs``)::

    <data_dir>/<domain>/<class>/<image>            every domain folder found is a domain
    <data_dir>/<domain>_train.txt, _test.txt       optional: "<relative path> <label>" lines
    <data_dir>/classes.txt                         optional: class names in label order

With split files (official DomainNet) labels come from them; without (NICO++), classes
are the sorted union of class-folder names and each (domain, class) cell is split into
train/test with a fixed seed (``split_seed``, independent of the run seed, so every run
sees the same test set). Images are decoded lazily, resized to ``img_size`` (default: the
model's native size) and normalised with the model's pretrained statistics (timm's config;
ImageNet statistics for unknown or tiny models). Train and test are checked to share no file.
Reading the listing and checking it (UTF-8, labels against ``classes.txt``, paths that stay
inside ``data_dir``) is :mod:`fedbench.tasks.image_listing`.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from fedbench.config import cfg_field, check, check_int
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import ClassificationTask, ModelBundle, RunDefaults, TaskConfig, TaskData, check_fraction
from fedbench.tasks.models import check_arch, enable_gradient_checkpointing, on_cuda_only
from fedbench.tasks.image_listing import MAX_CLASSES, Listing, Origins, cap_per_domain, check_files, find_domains
from fedbench.tasks.image_listing import list_by_scan, list_with_splits
from fedbench.tasks.partition import check_disjoint
from fedbench.tasks.vision_models import timm_layout, timm_model, vision_defaults

log = logging.getLogger(__name__)

MIN_IMG_SIZE, MAX_IMG_SIZE = 16, 1024  # image side fed to a ViT/Mixer with 16-px patches
VIT_IN21K = "vit_base_patch16_224.augreg_in21k"


# ------------------------------------------------------------------ shared vision pieces
@dataclass(frozen=True)
class VisionConfig(TaskConfig):
    model: str | None = cfg_field(VIT_IN21K, "timm name (e.g. mixer_b16_224.goog_in21k), local timm folder, or "
                                             "vit_tiny_test / mixer_tiny_test (random-init, 12 blocks)")
    img_size: int | None = cfg_field(None, "image side fed to the model; None = the model's native size "
                                           "(224 for the pretrained ViT/Mixer, 32 for the tiny test models)")
    gradient_checkpointing: bool = cfg_field(False, "activation checkpointing of the blocks (applied only with CUDA)")
    bf16: bool = cfg_field(False, "run forward/backward under bfloat16 autocast (applied only on CUDA tensors)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "model", self.model is not None, "must name a timm model, a local timm folder or a tiny test model")
        check_int(self, "img_size", MIN_IMG_SIZE, MAX_IMG_SIZE, optional=True,
                  why=f"(one 16-px patch up to {(MAX_IMG_SIZE // 16) ** 2} patches; none = the model's native size)")


def pil_image():
    try:
        from PIL import Image
    except ImportError:
        raise UserError("image tasks need Pillow: pip install pillow (or 'fedbench-peft[data]')") from None
    return Image


class ImageFiles(torch.utils.data.Dataset):
    """Images on disk, decoded on access: ``{"x": (3, S, S) float tensor, "y": int}``.

    An image that cannot be decoded, or whose header claims more than PIL's
    ``MAX_IMAGE_PIXELS`` (a decompression bomb; checked before decoding), is a one-line
    :class:`UserError` naming the file and, with ``origins``, the split-file line listing it
    (met during training, the run is recorded ``failed`` with that line).
    """

    def __init__(self, root: Path, paths: Sequence[str], labels: np.ndarray, img_size: int,
                 mean: Sequence[float], std: Sequence[float], origins: Origins | None = None):
        self.root, self.paths, self.labels = Path(root), list(paths), np.asarray(labels, dtype=np.int64)
        self.img_size, self.origins = img_size, origins
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]  # (3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        image = pil_image()
        path = self.root / self.paths[i]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", image.DecompressionBombWarning)  # refused below instead
                with image.open(path) as im:
                    w, h = im.size
                    if w * h > image.MAX_IMAGE_PIXELS:
                        raise ValueError(f"its header claims {w}x{h} pixels, more than the "
                                         f"{image.MAX_IMAGE_PIXELS} read here")
                    im = im.convert("RGB").resize((self.img_size, self.img_size), image.BICUBIC)
                    x = torch.from_numpy(np.asarray(im, dtype=np.uint8).copy())  # (S, S, 3)
        except Exception as e:  # noqa: BLE001 - PIL's decoders raise many kinds (OSError, SyntaxError, bombs, ...)
            why = (str(e).splitlines() or [""])[0] or type(e).__name__
            where = f" (listed at {self.origins.describe(i)})" if self.origins is not None else ""
            raise UserError(f"unreadable image {path}: {why}{where}") from None
        x = x.permute(2, 0, 1).to(torch.float32).div_(255.0)  # (3, S, S) in [0, 1]
        return {"x": (x - self.mean) / self.std, "y": int(self.labels[i])}

    def subset(self, idx) -> "ImageFiles":
        idx = np.asarray(idx, dtype=np.int64)
        return ImageFiles(self.root, [self.paths[i] for i in idx], self.labels[idx], self.img_size,
                          self.mean.flatten().tolist(), self.std.flatten().tolist(),
                          None if self.origins is None else self.origins.subset(idx))


class VisionTask(ClassificationTask):
    """timm ViT / Mixer with a fresh head; subclasses implement ``load``.

    The LoRA profile used when a method asks for ``default`` is ``default_profile``.
    """

    config_cls = VisionConfig
    default_profile = "proj_fc2"

    def image_settings(self) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
        native, mean, std = vision_defaults(self.config.model)
        return self.config.img_size or native, mean, std

    def build_model(self, data: TaskData, arch: str | None = None) -> ModelBundle:
        """The backbone with a fresh ``data.n_classes`` head (drawn from the global RNG; a tiny
        test backbone from a fixed seed)."""
        check_arch(arch, type(self).__name__.lower())
        size, _, _ = self.image_settings()
        model = timm_model(self.config.model, data.n_classes, size)
        blocks, targets = timm_layout(model)
        if on_cuda_only(self.config.gradient_checkpointing, "gradient_checkpointing"):
            enable_gradient_checkpointing(model)
        return ModelBundle(model, blocks, targets, ["head"], default_target=self.default_profile)

    def autocast(self, t: torch.Tensor):
        if self.config.bf16 and t.is_cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def forward(self, model, batch):
        with self.autocast(batch["x"]):
            return model(batch["x"]).float()  # (B, n_classes)

    def features(self, model, hidden, batch):
        """A block's output (B, T, D) through the final norm and pooling, as the head sees it."""
        return model.forward_head(model.norm(hidden), pre_logits=True)


# ------------------------------------------------------------------ the folder layout
@dataclass(frozen=True)
class DomainImagesConfig(VisionConfig):
    domains: list[str] | None = cfg_field(None, "domains to use (folder names); None = every domain found")
    n_classes: int | None = cfg_field(None, "keep classes with label < n_classes (FedRA: the first 100 "
                                            "of DomainNet); None = all")
    test_fraction: float = cfg_field(0.2, "test share of each (domain, class) cell when there are no split files")
    split_seed: int = cfg_field(0, "seed of that split (fixed across runs)")
    max_train_per_domain: int | None = cfg_field(None, "keep at most this many training images per domain "
                                                       "(seeded subsample, for small machines); None = all")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self, "domains", self.domains is None or (len(self.domains) > 0 and all(d.strip() for d in self.domains)),
              "must name at least one domain folder (or none = every domain found)")
        check_int(self, "n_classes", 2, MAX_CLASSES, optional=True)
        check_fraction(self, "test_fraction")
        check_int(self, "split_seed", 0)
        check_int(self, "max_train_per_domain", 1, optional=True)


class DomainImages(VisionTask):
    """Shared implementation of the folder-based multi-domain tasks (see module docstring)."""

    config_cls = DomainImagesConfig
    dataset_name = "images"
    get_hint = ""  # where to download, for the missing-data message
    layout_hint = "<domain>/<class>/<image> (+ optional <domain>_train.txt / <domain>_test.txt)"
    # FedRA: SGD, lr 0.01; Fed-HeLLo: batch 32, 100 clients (domain settings derive the count from the data)
    run_defaults = RunDefaults(optimizer="sgd", lr=0.01, batch_size=32, clients=100)
    server_holdout = 1000  # Fed-HeLLo's DomainNet proxy set (NICO++ takes the same)

    def missing(self, why: str) -> UserError:
        return UserError(f"{self.dataset_name}: {why}; download it ({self.get_hint}) into one folder laid out "
                         f"{self.layout_hint} and pass --data-dir <folder>")

    def _root(self) -> Path:
        if not self.config.data_dir:
            raise self.missing("no --data-dir given (this dataset has no download path here)")
        root = Path(self.config.data_dir).expanduser()
        if not root.is_dir():
            raise self.missing(f"--data-dir {root} is not a folder")
        return root

    def listings(self) -> tuple[Listing, Listing, list[str], dict[int, str]]:
        root = self._root()
        domains, has_splits = find_domains(root)
        if not domains:
            raise self.missing(f"no domain folders found in {root}")
        if self.config.domains:
            unknown = [d for d in self.config.domains if d not in domains]
            if unknown:
                raise UserError(f"{self.dataset_name}: domain {unknown[0]!r} not in {root} "
                                f"(has: {', '.join(domains)})")
            domains = [d for d in domains if d in self.config.domains]
        if has_splits:
            train, test, names = list_with_splits(root, domains)
        else:
            train, test, names = list_by_scan(root, domains, self.config.test_fraction, self.config.split_seed)
        if self.config.n_classes is not None:
            train = train.keep(train.labels < self.config.n_classes)
            test = test.keep(test.labels < self.config.n_classes)
        if self.config.max_train_per_domain is not None:
            train = cap_per_domain(train, self.config.max_train_per_domain, self.config.split_seed)
        if not train.paths or not test.paths:
            raise self.missing(f"no {'training' if not train.paths else 'test'} images found in {root}")
        try:
            check_disjoint(train.paths, test.paths)
        except ValueError as e:
            raise UserError(f"{self.dataset_name} in {root}: {e}") from None
        return train, test, domains, names

    def load(self) -> TaskData:
        train, test, domains, names = self.listings()
        root = self._root()
        size, mean, std = self.image_settings()
        labels = np.concatenate([train.labels, test.labels])
        n_classes = int(labels.max()) + 1
        check_files(root, train, self.dataset_name)
        check_files(root, test, self.dataset_name)
        log.info("%s: %d train / %d test images, %d classes, domains %s", self.dataset_name, len(train.paths),
                 len(test.paths), n_classes, domains)
        return TaskData(
            train=ImageFiles(root, train.paths, train.labels, size, mean, std, train.origins),
            test=ImageFiles(root, test.paths, test.labels, size, mean, std, test.origins),
            train_labels=train.labels, n_classes=n_classes, train_domains=train.domains,
            test_domains=test.domains, domain_names=list(domains),
            info={"class_names": [names.get(i, str(i)) for i in range(n_classes)], "n_train": len(train.paths),
                  "n_test": len(test.paths)},
        )


@dataclass(frozen=True)
class DomainNetConfig(DomainImagesConfig):
    n_classes: int | None = cfg_field(100, "keep classes with label < n_classes (FedRA: the first 100 DomainNet "
                                           "classes); None = all 345")


@TASKS.register("domainnet", "DomainNet (or any <domain>/<class>/<image> folder, e.g. PACS): ViT/Mixer, "
                             "top-1 per domain + mean")
class DomainNet(DomainImages):
    config_cls = DomainNetConfig
    dataset_name = "domainnet"
    get_hint = ("http://ai.bu.edu/M3SDA/: the six domain zips clipart, infograph, painting, quickdraw, real, "
                "sketch with their <domain>_train.txt / <domain>_test.txt")


@dataclass(frozen=True)
class NicoppConfig(DomainImagesConfig):
    n_classes: int | None = cfg_field(None, "keep classes with label < n_classes; None = all 60")


@TASKS.register("nicopp", "NICO++ common-context styles (autumn, dim, grass, outdoor, rock, water; 60 classes): "
                          "ViT/Mixer, top-1 per domain + mean")
class Nicopp(DomainImages):
    config_cls = NicoppConfig
    dataset_name = "nicopp"
    get_hint = "NICO++ from https://nicochallenge.com (the 'common' track: six style folders of 60 class folders)"
