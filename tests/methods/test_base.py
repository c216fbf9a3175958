"""The Method interface documents itself: its docstring lists every hook and class flag
the base class and its five hook groups declare, each under its group, and nothing else."""

import re

from fedbench.methods import hooks
from fedbench.methods.base import Method

GROUPS = (hooks.Planning, hooks.LocalTraining, hooks.Exchange, hooks.Evaluation, hooks.ModelAndState)


def _public(cls) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_method_docstring_lists_every_hook_and_flag():
    declared = _public(Method).union(*map(_public, GROUPS))
    listed = re.findall(r"^ {6}``(\w+)``", Method.__doc__, re.M)
    assert len(listed) == len(set(listed))  # one line each
    assert set(listed) == declared


def test_each_hook_is_listed_under_its_group():
    """The docstring's heading of each group names its class, and lists exactly its hooks."""
    sections = re.split(r"^ {4}(?=\S)", Method.__doc__, flags=re.M)
    for group in GROUPS:
        section = next(s for s in sections if f"hooks.{group.__name__}`" in s.splitlines()[0])
        assert set(re.findall(r"^ {6}``(\w+)``", section, re.M)) == _public(group), group.__name__


def test_the_groups_share_no_hook_and_method_declares_none_of_theirs():
    names = [n for g in GROUPS for n in _public(g)]
    assert len(names) == len(set(names))
    assert not _public(Method) & set(names)
