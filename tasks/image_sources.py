"""Where small image datasets come from: a local folder, a ``save_to_disk`` folder or the hub.

The order of :mod:`fedbench.tasks.cifar100`, generalised over the dataset's column names,
its original on-disk format and its error message, for CIFAR-10 and Fashion-MNIST:

1. ``--data-dir`` holding the original files (a task-specific reader);
2. ``--data-dir`` holding a ``datasets`` ``save_to_disk`` DatasetDict (``train``/``test``);
3. no ``--data-dir``: the HF dataset (downloaded, or read from the HF cache offline).

Every reader returns ``({"train": (uint8 (N, C, H, W), int64 (N,)), "test": ...}, class names)``.

A DatasetDict is read row by row and checked, each problem one line naming the source,
split and row: every image is decoded from its stored bytes by Pillow after its header
says it has the dataset's size (so a decompression bomb is never decoded), and every label
is a class id of the label column's names (or of the dataset's own class count).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fedbench.errors import UserError
from fedbench.tasks.image_domains import pil_image
from fedbench.tasks.models import DATA_EXTRA, cached_snapshot, hub_reachable
from fedbench.tasks.record_files import load_saved_dataset

Splits = dict[str, tuple[np.ndarray, np.ndarray]]
Missing = Callable[[str], UserError]  # reason -> one-line error saying what to download


@dataclass(frozen=True)
class ImageColumns:
    """How a dataset holds its examples: the image and label columns, the PIL mode images
    are read in ("RGB", "L"), the side every image has, and the class count that bounds the
    labels when the label column names no classes."""

    image: str
    label: str
    mode: str
    side: int
    n_classes: int


def decode_image(cell: Any, cols: ImageColumns) -> np.ndarray:
    """(H, W, C) uint8 of one stored image (``{"bytes", "path"}``), its size checked from the
    header before any pixel is decoded; ValueError (or PIL's error) says what is wrong."""
    if not isinstance(cell, dict) or not cell.get("bytes"):
        path = cell.get("path") if isinstance(cell, dict) else None
        raise ValueError(f"no image bytes stored{f' (only a path, {path!r})' if path else ''}")
    image = pil_image()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", image.DecompressionBombWarning)  # the size check below refuses it
        with image.open(io.BytesIO(cell["bytes"])) as im:
            if im.size != (cols.side, cols.side):
                raise ValueError(f"a {im.size[0]}x{im.size[1]} image; this dataset's are {cols.side}x{cols.side}")
            a = np.asarray(im.convert(cols.mode), dtype=np.uint8)
    return a if a.ndim == 3 else a[..., None]


def hf_image_splits(dd, cols: ImageColumns, task: str, source: str, missing: Missing) -> tuple[Splits, list[str]]:
    """A DatasetDict's ``train``/``test`` splits as uint8 arrays, every row checked."""
    import datasets

    absent = [s for s in ("train", "test") if s not in dd]
    if absent:
        raise missing(f"the dataset has no {absent[0]!r} split (has: {', '.join(dd)})")
    out = {}
    names = []
    for s in ("train", "test"):
        features = dd[s].features
        if not {cols.image, cols.label} <= set(features):
            raise missing(f"expected columns {cols.image} and {cols.label}, found {sorted(features)}")
        if not isinstance(features[cols.image], datasets.Image):
            raise missing(f"column {cols.image!r} of the {s} split holds {features[cols.image]}, not images")
        if s == "train":
            names = [str(n) for n in (getattr(features[cols.label], "names", None) or [])]
        n_classes = len(names) or cols.n_classes
        classes = f"the {len(names)} names of column {cols.label!r}" if names else f"{task}'s {cols.n_classes} classes"
        table = dd[s].with_format("arrow")
        cells, labels = table[cols.image].to_pylist(), table[cols.label].to_pylist()
        if not cells:
            raise UserError(f"{task}: the {s} split of {source} has no rows")
        x = np.empty((len(cells), cols.side, cols.side, 1 if cols.mode == "L" else 3), dtype=np.uint8)
        for i, (cell, label) in enumerate(zip(cells, labels)):
            where = f"{task}: {source} {s} row {i + 1}"
            if type(label) is not int or not 0 <= label < n_classes:
                raise UserError(f"{where}: label {str(label)[:40]} is not a class id in 0..{n_classes - 1} "
                                f"({classes})")
            try:
                x[i] = decode_image(cell, cols)
            except Exception as e:  # noqa: BLE001 - PIL's decoders raise many kinds (OSError, SyntaxError, bombs, ...)
                why = (str(e).splitlines() or [""])[0] or type(e).__name__
                raise UserError(f"{where}: unreadable image ({why})") from None
        out[s] = (x.transpose(0, 3, 1, 2).copy(), np.asarray(labels, dtype=np.int64))  # (N, C, S, S)
    return out, names


def _datasets(task: str):
    try:
        import datasets
    except ImportError:
        raise UserError(f"{task} from the hub or a save_to_disk folder needs `datasets`: {DATA_EXTRA}") from None
    return datasets


def read_image_source(task: str, data_dir: str | None, hf_id: str, read_folder: Callable[[Path], tuple | None],
                      cols: ImageColumns, missing: Missing) -> tuple[Splits, list[str]]:
    """Splits and class names from the first source that applies (see the module docstring).

    ``read_folder(root)`` reads the original files under ``root`` or returns None when
    they are not there.
    """
    if data_dir:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise missing(f"--data-dir {root} is not a folder")
        found = read_folder(root)
        if found is not None:
            return found
        if (root / "dataset_dict.json").exists():
            return hf_image_splits(load_saved_dataset(root), cols, task, str(root), missing)
        raise missing(f"{root} holds neither the original files nor a save_to_disk DatasetDict")
    ds = _datasets(task)
    if hub_reachable():
        try:
            dd = ds.load_dataset(hf_id)
        except (OSError, ConnectionError) as e:
            raise missing(f"could not download {hf_id} ({str(e).splitlines()[0]})") from None
    else:
        local = cached_snapshot(hf_id, "dataset")
        if local is None:
            raise missing("no --data-dir given and the HF hub cannot be reached")
        dd = ds.load_dataset(local)
    return hf_image_splits(dd, cols, task, hf_id, missing)
