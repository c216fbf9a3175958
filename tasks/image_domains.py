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
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from fedbench.config import cfg_field, check
from fedbench.errors import UserError
from fedbench.tasks import TASKS
from fedbench.tasks.base import ClassificationTask, ModelBundle, TaskConfig, TaskData, check_fraction, check_int
from fedbench.tasks.models import check_arch, enable_gradient_checkpointing, on_cuda_only
from fedbench.tasks.vision_models import timm_layout, timm_model, vision_defaults
from fedbench.tasks.partition import check_disjoint

log = logging.getLogger(__name__)

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif"}
MIN_IMG_SIZE, MAX_IMG_SIZE = 16, 1024  # image side fed to a ViT/Mixer with 16-px patches
MAX_CLASSES = 100_000  # labels at or above this are data errors, not classes (DomainNet has 345)
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
    """Images on disk, decoded on access: ``{"x": (3, S, S) float tensor, "y": int}``."""

    def __init__(self, root: Path, paths: Sequence[str], labels: np.ndarray, img_size: int,
                 mean: Sequence[float], std: Sequence[float]):
        self.root, self.paths, self.labels = Path(root), list(paths), np.asarray(labels, dtype=np.int64)
        self.img_size = img_size
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]  # (3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict:
        image = pil_image()
        path = self.root / self.paths[i]
        try:
            with image.open(path) as im:
                im = im.convert("RGB").resize((self.img_size, self.img_size), image.BICUBIC)
                x = torch.from_numpy(np.asarray(im, dtype=np.uint8).copy())  # (S, S, 3)
        except (OSError, SyntaxError, ValueError) as e:  # PIL: truncated, unidentified, corrupt data
            raise UserError(f"unreadable image {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
                from None
        x = x.permute(2, 0, 1).to(torch.float32).div_(255.0)  # (3, S, S) in [0, 1]
        return {"x": (x - self.mean) / self.std, "y": int(self.labels[i])}

    def subset(self, idx) -> "ImageFiles":
        idx = np.asarray(idx, dtype=np.int64)
        return ImageFiles(self.root, [self.paths[i] for i in idx], self.labels[idx], self.img_size,
                          self.mean.flatten().tolist(), self.std.flatten().tolist())


class VisionTask(ClassificationTask):
    """timm ViT / Mixer with a fresh head; subclasses implement ``load``.

    The LoRA profile used when a method asks for ``default`` is ``default_profile``.
    """

    config_cls = VisionConfig
    default_profile = "fedra"

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


@dataclass
class Listing:
    """Image paths (relative to the data folder), labels and domain ids of one split."""

    paths: list[str]
    labels: np.ndarray
    domains: np.ndarray


def _read_split_file(path: Path) -> list[tuple[str, int]]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        try:
            rows.append((parts[0], int(parts[1])))
        except (IndexError, ValueError):
            raise UserError(f"{path}:{n}: expected '<relative path> <integer label>', got {line!r}") from None
    return rows


def listed_at(root: Path, domains: Sequence[str], rel: str) -> str:
    """"<split file> line <n>" of the first split-file line naming ``rel`` (for messages)."""
    for name in domains:
        for split in ("train", "test"):
            path = root / f"{name}_{split}.txt"
            if not path.is_file():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if line.strip() and line.rsplit(maxsplit=1)[0] == rel:
                    return f"{path} line {n}"
    return f"the scan of {root}"


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTS)


def find_domains(root: Path) -> tuple[list[str], bool]:
    """Domain names found in ``root`` and whether they come with split files."""
    with_splits = sorted(p.name[: -len("_train.txt")] for p in root.glob("*_train.txt")
                         if (root / (p.name[: -len("_train.txt")] + "_test.txt")).exists())
    if with_splits:
        return with_splits, True
    doms = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")
                  and any(c.is_dir() for c in d.iterdir()))
    return doms, False


def class_names_from_splits(root: Path, rows: list[tuple[str, int]]) -> dict[int, str]:
    names_file = root / "classes.txt"
    if names_file.exists():
        return dict(enumerate(n.strip() for n in names_file.read_text().splitlines() if n.strip()))
    out = {}
    for path, label in rows:
        parts = Path(path).parts
        out.setdefault(label, parts[-2] if len(parts) >= 2 else str(label))
    return out


def list_with_splits(root: Path, domains: list[str]) -> tuple[Listing, Listing, dict[int, str]]:
    splits = {}
    all_rows = []
    for split in ("train", "test"):
        paths, labels, doms = [], [], []
        for d, name in enumerate(domains):
            rows = _read_split_file(root / f"{name}_{split}.txt")
            all_rows += rows
            paths += [p for p, _ in rows]
            labels += [y for _, y in rows]
            doms += [d] * len(rows)
        splits[split] = Listing(paths, np.asarray(labels, np.int64), np.asarray(doms, np.int64))
    return splits["train"], splits["test"], class_names_from_splits(root, all_rows)


def list_by_scan(root: Path, domains: list[str], test_fraction: float, seed: int) -> tuple[Listing, Listing, dict]:
    """Seeded per-(domain, class) split of ``<domain>/<class>/<image>`` folders."""
    classes = sorted({c.name for d in domains for c in (root / d).iterdir() if c.is_dir()})
    index = {c: i for i, c in enumerate(classes)}
    rng = np.random.default_rng([seed, 20231119])
    out = {"train": ([], [], []), "test": ([], [], [])}
    for d, name in enumerate(domains):
        for cdir in sorted(p for p in (root / name).iterdir() if p.is_dir()):
            files = [f"{name}/{cdir.name}/{f.name}" for f in _image_files(cdir)]
            if not files:
                continue
            order = rng.permutation(len(files))
            n_test = int(round(test_fraction * len(files))) if len(files) > 1 else 0
            for split, sel in (("test", order[:n_test]), ("train", order[n_test:])):
                for i in np.sort(sel):
                    out[split][0].append(files[i])
                    out[split][1].append(index[cdir.name])
                    out[split][2].append(d)
    listings = [Listing(p, np.asarray(y, np.int64), np.asarray(g, np.int64)) for p, y, g in (out["train"], out["test"])]
    return listings[0], listings[1], dict(enumerate(classes))


def _keep(listing: Listing, mask: np.ndarray) -> Listing:
    return Listing([p for p, m in zip(listing.paths, mask) if m], listing.labels[mask], listing.domains[mask])


def _cap_per_domain(listing: Listing, cap: int, seed: int) -> Listing:
    rng = np.random.default_rng([seed, 7])
    keep = np.zeros(len(listing.paths), dtype=bool)
    for d in np.unique(listing.domains):
        idx = np.flatnonzero(listing.domains == d)
        keep[np.sort(rng.permutation(idx)[:cap])] = True
    return _keep(listing, keep)


class DomainImages(VisionTask):
    """Shared implementation of the folder-based multi-domain tasks (see module docstring)."""

    config_cls = DomainImagesConfig
    dataset_name = "images"
    get_hint = ""  # where to download, for the missing-data message
    layout_hint = "<domain>/<class>/<image> (+ optional <domain>_train.txt / <domain>_test.txt)"
    # FedRA: SGD, lr 0.01; Fed-HeLLo: batch 32, 100 clients (domain settings derive the count from the data)
    run_defaults = {"optimizer": "sgd", "lr": 0.01, "batch_size": 32, "clients": 100}
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
            train = _keep(train, train.labels < self.config.n_classes)
            test = _keep(test, test.labels < self.config.n_classes)
        if self.config.max_train_per_domain is not None:
            train = _cap_per_domain(train, self.config.max_train_per_domain, self.config.split_seed)
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
        self.check_files(root, train.paths + test.paths, domains)
        log.info("%s: %d train / %d test images, %d classes, domains %s", self.dataset_name, len(train.paths),
                 len(test.paths), n_classes, domains)
        return TaskData(
            train=ImageFiles(root, train.paths, train.labels, size, mean, std),
            test=ImageFiles(root, test.paths, test.labels, size, mean, std),
            train_labels=train.labels, n_classes=n_classes, train_domains=train.domains,
            test_domains=test.domains, domain_names=list(domains),
            info={"class_names": [names.get(i, str(i)) for i in range(n_classes)], "n_train": len(train.paths),
                  "n_test": len(test.paths)},
        )

    def check_files(self, root: Path, paths: Sequence[str], domains: Sequence[str]) -> None:
        """Every listed image must be a file (one ``stat`` each, no decoding), before training."""
        missing = next((p for p in paths if not (root / p).is_file()), None)
        if missing is not None:
            raise UserError(f"{self.dataset_name}: {listed_at(root, domains, missing)} names {missing!r}, "
                            f"which is not a file under {root}")


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
