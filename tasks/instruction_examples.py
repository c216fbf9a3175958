"""Instruction examples as read from record files: the fields, a content digest, and the
seeded held-out split of a dataset that has no test split (duplicates kept on one side)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Example:
    instruction: str
    context: str
    response: str
    category: str

    def digest(self) -> str:
        blob = "\x1f".join((self.instruction, self.context, self.response))
        return hashlib.blake2b(blob.encode("utf-8"), digest_size=12).hexdigest()


def first_value(row: dict, names: tuple[str, ...]):
    """The first of ``names`` that ``row`` has (not null); a list stands for its first item
    (Natural Instructions' ``targets``)."""
    for n in names:
        if n in row and row[n] is not None:
            v = row[n]
            return v[0] if isinstance(v, list) and v else v
    return None


def holdout(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded train/test split over distinct examples (duplicates stay on one side)."""
    groups: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(ex.digest(), []).append(i)
    keys = sorted(groups)
    order = np.random.default_rng([seed, 11]).permutation(len(keys))
    n_test = max(1, int(round(fraction * len(keys))))
    test_keys = {keys[i] for i in order[:n_test]}
    train = [ex for ex in examples if ex.digest() not in test_keys]  # file order kept
    test = [ex for ex in examples if ex.digest() in test_keys]
    return train, test
