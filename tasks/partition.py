"""Client data partitions for the ``--setting`` grammar (numpy only).

Each setting follows the paper that introduced it:

* ``iid`` -- equal random shards (sizes differ by at most one).
* ``dir(a)`` -- classic per-class Dirichlet(a) label skew over all clients
  (Hsu et al. 2019; the label-skew partition used across the FL literature).
* ``k/a`` (e.g. ``20/1.0``) -- Fed-HeLLo (fed_hello.txt, Sec. IV-A): "a '20/1.0'
  Non-IID setting means that each client has samples from 20 categories, with
  quantities skewed by a Dirichlet distribution with alpha = 1.0".  Following the
  Fed-HeLLo code (``ClassWisePartitioner``), classes are dealt to clients from a
  shuffled pool, then each class is split among its holders with Dirichlet(a)
  proportions on top of a guaranteed minimum of 2 examples per holder.
* ``k/-`` (e.g. ``10/-``) -- FedLoRA (fedlora_model_heterogeneous.txt, "Datasets"):
  pathological "assign only data from 10 out of the 100 classes to each client"
  (non-IID: 10/100), "following the method specified in (Shamsian et al., 2021)"
  (pFedHN, Sec. 5): k classes per client, and each holder i of class c gets the share
  ``a_ic / sum_j a_jc`` of it with ``a_ic ~ U(0.4, 0.6)`` (pFedHN's
  ``gen_classes_per_node``); see :func:`uniform_share_counts`.
* ``domain`` -- FedRA feature skew (fedra_2024_v2_arxiv.txt, "Datasets and
  Partition" (1)): "We create six clients using data from six domains" -- one
  client per domain, holding all of that domain's data.
* ``domain+dir(a)xm`` (e.g. ``domain+dir(0.5)x5``) -- FedRA feature & label skew
  (ibid. (2)): "we split the data from each domain into five parts according to
  a Dirichlet distribution.  This results in the creation of 30 clients"; the
  concentration is 0.5 in the paper.
* ``k/Dd`` (e.g. ``25/D1``) -- Fed-HeLLo DomainNet-121: "a '25/D1' Non-IID
  setting indicates that each client has 25 categories and one domain per
  category".  See :func:`_split_k_domains` for the exact rule.

Every partition is seeded (``np.random.default_rng(seed)`` only), disjoint,
resamples a bounded number of times (never loops forever) and carries a
fingerprint: a hash of the per-client label histograms plus the setting string.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from fedbench.errors import UserError
from fedbench.tasks.setting import Setting, parse_setting


# --------------------------------------------------------------------------- result


@dataclass
class Partition:
    client_indices: list[np.ndarray]  # per client, sorted int64 indices into the TRAIN set; disjoint
    fingerprint: str
    setting: str  # the canonical form of the setting (Setting.canonical)
    client_domains: list[int] | None = None  # domain id per client (domain settings only)

    def sizes(self) -> list[int]:
        return [int(len(ix)) for ix in self.client_indices]


def label_histograms(part, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_clients, n_classes) int64 counts; ``part`` is a Partition or a list of index arrays."""
    idx_lists = part.client_indices if isinstance(part, Partition) else part
    labels = np.asarray(labels)
    hist = np.zeros((len(idx_lists), n_classes), dtype=np.int64)
    for c, ix in enumerate(idx_lists):
        hist[c] = np.bincount(labels[np.asarray(ix, dtype=np.int64)], minlength=n_classes)[:n_classes]
    return hist


def fingerprint(client_indices: Sequence[np.ndarray], labels: np.ndarray, n_classes: int,
                setting: str) -> str:
    """sha256 (16 hex chars) of canonical JSON of per-client label histograms + setting."""
    hist = label_histograms(list(client_indices), labels, n_classes).tolist()
    blob = json.dumps({"setting": setting, "histograms": hist}, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def check_disjoint(train_ids: Iterable, test_ids: Iterable) -> None:
    """Raise ValueError if any identifier (path, hash, ...) is in both train and test."""
    overlap = set(train_ids) & set(test_ids)
    if overlap:
        shown = ", ".join(sorted(repr(x) for x in overlap)[:3])
        raise ValueError(f"train and test share {len(overlap)} example(s), e.g. {shown}")


# --------------------------------------------------------------------------- client counts


def n_clients_for(setting: Setting | str, n_clients: int | None, n_domains: int | None) -> int:
    """Number of clients a setting yields: the domain settings fix it from the data."""
    setting = parse_setting(setting) if isinstance(setting, str) else setting
    if setting.kind in ("domain", "domain_dir"):
        if n_domains is None or n_domains < 1:
            raise UserError(f"setting {setting.canonical!r} needs per-example domain ids (no domains given)")
        return n_domains * (setting.m if setting.kind == "domain_dir" else 1)
    if n_clients is None or n_clients < 1:
        raise UserError(f"setting {setting.canonical!r} needs n_clients >= 1 (got {n_clients})")
    return int(n_clients)


# --------------------------------------------------------------------------- helpers


def _balanced_pick(n_items: int, n_pickers: int, per_picker: int,
                   rng: np.random.Generator) -> list[np.ndarray]:
    """Give each picker ``per_picker`` distinct items, keeping item use balanced.

    Each picker takes the least-used items (ties broken at random), so use counts
    never differ by more than one: every item is used as soon as
    n_pickers * per_picker >= n_items, and no picker gets an item twice.  Same
    spirit as Fed-HeLLo's shuffled class sampler, without its wrap-around duplicates.
    """
    used = np.zeros(n_items, dtype=np.int64)
    picks = []
    for _ in range(n_pickers):
        order = np.lexsort((rng.random(n_items), used))  # primary key: use count
        chosen = np.sort(order[:per_picker])
        used[chosen] += 1
        picks.append(chosen)
    return picks


def _holders_by_item(picks: list[np.ndarray], n_items: int) -> list[list[int]]:
    holders: list[list[int]] = [[] for _ in range(n_items)]
    for client, items in enumerate(picks):
        for it in items:
            holders[int(it)].append(client)
    return holders


def _dirichlet_counts(n: int, n_share: int, alpha: float, rng: np.random.Generator,
                      min_per_share: int = 2) -> np.ndarray:
    """Fed-HeLLo's quantity split: a minimum per share, the rest by Dirichlet(alpha).

    The minimum (capped so it is always feasible) keeps every holder of a class
    actually holding it, so no resampling is needed here.
    """
    floor = min(min_per_share, n // n_share)
    rest = n - floor * n_share
    counts = (rng.dirichlet([alpha] * n_share) * rest).astype(np.int64)
    residual = rest - int(counts.sum())
    np.add.at(counts, rng.choice(n_share, residual), 1)  # hand out rounding leftovers
    return counts + floor


def uniform_share_counts(n: int, n_share: int, rng: np.random.Generator,
                         low: float = 0.4, high: float = 0.6) -> np.ndarray:
    """pFedHN's (Shamsian et al. 2021, Sec. 5) split of one class's ``n`` examples among its
    ``n_share`` holders: holder i's share is ``a_i / sum_j a_j`` with ``a_i ~ U(low, high)``,
    rounded down, the rounding leftovers (fewer than ``n_share``) handed to distinct holders."""
    a = rng.uniform(low, high, size=n_share)
    counts = np.floor(a / a.sum() * n).astype(np.int64)
    residual = n - int(counts.sum())
    counts[rng.choice(n_share, residual, replace=False)] += 1
    return counts


def _too_small(setting: str, n: int, n_clients: int, detail: str) -> UserError:
    return UserError(
        f"data too small for {n_clients} clients with setting {setting!r} "
        f"({n} training examples): {detail}; use fewer clients or a milder setting"
    )


def _dirichlet_label_skew(idx: np.ndarray, labels: np.ndarray, n_clients: int, alpha: float,
                          rng: np.random.Generator, max_retries: int, setting: str) -> list[np.ndarray]:
    """Classic per-class Dirichlet split of ``idx`` over ``n_clients``.

    Clients already above the fair share get no more of later classes (the usual
    NIID-Bench balancing), and the draw is repeated until every client has at
    least ``min_size`` examples -- at most ``max_retries`` times.
    """
    n = len(idx)
    min_size = 2 if n >= 10 * n_clients else 1  # tiny data: only ask for non-empty clients
    if n < min_size * n_clients:
        raise _too_small(setting, n, n_clients, f"need at least {min_size} example(s) per client")
    sub = labels[idx]
    classes = np.unique(sub)
    for _ in range(max(1, max_retries)):
        buckets: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        sizes = np.zeros(n_clients, dtype=np.int64)
        for c in classes:
            idx_c = rng.permutation(idx[sub == c])
            p = rng.dirichlet([alpha] * n_clients) * (sizes < n / n_clients)
            if p.sum() <= 0:  # tiny alpha can underflow every eligible weight to 0
                p = (sizes < n / n_clients).astype(float)
            cuts = (np.cumsum(p / p.sum()) * len(idx_c)).astype(np.int64)[:-1]
            for client, piece in enumerate(np.split(idx_c, cuts)):
                buckets[client].append(piece)
                sizes[client] += len(piece)
        if sizes.min() >= min_size:
            return [np.concatenate(b) if b else np.empty(0, np.int64) for b in buckets]
    raise _too_small(setting, n, n_clients,
                     f"no Dirichlet({alpha}) draw gave every client >= {min_size} example(s) "
                     f"in {max_retries} tries")


# --------------------------------------------------------------------------- per-setting splits


def _split_iid(labels, n_clients, rng, **_):
    return np.array_split(rng.permutation(len(labels)), n_clients)


def _split_dir(labels, n_clients, rng, setting, max_retries, **_):
    idx = np.arange(len(labels), dtype=np.int64)
    return _dirichlet_label_skew(idx, labels, n_clients, setting.alpha, rng, max_retries, setting.canonical)


def _deal_classes(labels, n_clients, k, rng, setting):
    """Classes present in the data, and each client's k distinct classes (balanced)."""
    classes = np.unique(labels)
    if k > len(classes):
        raise UserError(f"setting {setting.canonical!r} asks for k={k} classes per client "
                        f"but the data has only {len(classes)} classes")
    return classes, _holders_by_item(_balanced_pick(len(classes), n_clients, k, rng), len(classes))


def _split_k_classes(labels, n_clients, rng, setting, **_):
    """k/a (Dirichlet(a) quantities per class) and k/- (pFedHN's U(0.4, 0.6) shares per class)."""
    classes, holders = _deal_classes(labels, n_clients, setting.k, rng, setting)
    out: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for ci, c in enumerate(classes):
        hs = holders[ci]
        if not hs:  # fewer client slots than classes: this class stays unused
            continue
        idx_c = rng.permutation(np.flatnonzero(labels == c))
        if setting.kind == "k_alpha":
            counts = _dirichlet_counts(len(idx_c), len(hs), setting.alpha, rng)
        else:
            counts = uniform_share_counts(len(idx_c), len(hs), rng)
        pieces = np.split(idx_c, np.cumsum(counts)[:-1])
        for client, piece in zip(hs, pieces):
            out[client].append(piece)
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in out]


def _split_k_domains(labels, n_clients, rng, setting, domains, **_):
    """k/Dd: each client gets k classes, and for each of them data from d domains.

    Fed-HeLLo: "'25/D1' ... each client has 25 categories and one domain per
    category".  As in the Fed-HeLLo code, classes are dealt as in k/a; then every
    holder of class c is given d distinct domains of c (balanced, so each
    (class, domain) cell is used when there are enough holders), and each
    (class, domain) cell is split in equal shares among the holders assigned to
    it.  Cells nobody was assigned stay unused (partitions may leave data out).
    If class c has fewer than d domains, its holders get all of them.
    """
    dom_values = np.unique(domains)
    if setting.d > len(dom_values):
        raise UserError(f"setting {setting.canonical!r} asks for d={setting.d} domains per class "
                        f"but the data has only {len(dom_values)} domains")
    classes, holders = _deal_classes(labels, n_clients, setting.k, rng, setting)
    out: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for ci, c in enumerate(classes):
        hs = holders[ci]
        if not hs:
            continue
        idx_c = np.flatnonzero(labels == c)
        doms_c = np.unique(domains[idx_c])
        picks = _balanced_pick(len(doms_c), len(hs), min(setting.d, len(doms_c)), rng)
        for di, cell_holders in enumerate(_holders_by_item(picks, len(doms_c))):
            if not cell_holders:
                continue
            cell = rng.permutation(idx_c[domains[idx_c] == doms_c[di]])
            for pos, piece in zip(cell_holders, np.array_split(cell, len(cell_holders))):
                out[hs[pos]].append(piece)
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in out]


def _split_domain(labels, n_clients, rng, setting, domains, max_retries, **_):
    """domain: client g = all of domain g; domain_dir: m Dirichlet clients per domain."""
    out = []
    for g in np.unique(domains):  # sorted, so client order follows domain order
        idx_g = np.flatnonzero(domains == g)
        if setting.kind == "domain":
            out.append(idx_g)
        else:
            out.extend(_dirichlet_label_skew(idx_g, labels, setting.m, setting.alpha, rng,
                                             max_retries, setting.canonical))
    return out


_SPLITTERS = {
    "iid": _split_iid,
    "dir": _split_dir,
    "k_alpha": _split_k_classes,
    "k_path": _split_k_classes,
    "k_domains": _split_k_domains,
    "domain": _split_domain,
    "domain_dir": _split_domain,
}


# --------------------------------------------------------------------------- entry point


def _check_inputs(labels, domains, setting: Setting):
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise UserError("labels must be a non-empty 1-D array of integer class ids")
    if labels.min() < 0:
        raise UserError("labels must be >= 0")
    if setting.needs_domains:
        if domains is None:
            raise UserError(f"setting {setting.canonical!r} needs per-example domain ids, "
                            "but this task has no domains")
        domains = np.asarray(domains)
        if domains.shape != labels.shape:
            raise UserError(f"domains has shape {domains.shape}, labels {labels.shape}")
    return labels.astype(np.int64), domains


def partition(setting: Setting | str, labels: np.ndarray, n_clients: int | None, seed: int,
              domains: np.ndarray | None = None, n_classes: int | None = None,
              max_retries: int = 100) -> Partition:
    """Split the training set (``labels[i]`` = class of example i) among clients.

    For ``domain`` / ``domain+dir(a)xm`` the client count comes from the data
    (see :func:`n_clients_for`) and ``n_clients`` is ignored.  Client indices are
    sorted int64 and disjoint; some examples may be left unassigned (e.g. classes
    no client holds).  Raises :class:`UserError` when the data is too small.
    """
    setting = parse_setting(setting) if isinstance(setting, str) else setting
    labels, domains = _check_inputs(labels, domains, setting)
    n_domains = len(np.unique(domains)) if setting.needs_domains else None
    n = n_clients_for(setting, n_clients, n_domains)
    n_cls = int(n_classes) if n_classes is not None else int(labels.max()) + 1
    if labels.max() >= n_cls:
        raise UserError(f"labels go up to {labels.max()} but n_classes={n_cls}")

    rng = np.random.default_rng(seed)
    parts = _SPLITTERS[setting.kind](labels=labels, n_clients=n, rng=rng, setting=setting,
                                     domains=domains, max_retries=max_retries)
    parts = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    empty = [c for c, p in enumerate(parts) if len(p) == 0]
    if empty:  # an empty client cannot train; say so now rather than mid-run
        raise _too_small(setting.canonical, len(labels), n, f"{len(empty)} client(s) got no data")

    client_domains = None
    if setting.kind in ("domain", "domain_dir"):
        per = setting.m if setting.kind == "domain_dir" else 1
        client_domains = [int(g) for g in np.unique(domains) for _ in range(per)]
    return Partition(parts, fingerprint(parts, labels, n_cls, setting.canonical), setting.canonical, client_domains)
