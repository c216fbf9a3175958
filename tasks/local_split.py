"""Each client's own data split into local train / val / test (FedLoRA's 8:1:1), for
methods scored on every client's local test split (``Method.evaluation = "local"``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fedbench.errors import UserError


@dataclass
class LocalSplit:
    """Each client's own data split into local train / val / test (indices into TRAIN)."""

    train: list[np.ndarray]
    val: list[np.ndarray]
    test: list[np.ndarray]


def split_local(client_indices: Sequence[np.ndarray], ratio: str, seed: int) -> LocalSplit:
    """Split every client's examples ``train:val:test`` (e.g. ``8:1:1``, FedLoRA), seeded per
    client; each client keeps at least one training and one test example."""
    parts = [int(p) for p in ratio.split(":")]
    total = sum(parts)
    out = LocalSplit([], [], [])
    for c, idx in enumerate(client_indices):
        idx = np.random.default_rng([seed, 13, c]).permutation(np.asarray(idx, dtype=np.int64))
        n = len(idx)
        if n < 2:
            raise UserError(f"client {c} has {n} example(s): too few to split {ratio} into local train and test")
        n_test = min(n - 1, max(1, round(n * parts[2] / total)))
        n_val = min(n - 1 - n_test, round(n * parts[1] / total))
        out.test.append(np.sort(idx[:n_test]))
        out.val.append(np.sort(idx[n_test:n_test + n_val]))
        out.train.append(np.sort(idx[n_test + n_val:]))
    return out
