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
