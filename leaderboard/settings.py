"""What a data setting means, in words, for the notes and the plot titles.

The ``--setting`` grammar is parsed for runs by ``fedbench.tasks.partition.parse_setting``
(which imports numpy and, through its package, every task); the leaderboard reads only
records, so it recognises the same forms here by their shape (a test checks every form
that ``parse_setting`` documents). A string of another form is described as itself.
"""

from __future__ import annotations

import re

__all__ = ["describe_setting"]

_NUM = r"([0-9.eE+\-]+)"
_FORMS = (
    (re.compile(r"iid"), lambda: "IID: equal random shards"),
    (re.compile(r"domain"), lambda: "one client per domain"),
    (re.compile(r"dir\(" + _NUM + r"\)"), lambda a: f"label skew, Dirichlet({a}) over all clients"),
    (re.compile(r"domain\+dir\(" + _NUM + r"\)x(\d+)"),
     lambda a, m: f"{m} clients per domain, labels split by Dirichlet({a})"),
    (re.compile(r"(\d+)/d(\d+)"),
     lambda k, d: f"{k} classes per client, {d} domain{'s' if d != '1' else ''} per class"),
    (re.compile(r"(\d+)/-"), lambda k: f"{k} class{'es' if k != '1' else ''} per client, equal shares"),
    (re.compile(r"(\d+)/" + _NUM), lambda k, a: f"{k} class{'es' if k != '1' else ''} per client, "
                                               f"quantities by Dirichlet({a})"),
)


def describe_setting(setting: str) -> str:
    """``"2/-"`` -> ``"2 classes per client, equal shares"``, ``"20/1.0"`` -> ``"20 classes
    per client, quantities by Dirichlet(1.0)"``, ``"iid"`` -> ``"IID: equal random
    shards"``; a string of no known form is returned as it is."""
    text = setting.strip().lower()
    for pattern, words in _FORMS:
        m = pattern.fullmatch(text)
        if m:
            return words(*m.groups())
    return setting
