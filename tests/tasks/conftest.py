"""Task tests: each test gets its own empty encoding cache (``$FEDBENCH_CACHE``)."""

import pytest


@pytest.fixture(autouse=True)
def _private_encoding_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path_factory.mktemp("fedbench-cache")))
