"""Small pure helpers: sizes, setting descriptions, method families, label placement."""

from __future__ import annotations

import re

import pytest

from fedbench.leaderboard.families import ORDER, OTHER, families_in, family_of
from fedbench.leaderboard.plot_style import spread
from fedbench.leaderboard.settings import describe_setting
from fedbench.units import GB, MB, format_bytes, mem_source_label, size_unit


@pytest.mark.parametrize("nbytes,shown", [
    (0.1764491 * GB, "176.4 MB"),  # the ledgar peak memory, below 1 GB: MB
    (1.25 * GB, "1.25 GB"),
    (1.5 * GB, "1.5 GB"),
    (999.96 * MB, "1 GB"),  # would round to 1000 MB
    (999.94 * MB, "999.9 MB"),
    (0.6603 * MB, "0.6603 MB"),
    (0.00088 * MB, "0.00088 MB"),  # a statistics upload never reads as 0
    (0.0, "0 MB"),
    (-0.0, "0 MB"),
    (-0.4935 * GB, "-493.5 MB"),
    (None, "-"),
])
def test_format_bytes(nbytes, shown):
    assert format_bytes(nbytes) == shown


def test_size_unit_and_source():
    assert size_unit([0.5 * GB, None, 0.2 * GB]) == (MB, "MB")
    assert size_unit([0.5 * GB, -1.2 * GB]) == (GB, "GB")
    assert size_unit([]) == (MB, "MB")
    assert (mem_source_label("cuda"), mem_source_label("accounted")) == ("measured on CUDA", "accounted")


@pytest.mark.parametrize("setting,words", [
    ("iid", "IID: equal random shards"),
    ("2/-", "2 classes per client, equal shares"),
    ("1/-", "1 class per client, equal shares"),
    ("20/1.0", "20 classes per client, quantities by Dirichlet(1.0)"),
    ("dir(0.5)", "label skew, Dirichlet(0.5) over all clients"),
    ("domain", "one client per domain"),
    ("domain+dir(0.5)x5", "5 clients per domain, labels split by Dirichlet(0.5)"),
    ("25/D1", "25 classes per client, 1 domain per class"),
    ("nonsense", "nonsense"),
])
def test_describe_setting(setting, words):
    assert describe_setting(setting) == words


def test_every_documented_setting_form_is_described():
    """The examples that the partition grammar documents all get words (not only the raw string)."""
    partition = pytest.importorskip("fedbench.tasks.setting")
    examples = re.findall(r"[^\s,()]+(?:\([^)]*\)[^\s,()]*)?", partition.VALID_FORMS.split("(e.g.")[1])
    assert len(examples) >= 5
    for s in examples:
        partition.parse_setting(s)  # a real setting
        assert describe_setting(s) != s, s


def test_families():
    assert family_of("fed_hello_gd_inverted") == "Fed-HeLLo" and family_of("hetlora") == "rank heterogeneity"
    assert family_of("brand_new") == OTHER
    assert families_in(["brand_new", "flora", "fedavg", "fedra"]) == [
        "baselines", "layer / depth subsets", "rank heterogeneity", OTHER]


def test_every_method_declares_a_family_the_plots_order():
    """The family lives on the method class (``Method.family``), not in a table of keys."""
    from fedbench.methods import METHODS

    undeclared = [k for k in METHODS.keys() if METHODS.get(k).family not in ORDER]
    assert not undeclared, f"methods without a family of leaderboard.families.ORDER: {undeclared}"


def test_spread_by_hand():
    assert spread([], 1.0) == []
    assert spread([0.0, 5.0], 1.0) == [0.0, 5.0]  # far apart: at their points
    assert spread([0.0, 0.0, 5.0], 1.0) == [-0.5, 0.5, 5.0]  # a crowded pair centred on its points
    # three at 10 within [0, 10]: gap 1 fits, the block is pushed down to end at 10
    assert spread([10.0, 10.0, 10.0], 1.0, 0.0, 10.0) == [8.0, 9.0, 10.0]
    # five labels in [0, 2]: the gap shrinks to (2 - 0) / 4 = 0.5
    assert spread([1.0] * 5, 1.0, 0.0, 2.0) == [0.0, 0.5, 1.0, 1.5, 2.0]
    # in the points' order 0.2, 1.0, 3.0 the shifted heights y_k - k * gap all pool into one block
    z = (0.2 + (1.0 - 2.0) + (3.0 - 4.0)) / 3
    assert spread([3.0, 0.2, 1.0], 2.0) == pytest.approx([z + 4.0, z, z + 2.0])
