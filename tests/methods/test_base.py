"""The Method interface documents itself: its docstring lists every hook and class flag
the base class declares, and nothing else."""

import re

from fedbench.methods.base import Method


def test_method_docstring_lists_every_hook_and_flag():
    declared = {name for name in vars(Method) if not name.startswith("_")}
    listed = re.findall(r"^ {6}``(\w+)``", Method.__doc__, re.M)
    assert len(listed) == len(set(listed))  # one line each
    assert set(listed) == declared
