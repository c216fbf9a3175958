"""Shared test set-up: offline, deterministic, small."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Under pytest-xdist (`python -m pytest -n auto`, the README's command) each worker process
# gets one torch thread: several processes with a thread per core each oversubscribe the
# cores (measured 61x slower on a busy 2-core machine). Set before torch is imported.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import stub  # noqa: E402 - after the environment above (it imports torch)

stub.register()  # run.executor="stub": bookkeeping tests train nobody (tests/stub.py)


#: test files that take longest in the default run (measured with ``--durations``), scheduled
#: first: ``--dist loadfile`` hands whole files to workers in turn (by their number of tests
#: unless told otherwise, :func:`pytest_configure`), and a long file of few tests handed out
#: last (``test_learning.py``: 12 tests, about a minute) left the other worker idle for most of it
LONG_FIRST = ("test_learning.py", "runners/test_ray.py", "runners/test_packed.py", "test_quickstart.py",
              "test_docs.py", "runners/test_budget.py", "test_conformance.py")


def long_first(items: list) -> list:
    """``items`` with those of :data:`LONG_FIRST`'s files first, in its order; every file's own
    order kept (the sort is stable)."""
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return next((i for i, name in enumerate(LONG_FIRST) if path == f"tests/{name}"), len(LONG_FIRST))
    return sorted(items, key=rank)


def pytest_configure(config):
    # pytest-xdist orders the files by their number of tests unless told not to: keep ours
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    items[:] = long_first(items)
