"""A torch and a torchvision of two different builds stop a run at its start with one line that
names both versions and the command that pairs them (runners/core/environment.py:
check_torchvision), instead of failing deep inside transformers' model import."""

import importlib.abc
import sys

import pytest
import torch

from fedbench.errors import UserError
from fedbench.runners.core.environment import check_torchvision


class _BrokenTorchvision(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``torchvision`` the way a CUDA build does beside a CPU-only torch: its module
    body raises when it registers its operators."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError("operator torchvision::nms does not exist")


@pytest.fixture
def broken_torchvision(monkeypatch):
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_BrokenTorchvision(), *sys.meta_path])


def test_a_mismatched_pair_is_one_line_with_the_fix(broken_torchvision):
    with pytest.raises(UserError) as err:
        check_torchvision()
    text = str(err.value)
    assert "\n" not in text
    assert f"torch {torch.__version__} and torchvision " in text
    assert "operator torchvision::nms does not exist" in text
    base = torch.__version__.split("+")[0]
    assert f"pip install --force-reinstall torch=={base} torchvision==" in text
    assert "--index-url https://download.pytorch.org/whl/cpu" in text


def test_a_working_pair_passes():
    check_torchvision()  # this venv's pair loads (the rest of the suite builds models with it)
    assert "torchvision" in sys.modules


def test_a_run_stops_before_it_loads_anything(broken_torchvision):
    from fedbench.runners.core.experiment import Experiment

    with pytest.raises(UserError, match="do not load together"):
        Experiment("fedavg", "tiny_text", {"rounds": 1, "clients": 2})


def test_plan_says_it_in_one_line_too(broken_torchvision, capsys):
    from fedbench.runners.cli.cli import main

    assert main(["plan", "--model", "bert-base-uncased", "--methods", "fedavg", "--devices", "phone"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench: error: torch ") and "do not load together" in err and err.count("\n") == 1
