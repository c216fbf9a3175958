"""split_local: each client's examples split train:val:test, disjoint, seeded."""

import numpy as np
import pytest

from fedbench.errors import UserError
from fedbench.tasks.local_split import split_local


def test_8_1_1_split_is_disjoint_complete_and_seeded():
    clients = [np.arange(0, 50), np.arange(50, 60), np.arange(60, 63)]
    a, b = split_local(clients, "8:1:1", seed=0), split_local(clients, "8:1:1", seed=0)
    for c, idx in enumerate(clients):
        parts = [a.train[c], a.val[c], a.test[c]]
        assert sorted(np.concatenate(parts).tolist()) == idx.tolist()  # disjoint and complete
        assert all(np.array_equal(x, y) for x, y in zip(parts, [b.train[c], b.val[c], b.test[c]]))
    assert [len(a.train[0]), len(a.val[0]), len(a.test[0])] == [40, 5, 5]  # 50 * 8/10, 1/10, 1/10
    assert len(a.test[2]) == 1 and len(a.train[2]) >= 1  # tiny clients keep one test and one train example
    assert not np.array_equal(split_local(clients, "8:1:1", seed=1).test[0], a.test[0])


def test_a_client_too_small_to_split():
    with pytest.raises(UserError, match="client 0 has 1 example"):
        split_local([np.arange(1)], "8:1:1", seed=0)
