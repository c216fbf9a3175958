"""Plugin loading is isolated: a broken plugin is one warning and the rest of the registry
(built-ins and the other plugins) works; sys.exit at a plugin's import is reported, not
obeyed; a class that is not a Method is refused; a plugin named like a built-in is warned."""

from __future__ import annotations

import logging
import textwrap
from importlib.metadata import EntryPoint

import pytest

from fedbench import registry
from fedbench.registry import Registry

PLUGINS = '''
import sys
from fedbench.methods.baselines import FedAvg

class Good(FedAvg):
    """a good plugin method"""

class NotAMethod:
    """a plain class"""
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    (tmp_path / "p_ok.py").write_text(textwrap.dedent(PLUGINS))
    (tmp_path / "p_exit.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "p_raise.py").write_text("raise RuntimeError('plugin import broke')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [EntryPoint("exits", "p_exit:X", "g"), EntryPoint("raises", "p_raise:X", "g"),
           EntryPoint("odd", "p_ok:NotAMethod", "g"), EntryPoint("fedavg", "p_ok:Good", "g"),
           EntryPoint("good", "p_ok:Good", "g")]
    monkeypatch.setattr(registry, "plugin_entry_points", lambda group=None: eps)


def test_broken_plugins_are_one_warning_each_and_the_rest_works(plugins, caplog):
    from fedbench.methods.baselines import FedAvg

    reg = Registry("method", group="g", base="fedbench.methods.base:Method")
    reg.add("fedavg", FedAvg)
    with caplog.at_level(logging.WARNING, logger="fedbench.registry"):
        keys = reg.keys()  # no SystemExit, no exception
    assert keys == ["fedavg", "good"] and reg.get("fedavg") is FedAvg
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and all("\n" not in m for m in lines), lines
    said = "\n".join(lines)
    assert "'exits'" in said and "sys.exit(3) (not obeyed)" in said
    assert "'raises'" in said and "RuntimeError: plugin import broke" in said
    assert "'odd'" in said and "not a subclass of Method" in said
    assert "'fedavg'" in said and "named like a built-in" in said


def test_a_non_method_class_is_refused_by_the_decorator_too():
    reg = Registry("method", base="fedbench.methods.base:Method")
    with pytest.raises(TypeError, match="not a subclass of Method"):
        reg.register("odd")(type("Odd", (), {}))
    assert reg.keys() == []
