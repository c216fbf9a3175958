"""Tests for fedbench.tasks.partition (the --setting grammar and the client splits)."""

import importlib
import importlib.util
import pathlib
import sys
import time

import numpy as np
import pytest

from fedbench.errors import UserError


def _load():
    try:
        return importlib.import_module("fedbench.tasks.partition")
    except ImportError:  # package not installed editable yet: load the file directly
        path = pathlib.Path(__file__).resolve().parents[2] / "tasks" / "partition.py"
        spec = importlib.util.spec_from_file_location("fedbench_tasks_partition", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look the module up while it executes
        spec.loader.exec_module(mod)
        return mod


P = _load()

N, N_CLASSES, N_DOMAINS = 600, 10, 6


@pytest.fixture(scope="module")
def data():
    # Every (class, domain) cell has exactly 10 examples, in a shuffled order.
    rng = np.random.default_rng(123)
    order = rng.permutation(N)
    labels = (order % N_CLASSES).astype(np.int64)
    domains = ((order // N_CLASSES) % N_DOMAINS).astype(np.int64)
    return labels, domains


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize("text, expected", [
    ("iid", P.Setting("iid", "iid")),
    ("IID", P.Setting("iid", "IID")),
    ("dir(0.5)", P.Setting("dir", "dir(0.5)", alpha=0.5)),
    ("dir(1e-1)", P.Setting("dir", "dir(1e-1)", alpha=0.1)),
    ("20/1.0", P.Setting("k_alpha", "20/1.0", k=20, alpha=1.0)),
    ("25/1", P.Setting("k_alpha", "25/1", k=25, alpha=1.0)),
    ("10/-", P.Setting("k_path", "10/-", k=10)),
    ("domain", P.Setting("domain", "domain")),
    ("domain+dir(0.5)x5", P.Setting("domain_dir", "domain+dir(0.5)x5", alpha=0.5, m=5)),
    ("25/D1", P.Setting("k_domains", "25/D1", k=25, d=1)),
    (" 15/D2 ", P.Setting("k_domains", "15/D2", k=15, d=2)),
])
def test_parse_valid(text, expected):
    s = P.parse_setting(text)
    assert s == expected
    assert s.needs_domains == (s.kind in {"domain", "domain_dir", "k_domains"})


@pytest.mark.parametrize("text", [
    "foo", "", "dir", "dir()", "dir(0)", "dir(-1)", "dir(nan)", "dir(inf)", "dir(abc)",
    "0/1.0", "20/0", "20/-1", "20/", "/1.0", "a/1.0", "0/-", "domain+dir(0.5)x0",
    "domain+dir(0.5)", "domain+dir(0)x5", "25/D0", "0/D1", "25/D", "20/1.0x", "dir(0.5)\nx",
])
def test_parse_malformed(text):
    with pytest.raises(UserError) as ei:
        P.parse_setting(text)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "valid forms" in msg and "domain+dir(a)xm" in msg and "k/Dd" in msg



@pytest.mark.parametrize("spellings", [
    ["iid", "IID", " iid", "iid\t", "Iid"],
    ["20/1.0", "20/1", "20/1.00", "020/1.0", "20/1e0", "20/10e-1"],
    ["dir(0.5)", "DIR(0.5)", "dir(.5)", "dir(5e-1)", "dir(0.50)"],
    ["25/D1", "25/d1", " 25/D01 "],
    ["domain+dir(0.5)x5", "Domain+Dir(0.50)x05"],
    ["10/-", "010/-", "10/-  "],
    ["domain", "DOMAIN"],
])
def test_every_spelling_of_a_split_has_one_canonical_form(spellings):
    assert [P.parse_setting(s).canonical for s in spellings] == [spellings[0]] * len(spellings)


def test_partitions_of_two_spellings_are_one_partition(data):
    labels, _ = data
    a, b = P.partition("IID", labels, 5, seed=0), P.partition(" iid", labels, 5, seed=0)
    assert a.setting == b.setting == "iid" and a.fingerprint == b.fingerprint
    assert P.partition("2/1", labels, 5, seed=0, n_classes=N_CLASSES).setting == "2/1.0"


@pytest.mark.parametrize("text", ["domain+dir(0.5)x" + "9" * 30, "9" * 25 + "/1.0", "3/D100001", "100001/-"])
def test_counts_in_a_setting_are_bounded(text):
    with pytest.raises(UserError, match=r"must be in 1\.\.100000"):
        P.parse_setting(text)


def test_a_long_bad_setting_is_echoed_short():
    with pytest.raises(UserError) as e:
        P.parse_setting("x" * 10_000)
    assert len(str(e.value)) < 300

def test_n_clients_for():
    assert P.n_clients_for(P.parse_setting("domain"), 100, 6) == 6
    assert P.n_clients_for(P.parse_setting("domain+dir(0.5)x5"), None, 6) == 30
    assert P.n_clients_for(P.parse_setting("20/1.0"), 7, None) == 7
    for bad in (None, 0):
        with pytest.raises(UserError):
            P.n_clients_for(P.parse_setting("iid"), bad, None)
    with pytest.raises(UserError):
        P.n_clients_for(P.parse_setting("domain"), None, None)


# ------------------------------------------------------------------ generic properties

CASES = [  # (setting, n_clients)
    ("iid", 7),
    ("dir(0.5)", 8),
    ("3/1.0", 10),
    ("3/-", 10),
    ("domain", None),
    ("domain+dir(0.5)x3", None),
    ("3/D1", 20),
    ("3/D2", 20),
]


def _run(setting, n_clients, data, seed):
    labels, domains = data
    return P.partition(setting, labels, n_clients, seed, domains=domains, n_classes=N_CLASSES)


@pytest.mark.parametrize("setting, n_clients", CASES)
def test_generic_properties(setting, n_clients, data):
    labels, domains = data
    part = _run(setting, n_clients, data, seed=0)
    expected_n = P.n_clients_for(P.parse_setting(setting), n_clients, N_DOMAINS)
    assert len(part.client_indices) == expected_n
    assert part.setting == setting
    allidx = np.concatenate(part.client_indices)
    assert len(allidx) == len(np.unique(allidx)), "clients overlap"
    assert allidx.min() >= 0 and allidx.max() < N
    for ix in part.client_indices:
        assert ix.dtype == np.int64 and len(ix) > 0
        assert np.all(np.diff(ix) > 0), "indices not sorted"
    assert part.sizes() == [len(ix) for ix in part.client_indices]
    hist = P.label_histograms(part, labels, N_CLASSES)
    assert hist.shape == (expected_n, N_CLASSES) and hist.sum() == len(allidx)

    # Same seed -> identical split and fingerprint.
    again = _run(setting, n_clients, data, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(part.client_indices, again.client_indices))
    assert again.fingerprint == part.fingerprint
    assert len(part.fingerprint) >= 16 and int(part.fingerprint, 16) >= 0

    if setting != "domain":  # 'domain' is deterministic by definition (client g = domain g)
        other = _run(setting, n_clients, data, seed=1)
        assert any(not np.array_equal(a, b) for a, b in zip(part.client_indices, other.client_indices))
        assert other.fingerprint != part.fingerprint


def test_fingerprint_depends_on_setting_and_histograms(data):
    labels, _ = data
    idx = [np.arange(0, 300), np.arange(300, 600)]
    fp = P.fingerprint(idx, labels, N_CLASSES, "iid")
    assert fp == P.fingerprint([i.copy() for i in idx], labels, N_CLASSES, "iid")
    assert fp != P.fingerprint(idx, labels, N_CLASSES, "dir(0.5)")
    assert fp != P.fingerprint([np.arange(0, 299), np.arange(299, 600)], labels, N_CLASSES, "iid")


def test_iid_sizes_balanced(data):
    part = _run("iid", 7, data, seed=3)
    sizes = part.sizes()
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == N
    assert part.client_domains is None


# ------------------------------------------------------------------ class-per-client settings


@pytest.mark.parametrize("setting", ["3/1.0", "3/-", "3/0.1"])
def test_k_classes_exactly_k_and_all_classes_held(setting, data):
    labels, _ = data
    part = _run(setting, 10, data, seed=5)
    hist = P.label_histograms(part, labels, N_CLASSES)
    assert ((hist > 0).sum(axis=1) == 3).all()
    holders = (hist > 0).sum(axis=0)
    assert (holders > 0).all(), "some class is held by nobody"
    assert holders.max() - holders.min() <= 1, "class assignment not balanced"
    # every example of a held class is given out
    assert hist.sum() == N


def test_uniform_share_counts():
    """pFedHN's split: shares a_i / sum(a) with a_i ~ U(0.4, 0.6), so any two holders' counts
    differ by at most a factor 0.6 / 0.4 (+1 for rounding) and everything is handed out."""
    rng = np.random.default_rng(0)
    for n, h in [(1000, 2), (999, 3), (5, 4), (0, 2)]:
        counts = P.uniform_share_counts(n, h, rng)
        assert counts.sum() == n and len(counts) == h
        assert counts.max() <= counts.min() * 0.6 / 0.4 + 1
    draws = [tuple(P.uniform_share_counts(1000, 2, rng)) for _ in range(20)]
    assert len(set(draws)) > 1 and any(abs(a - b) > 1 for a, b in draws)  # not equal shares


def test_k_path_shares_follow_pfedhn(data):
    labels, _ = data
    hist = P.label_histograms(_run("3/-", 10, data, seed=2), labels, N_CLASSES)
    spreads = []
    for c in range(N_CLASSES):
        shares = hist[:, c][hist[:, c] > 0]
        assert shares.max() <= shares.min() * 0.6 / 0.4 + 1
        spreads.append(int(np.ptp(shares)))
    assert max(spreads) > 1  # the shares are drawn, not equal


def test_k_alpha_dirichlet_skew(data):
    labels, _ = data
    # 1 class per client, 2 holders per class: alpha=0.1 gives very uneven shares, k/- never does.
    skewed = P.label_histograms(_run("1/0.1", 20, data, seed=4), labels, N_CLASSES)
    spread = [np.ptp(skewed[:, c][skewed[:, c] > 0]) for c in range(N_CLASSES)]
    assert max(spread) > 10


def test_k_larger_than_classes_is_user_error(data):
    with pytest.raises(UserError):
        _run("11/1.0", 5, data, seed=0)
    with pytest.raises(UserError):
        _run("11/D1", 5, data, seed=0)


# ------------------------------------------------------------------ domain settings


def test_domain_one_client_per_domain(data):
    _, domains = data
    part = _run("domain", 99, data, seed=0)  # n_clients is ignored for domain settings
    assert part.client_domains == list(range(N_DOMAINS))
    for c, ix in enumerate(part.client_indices):
        assert set(domains[ix]) == {c}
        assert len(ix) == int((domains == c).sum())


def test_domain_dir_m_clients_per_domain(data):
    labels, domains = data
    part = _run("domain+dir(0.5)x3", None, data, seed=0)
    assert len(part.client_indices) == 3 * N_DOMAINS
    assert part.client_domains == [g for g in range(N_DOMAINS) for _ in range(3)]
    for c, ix in enumerate(part.client_indices):
        assert set(domains[ix]) == {part.client_domains[c]}
        assert len(ix) >= 2
    hist = P.label_histograms(part, labels, N_CLASSES)
    assert (hist == 0).any(), "alpha=0.5 should leave some client without some class"


@pytest.mark.parametrize("d", [1, 2])
def test_k_domains_per_paper(d, data):
    """Fed-HeLLo '25/D1': each client has k categories and d domain(s) per category."""
    labels, domains = data
    part = _run(f"3/D{d}", 20, data, seed=7)
    assert part.client_domains is None
    held_cells = set()
    for ix in part.client_indices:
        cls = np.unique(labels[ix])
        assert len(cls) == 3
        for c in cls:
            doms = np.unique(domains[ix][labels[ix] == c])
            assert len(doms) == d
            held_cells.update((int(c), int(g)) for g in doms)
    # 20 clients x 3 classes = 6 holders per class >= 6 domains: every cell is used
    assert len(held_cells) == N_CLASSES * N_DOMAINS


def test_k_domains_d_too_large(data):
    with pytest.raises(UserError):
        _run("3/D7", 20, data, seed=0)


@pytest.mark.parametrize("setting", ["domain", "domain+dir(0.5)x5", "25/D1"])
def test_missing_domains_is_user_error(setting, data):
    labels, _ = data
    with pytest.raises(UserError, match="domain ids"):
        P.partition(setting, labels, 10, 0, domains=None)


# ------------------------------------------------------------------ bounded failure


def test_dir_too_many_clients_on_tiny_data_raises_quickly():
    labels = np.arange(30) % 3
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="too small"):
        P.partition("dir(0.05)", labels, 25, seed=0, max_retries=100)
    with pytest.raises(UserError, match="too small"):
        P.partition("dir(0.5)", labels, 31, seed=0)  # fewer examples than clients
    assert time.perf_counter() - t0 < 2.0


def test_dir_resamples_until_every_client_has_min_size(data):
    labels, _ = data
    # Tiny alpha: single draws often leave a client with < 2 examples; the retry loop must not.
    for seed in range(5):
        part = P.partition("dir(0.05)", labels, 10, seed)
        assert min(part.sizes()) >= 2
        assert sum(part.sizes()) == N


def test_iid_more_clients_than_examples_is_user_error():
    with pytest.raises(UserError):
        P.partition("iid", np.arange(5) % 2, 6, seed=0)


def test_bad_labels_are_user_errors():
    with pytest.raises(UserError):
        P.partition("iid", np.array([0.5, 1.0]), 2, seed=0)
    with pytest.raises(UserError):
        P.partition("iid", np.array([0, 3]), 2, seed=0, n_classes=2)


# ------------------------------------------------------------------ helpers


def test_check_disjoint():
    P.check_disjoint(["a.jpg", "b.jpg"], ["c.jpg"])
    with pytest.raises(ValueError, match="share 1"):
        P.check_disjoint(["a.jpg", "b.jpg"], iter(["b.jpg", "c.jpg"]))


def test_label_histograms_values():
    labels = np.array([0, 1, 1, 2, 2, 2])
    hist = P.label_histograms([np.array([0, 1]), np.array([2, 3, 4, 5])], labels, 4)
    assert hist.tolist() == [[1, 1, 0, 0], [0, 1, 3, 0]]
