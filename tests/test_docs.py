"""The documentation site builds with ``mkdocs build --strict`` (a warning fails it), so a
docstring that names an object that does not exist, or a reference page naming a module
that is gone, fails the tests; and the tutorial's example method, task and sweep preset
(``docs/examples/``) are true for this code."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples"
#: what a build reads: the config, the pages and hooks, the code, the included files
SITE_SOURCES = ("mkdocs.yml", "pyproject.toml", "CHANGELOG.md", "docs", "fedbench", "methods", "tasks", "runners",
                "leaderboard", "templates/plugin")


def build(root: Path, out: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=root,
                          capture_output=True, text=True, env=env, timeout=600)


def copy_sources(into: Path) -> Path:
    for name in SITE_SOURCES:
        src, dst = REPO / name, into / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "records", "*.png"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return into


def test_site_builds_strict_with_the_api_reference(tmp_path):
    p = build(REPO, tmp_path / "site")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "site" / "reference" / "methods-hooks" / "index.html").read_text(encoding="utf-8")
    assert 'id="fedbench.methods.hooks.Planning.plan"' in html  # generated from the code under methods/
    assert ":class:`" not in html.split("<details")[0]  # roles rendered as links or code, not as text
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="fedbench.api.run"' in api and "language-pycon" in api  # the doctest is a code block
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Unreleased" in changelog


def test_a_docstring_naming_a_missing_object_fails_the_build(tmp_path):
    root = copy_sources(tmp_path / "src")
    target = root / "runners" / "outputs" / "callbacks.py"
    text = target.read_text(encoding="utf-8")
    assert ":class:`~fedbench.runners.core.state.RunState`" in text
    target.write_text(text.replace(":class:`~fedbench.runners.core.state.RunState`",
                                   ":class:`~fedbench.runners.core.state.RunStat`", 1), encoding="utf-8")
    p = build(root, tmp_path / "site")
    assert p.returncode != 0
    assert "fedbench.runners.core.state.RunStat" in p.stderr and "does not exist" in p.stderr


def test_a_reference_page_naming_a_missing_module_fails_the_build(tmp_path):
    root = copy_sources(tmp_path / "src")
    (root / "docs" / "reference" / "state.md").write_text("# state\n\n::: fedbench.runners.no_such_module\n",
                                                         encoding="utf-8")
    p = build(root, tmp_path / "site")
    assert p.returncode != 0 and "fedbench.runners.no_such_module" in p.stderr


@pytest.fixture
def load_example():
    """Imports ``docs/examples/<name>.py`` (which registers its key); afterwards the module
    and the keys it registered are gone again, so other tests see the suite's registries."""
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    before = {r: set(r.keys()) for r in (METHODS, TASKS)}
    names = []

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"docs_example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        names.append(spec.name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in names:
        sys.modules.pop(name, None)
    for registry, keys in before.items():
        for key in set(registry.keys()) - keys:
            registry.remove(key)


def test_server_step_moves_lr_of_the_way_to_the_mean(load_example):
    ex = load_example("server_step")
    current = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([5.0])}
    mean = {"a": torch.tensor([3.0, 6.0]), "b": torch.tensor([5.0])}  # b: nobody uploaded it
    new = ex.server_step(current, mean, 0.5)
    assert torch.equal(new["a"], torch.tensor([1 + 0.5 * (3 - 1), 2 + 0.5 * (6 - 2)]))
    assert torch.equal(new["b"], torch.tensor([5.0]))


def test_example_method_and_task_run_and_learn(tmp_path):
    """server_step with eta = 1 is FedAvg: the same curve; with eta = 0.5 it still learns."""
    code = (
        "import json, fedbench, server_step, noisy_blobs\n"
        f"out = {str(tmp_path)!r}\n"
        "a = fedbench.run('server_step', 'noisy_blobs', rounds=3, method_config={'server_lr': 1.0}, out=out)\n"
        "b = fedbench.run('fedavg', 'noisy_blobs', rounds=3, out=out)\n"
        "c = fedbench.run('server_step', 'noisy_blobs', rounds=3, method_config={'server_lr': 0.5}, out=out)\n"
        "print(json.dumps([[p['metric'] for p in r['results']['curve']] for r in (a, b, c)]))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    step1, fedavg, step_half = json.loads(p.stdout.strip().splitlines()[-1])
    assert step1 == pytest.approx(fedavg, abs=0.021)  # float rounding may flip one of the 50 test examples
    assert step_half[-1] > 1 / 4 + 0.3  # 4 classes: chance is 1/4


def test_example_task_refuses_a_data_dir(load_example):
    from fedbench.errors import UserError

    ex = load_example("noisy_blobs")
    with pytest.raises(UserError, match="bad value '/tmp' for data_dir: noisy_blobs makes its own data"):
        ex.NoisyBlobsConfig(data_dir="/tmp")


def test_tutorial_sweep_preset_is_nine_runs():
    from fedbench.runners.core.sweep import load_sweep

    runs = load_sweep(EXAMPLES / "my_sweep.yaml", out="unused")
    assert [(r.spec.method, r.spec.run.seed) for r in runs] == [
        (m, s) for m in ("fedavg", "fedra", "exclusive") for s in (0, 1, 2)]
    assert {r.spec.run.roc for r in runs} == {"1:1:1"} and {r.spec.task for r in runs} == {"tiny_vision"}
