"""Common random numbers: one independent stream per purpose.

Every random draw of a run comes from a generator seeded by (run seed, purpose, ...):
which clients are sampled in a round, which tier a client has (dynamic budgets), the
method's own choices, each client's batch order and dropout, model initialisation. So two
methods run with the same seed see the same clients, tiers and batches in every round,
whatever the other draws consumed, and differences between methods are paired.
"""

from __future__ import annotations

import hashlib

import numpy as np

PURPOSES = ("sample", "tier", "method", "client", "model", "extra", "holdout", "local_split")


def seed_for(seed: int, purpose: str, *keys: int | str) -> int:
    """A 63-bit seed for ``purpose`` and ``keys`` (round, client, architecture, ...)."""
    blob = "/".join([str(int(seed)), purpose] + [str(k) for k in keys]).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1


def rng_for(seed: int, purpose: str, *keys: int | str) -> np.random.Generator:
    return np.random.default_rng(seed_for(seed, purpose, *keys))
