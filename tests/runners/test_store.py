"""ClientStore: private client state in memory up to a budget, spilled to disk beyond it."""

import torch

from fedbench.runners.core.store import ClientStore


def test_roundtrip_and_spill(tmp_path):
    store = ClientStore(tmp_path / "clients", budget_bytes=3 * 400)  # three clients of 100 float32
    for c in range(10):
        store.put(c, {"w": torch.full((100,), float(c))})
    assert store.memory_bytes <= 3 * 400 and store.spills == 7
    assert all(torch.equal(store.get(c)["w"], torch.full((100,), float(c))) for c in range(10))
    assert store.get(99) is None and len(store) == 10
    store.close()
    assert not (tmp_path / "clients").exists()


def test_memory_stays_flat_with_a_thousand_clients(tmp_path):
    """The server's memory for private state does not grow with the number of clients."""
    budget = 64 * 4096
    store = ClientStore(tmp_path / "c", budget_bytes=budget)
    peaks = []
    for n in (100, 1000):
        for c in range(n):
            store.put(c, {"w": torch.randn(1024)})
        peaks.append(store.memory_bytes)
    assert max(peaks) <= budget and store.get(999) is not None and store.get(0) is not None


def test_flush_and_adopt_for_a_resumed_run(tmp_path):
    store = ClientStore(tmp_path / "c", budget_bytes=10**9)
    store.put(3, {"w": torch.ones(2)})
    store.flush()
    store.release()  # the run stopped: memory dropped, folder kept
    again = ClientStore(tmp_path / "c", budget_bytes=10**9)
    again.adopt([3])
    assert torch.equal(again.get(3)["w"], torch.ones(2))
    again.clear()
    assert again.get(3) is None and not (tmp_path / "c").exists()
