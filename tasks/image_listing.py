"""Which images a folder-based multi-domain task reads: split files or a folder scan.

Layout (see :mod:`fedbench.tasks.image_domains`)::

    <data_dir>/<domain>/<class>/<image>            every domain folder found is a domain
    <data_dir>/<domain>_train.txt, _test.txt       optional: "<relative path> <label>" lines
    <data_dir>/classes.txt                         optional: class names in label order

Everything read from these files is checked, each problem one line naming the file and
line: split and class files must be UTF-8, labels must be class ids of ``classes.txt``
(without it, below :data:`MAX_CLASSES`), and every listed path must stay inside the data
folder, through symlinks too (:func:`check_files`). Each listed image keeps where it was
named (:class:`Origins`), so an image that fails to decode during training is reported
with its split-file line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.errors import UserError
from fedbench.tasks.record_files import read_utf8

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif"}
MAX_CLASSES = 100_000  # labels at or above this are data errors, not classes (DomainNet has 345)


@dataclass
class Origins:
    """Where each listed image was named: line ``line[i]`` (1-based) of ``sources[source[i]]``;
    line 0 means found by scanning the folder ``sources[source[i]]``."""

    sources: list[str]
    source: np.ndarray  # (N,) int64
    line: np.ndarray  # (N,) int64

    def describe(self, i: int) -> str:
        where, line = self.sources[int(self.source[i])], int(self.line[i])
        return f"{where} line {line}" if line else f"the scan of {where}"

    def subset(self, idx) -> "Origins":
        idx = np.asarray(idx, dtype=np.int64)
        return Origins(self.sources, self.source[idx], self.line[idx])


@dataclass
class Listing:
    """Image paths (relative to the data folder), labels, domain ids and origins of one split."""

    paths: list[str]
    labels: np.ndarray
    domains: np.ndarray
    origins: Origins

    def keep(self, mask: np.ndarray) -> "Listing":
        idx = np.flatnonzero(mask)
        return Listing([self.paths[i] for i in idx], self.labels[idx], self.domains[idx], self.origins.subset(idx))


def read_split_file(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, label, line number) of each non-blank line ``<relative path> <label>``."""
    rows = []
    for n, line in enumerate(read_utf8(path, allow_empty=True).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        try:
            label = int(parts[1])
        except (IndexError, ValueError):
            shown = line if len(line) <= 80 else line[:77] + "..."
            raise UserError(f"{path} line {n}: expected '<relative path> <integer label>', got {shown!r}") from None
        rows.append((parts[0], label, n))
    return rows


def read_class_names(root: Path) -> list[str] | None:
    """The non-blank lines of ``classes.txt`` (class names in label order), or None if absent."""
    path = root / "classes.txt"
    if not path.exists():
        return None
    return [n.strip() for n in read_utf8(path).splitlines() if n.strip()]


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


def list_with_splits(root: Path, domains: list[str]) -> tuple[Listing, Listing, dict[int, str]]:
    """Both splits from ``<domain>_<split>.txt``; labels checked against ``classes.txt``."""
    names = read_class_names(root)
    bound = len(names) if names is not None else MAX_CLASSES
    what = f"the {bound} classes of {root / 'classes.txt'}" if names is not None else \
        f"below {MAX_CLASSES} without a classes.txt"
    splits, folder_names = {}, {}
    for split in ("train", "test"):
        paths, labels, doms, sources, lines = [], [], [], [], []
        for d, name in enumerate(domains):
            path = root / f"{name}_{split}.txt"
            for rel, label, n in read_split_file(path):
                if not 0 <= label < bound:
                    raise UserError(f"{path} line {n}: label {label} is not a class id in 0..{bound - 1} ({what})")
                parts = Path(rel).parts
                folder_names.setdefault(label, parts[-2] if len(parts) >= 2 else str(label))
                paths.append(rel)
                labels.append(label)
                doms.append(d)
                sources.append(2 * d + (split == "test"))  # index of this split file in the origins' sources
                lines.append(n)
        origins = Origins([str(root / f"{name}_{s}.txt") for name in domains for s in ("train", "test")],
                          np.asarray(sources, np.int64), np.asarray(lines, np.int64))
        splits[split] = Listing(paths, np.asarray(labels, np.int64), np.asarray(doms, np.int64), origins)
    return splits["train"], splits["test"], dict(enumerate(names)) if names is not None else folder_names


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
    listings = [Listing(p, np.asarray(y, np.int64), np.asarray(g, np.int64),
                        Origins([str(root)], np.zeros(len(p), np.int64), np.zeros(len(p), np.int64)))
                for p, y, g in (out["train"], out["test"])]
    return listings[0], listings[1], dict(enumerate(classes))


def cap_per_domain(listing: Listing, cap: int, seed: int) -> Listing:
    """At most ``cap`` examples per domain, a seeded subsample (file order kept)."""
    rng = np.random.default_rng([seed, 7])
    keep = np.zeros(len(listing.paths), dtype=bool)
    for d in np.unique(listing.domains):
        idx = np.flatnonzero(listing.domains == d)
        keep[np.sort(rng.permutation(idx)[:cap])] = True
    return listing.keep(keep)


def check_files(root: Path, listing: Listing, dataset: str) -> None:
    """Every listed image must be a regular file inside ``root``, symlinks followed (one
    ``lstat`` per file, one ``realpath`` per folder; nothing is decoded); else one line
    naming the split-file line that lists it."""
    base = root.resolve()
    inside: dict[Path, bool] = {}
    for i, rel in enumerate(listing.paths):
        where = f"{dataset}: {listing.origins.describe(i)} names {rel!r}"
        if "\x00" in rel:
            raise UserError(f"{where}, which holds a NUL character")
        path = root / rel
        if path.parent not in inside:
            inside[path.parent] = path.parent.resolve().is_relative_to(base)
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        ok = inside[path.parent]
        if ok and st is not None and stat.S_ISLNK(st.st_mode):
            ok = path.resolve().is_relative_to(base)
            try:
                st = os.stat(path)
            except OSError:
                st = None
        if not ok:
            raise UserError(f"{where}, which is outside the data folder {root}")
        if st is None or not stat.S_ISREG(st.st_mode):
            raise UserError(f"{where}, which is not a file under {root}")
