"""A user's own package adds a method and a task through entry points, without touching
fedbench: the plugin template (``templates/plugin/``, a package with a ``pyproject.toml``)
is installed with pip into a folder of its own, then both run from the Python API. Listing
them and running them from the CLI (`fedbench list`, `fedbench run --method uniform_avg --task
blobs`, output compared line by line) is the add-method tutorial's console block, run by
tests/test_quickstart.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The template installed by pip (offline: no dependencies, this environment's setuptools)
    into a site folder of its own, from a copy (a build leaves files beside its sources)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src, target = tmp / "src", tmp / "site"
    shutil.copytree(TEMPLATE, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                        "--quiet", "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (target / "fedbench_blobs_plugin" / "methods.py").is_file()
    eps = next(target.glob("fedbench_blobs_plugin-*.dist-info")) / "entry_points.txt"
    assert "uniform_avg = fedbench_blobs_plugin.methods:UniformAvg" in eps.read_text()
    return target


def _run(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "FEDBENCH_NO_LIST_CACHE": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_plugin_through_the_python_api(site, tmp_path):
    code = ("import fedbench, json; rec = fedbench.run('uniform_avg', 'blobs', rounds=2, clients=4, lr=0.05, "
            f"out={str(tmp_path / 'api')!r}); print(json.dumps([rec['status'], rec['results']['final']]))")
    p = _run(site, "-c", code, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    status, final = json.loads(p.stdout.strip().splitlines()[-1])
    assert status == "ok" and final > 1 / 4


def test_without_the_plugin_its_keys_are_unknown(tmp_path):
    p = _run(tmp_path, "-m", "fedbench", "run", "--method", "uniform_avg", "--task", "blobs", cwd=tmp_path)
    assert p.returncode == 2 and "unknown method 'uniform_avg'" in p.stderr


def test_the_list_cache_follows_a_plugins_source(tmp_path, monkeypatch):
    """Editing a plugin's module lists it afresh: the cache key hashes the source files of
    the package an entry point names (found without importing it), not only its name."""
    from importlib.metadata import EntryPoint

    from fedbench.runners.cli import listing

    pkg = tmp_path / "edited_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "methods.py").write_text("raise SyntaxError  # broken at first\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FEDBENCH_NO_LIST_CACHE", raising=False)
    ep = EntryPoint("edited", "edited_plugin.methods:Edited", "fedbench.methods")
    monkeypatch.setattr("fedbench.registry.plugin_entry_points", lambda group=None: [ep])
    assert listing._plugin_sources() == [pkg / "__init__.py", pkg / "methods.py"]
    before = listing._list_cache_path()
    (pkg / "methods.py").write_text("class Edited:  # fixed\n    pass\n")
    after = listing._list_cache_path()
    assert before is not None and after is not None and before != after
    assert "edited_plugin" not in sys.modules  # found, not imported

