"""Where small image datasets come from: a local folder, a ``save_to_disk`` folder or the hub.

The order of :mod:`fedbench.tasks.cifar100`, generalised over the dataset's column names,
its original on-disk format and its error message, for CIFAR-10 and Fashion-MNIST:

1. ``--data-dir`` holding the original files (a task-specific reader);
2. ``--data-dir`` holding a ``datasets`` ``save_to_disk`` DatasetDict (``train``/``test``);
3. no ``--data-dir``: the HF dataset (downloaded, or read from the HF cache offline).

Every reader returns ``({"train": (uint8 (N, C, H, W), int64 (N,)), "test": ...}, class names)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from fedbench.errors import UserError
from fedbench.tasks.models import DATA_EXTRA, cached_snapshot, hub_reachable

Splits = dict[str, tuple[np.ndarray, np.ndarray]]
Missing = Callable[[str], UserError]  # reason -> one-line error saying what to download


def hf_image_splits(dd, image_col: str, label_col: str, mode: str, missing: Missing) -> tuple[Splits, list[str]]:
    """A DatasetDict's ``train``/``test`` splits as uint8 arrays; ``mode`` is PIL's ("RGB", "L")."""
    absent = [s for s in ("train", "test") if s not in dd]
    if absent:
        raise missing(f"the dataset has no {absent[0]!r} split (has: {', '.join(dd)})")
    cols = set(dd["train"].column_names)
    if not {image_col, label_col} <= cols:
        raise missing(f"expected columns {image_col} and {label_col}, found {sorted(cols)}")
    names = list(getattr(dd["train"].features[label_col], "names", []) or [])
    out = {}
    for s in ("train", "test"):
        imgs = np.stack([np.asarray(im.convert(mode), dtype=np.uint8) for im in dd[s][image_col]])
        imgs = imgs[..., None] if imgs.ndim == 3 else imgs  # (N, H, W, C)
        out[s] = (imgs.transpose(0, 3, 1, 2).copy(), np.asarray(dd[s][label_col], dtype=np.int64))
    return out, names


def _datasets(task: str):
    try:
        import datasets
    except ImportError:
        raise UserError(f"{task} from the hub or a save_to_disk folder needs `datasets`: {DATA_EXTRA}") from None
    return datasets


def read_image_source(task: str, data_dir: str | None, hf_id: str, read_folder: Callable[[Path], tuple | None],
                      image_col: str, label_col: str, mode: str, missing: Missing) -> tuple[Splits, list[str]]:
    """Splits and class names from the first source that applies (see the module docstring).

    ``read_folder(root)`` reads the original files under ``root`` or returns None when
    they are not there.
    """
    hf = lambda dd: hf_image_splits(dd, image_col, label_col, mode, missing)
    if data_dir:
        root = Path(data_dir).expanduser()
        if not root.is_dir():
            raise missing(f"--data-dir {root} is not a folder")
        found = read_folder(root)
        if found is not None:
            return found
        if (root / "dataset_dict.json").exists():
            return hf(_datasets(task).load_from_disk(str(root)))
        raise missing(f"{root} holds neither the original files nor a save_to_disk DatasetDict")
    ds = _datasets(task)
    if hub_reachable():
        try:
            return hf(ds.load_dataset(hf_id))
        except (OSError, ConnectionError) as e:
            raise missing(f"could not download {hf_id} ({str(e).splitlines()[0]})") from None
    local = cached_snapshot(hf_id, "dataset")
    if local is None:
        raise missing("no --data-dir given and the HF hub cannot be reached")
    return hf(ds.load_dataset(local))
