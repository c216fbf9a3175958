"""Which runs share a leaderboard row and cell.

A row is one (method, resource label, config variant). The variant is every field of
``run.method_config``, ``run.task_config`` and the run config that can change a result;
runs of different variants are never averaged. A cell is (row, setting) and holds one
value per seed.

* Which fields those are is each field's declared role (:mod:`fedbench.config`): only
  fields whose role is ``result``, read from the record's ``run.run_config`` (the
  :class:`~fedbench.configs.RunConfig` fields whose role is ``result``), every method field
  (``run.method_config``), the task fields whose :class:`~fedbench.configs.TaskConfig` role
  is ``result`` (so never ``data_dir``, runtime, or ``eval_batch_size``, record-only), and
  the method's version (``run.method_version``: runs of two versions of a rule are never
  averaged). A run, method or task field added after the record was written counts at its
  default, as in the run id (the fields of a method or task the registry does not know: as
  written). Records of older schema versions reach this module upgraded
  (:func:`fedbench.upgrade.upgrade`).
* So never part of the variant: the seed (the cell's samples), the setting (the
  columns), the resource-label fields (the RoC column): their role is ``axis``; and what
  only changes the record or the run's execution (roles ``record``, ``runtime``).
* A field whose value is fixed by the setting within one table (every run of a setting
  has the same value, e.g. the number of clients of a domain split) only restates the
  column and is dropped too, so a row is not split across settings by it.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from fedbench.config import RESULT, field_specs, values_with_roles
from fedbench.configs import RunConfig, TaskConfig
from fedbench.leaderboard.stats import mean

log = logging.getLogger(__name__)

__all__ = [
    "RowKey",
    "Section",
    "build_section",
    "raw_variant",
    "row_names",
    "setting_sort_key",
    "show_value",
    "weak_strong_tiers",
]

_DASH = "-"

Variant = tuple  # sorted ((field name, canonical JSON value), ...)


@dataclass(frozen=True, order=True)
class RowKey:
    method: str
    label: str
    variant: Variant = ()


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _added_later(have, cls: type | None = None, roles: tuple[str, ...] | None = (RESULT,)) -> dict:
    """The fields of ``cls`` (of one of ``roles``; None: every field) missing from ``have`` (a
    record's config; ``cls`` None: the run config), at their defaults: a field added after the
    record was written ran at its default (the rule that keeps run ids stable,
    :func:`fedbench.config.without_defaults`), so a record written before it and one written
    after at its default are one run and one row."""
    cls = RunConfig if cls is None else cls
    return {s.name: s.default for s in field_specs(cls) if (roles is None or s.role in roles) and s.name not in have}


def _config_cls(registry: str, key: str | None) -> type | None:
    """The config class of method or task ``key`` (``registry``: "methods" / "tasks"); None
    for a key the registry does not know (removed since, a plugin not installed): its
    record's fields are then read as written."""
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    reg = METHODS if registry == "methods" else TASKS
    return reg.get(key).config_cls if key in reg else None


def _with_later_fields(given: dict, registry: str, key: str | None, roles: tuple[str, ...] | None) -> dict:
    cls = _config_cls(registry, key)
    return given if cls is None else {**_added_later(given, cls, roles), **given}


def raw_variant(rec: dict) -> dict[str, str]:
    """{field: canonical JSON value} of everything in ``rec`` that can change a result (the
    fields whose role is ``result``). Run fields keep their RunConfig name (``lr``), method
    and task fields get a prefix (``method.lora_r``, ``task.seq_len``), the method's version
    is ``method_version``."""
    run = rec["run"]
    given = values_with_roles(RunConfig, run["run_config"], (RESULT,))
    out = {k: _canon(v) for k, v in {**_added_later(given), **given}.items()}
    for k, v in _with_later_fields(run["method_config"], "methods", run.get("method"), None).items():
        out[f"method.{k}"] = _canon(v)
    not_results = {f.name for f in field_specs(TaskConfig) if f.role != RESULT}
    for k, v in _with_later_fields(run["task_config"], "tasks", run.get("task"), (RESULT,)).items():
        if k not in not_results:
            out[f"task.{k}"] = _canon(v)
    out["method_version"] = _canon(run["method_version"])
    return out


def show_value(canon: str) -> str:
    """A variant value (canonical JSON) as a row name shows it: strings bare, lists
    comma-separated, ``none``, ``true`` / ``false``."""
    v = json.loads(canon)
    if isinstance(v, str):
        return v
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return ",".join(show_value(_canon(x)) for x in v)
    return canon


def setting_sort_key(setting: str) -> tuple[int, str]:
    """Column order of data settings: ``iid`` first, then the rest sorted as strings."""
    return (0, "") if setting == "iid" else (1, setting)


def weak_strong_tiers(rec: dict) -> tuple[str, str]:
    """Tier ids (as the string keys of ``cost.*.by_tier``) of the weakest and the strongest
    tier of a run: the smallest and largest ``run.tiers[*].tier`` ("0" without tiers)."""
    ids = [t["tier"] for t in rec["run"].get("tiers") or []]
    return (str(min(ids)), str(max(ids))) if ids else ("0", "0")


@dataclass
class Section:
    """The runs of one task and metric, grouped into rows and cells."""

    task: str
    metric: str
    records: list[dict]
    rows: list[RowKey]
    names: dict[RowKey, str]  # shown in the Method column
    settings: list[str]
    cells: dict = field(default_factory=dict)  # (RowKey, setting) -> {seed: final}
    runs: dict = field(default_factory=dict)  # RowKey -> [record, ...] (sorted by setting, seed, run_id)
    varying: list[str] = field(default_factory=list)  # run/task variant fields that differ between rows

    def row_of(self, rec: dict) -> RowKey:
        return self._row_of[id(rec)]


def row_names(rows: Sequence[RowKey], hidden: Sequence[str] = ()) -> dict[RowKey, str]:
    """Row -> its name: the method, plus every variant field in which the method's rows
    differ anywhere in ``rows`` (under any resource label), as ``field=value``, so each row
    of a method that was run in several variants names its variant wherever it appears
    (``fedavg (lr=0.01)``, ``fed_plora (method.budget=layers)``). ``hidden``: fields not
    named (a table's heading names them)."""
    by_method: dict = defaultdict(list)
    for rk in rows:
        by_method[rk.method].append(rk)
    names = {}
    for method, group in by_method.items():
        dicts = [dict(rk.variant) for rk in group]
        keys = sorted({k for d in dicts for k in d} - set(hidden))
        differ = [k for k in keys if len({d.get(k) for d in dicts}) > 1]
        for rk, d in zip(group, dicts):
            parts = [f"{k}={show_value(d[k]) if k in d else _DASH}" for k in differ]
            names[rk] = method + (f" ({', '.join(parts)})" if parts else "")
    return names


def _per_seed(task: str, metric: str, values: dict, what: str) -> dict:
    """(row, col) -> {seed: mean of that seed's runs}; warns about repeated seeds."""
    out = {}
    for key, pairs in values.items():
        seeds = Counter(s for s, _ in pairs)
        dup = sorted(s for s, n in seeds.items() if n > 1)
        if dup:
            log.warning("%s/%s: %s %s %s has several runs with seed(s) %s; averaging them",
                        task, metric, key[0].method, key[0].label, f"{what} {key[1]}", dup)
        out[key] = {s: mean(sorted(v for s2, v in pairs if s2 == s)) for s in sorted(seeds)}
    return out


def build_section(task: str, metric: str, recs: Sequence[dict], scale: float = 1.0) -> Section:
    """Group the ok records of one task and metric. Quality values are multiplied by ``scale``."""
    recs = sorted(recs, key=lambda r: (r["run"]["run_config"]["setting"], r["run"]["run_config"]["seed"],
                                       r["run"]["run_id"]))
    raw = [raw_variant(r) for r in recs]
    # Drop fields fixed by the setting: one value per setting in this table.
    keys = sorted({k for v in raw for k in v})
    per_setting: dict = defaultdict(lambda: defaultdict(set))  # field -> setting -> values
    for r, v in zip(recs, raw):
        for k in keys:
            per_setting[k][r["run"]["run_config"]["setting"]].add(v.get(k))
    fixed = {k for k in keys if all(len(vals) == 1 for vals in per_setting[k].values())}
    row_of: dict[int, RowKey] = {}
    for r, v in zip(recs, raw):
        variant = tuple(sorted((k, val) for k, val in v.items() if k not in fixed))
        row_of[id(r)] = RowKey(r["run"]["method"], r["run"].get("resource_label") or _DASH, variant)
    rows = sorted(set(row_of.values()))
    settings = sorted({r["run"]["run_config"]["setting"] for r in recs}, key=setting_sort_key)
    varying = sorted({k for rk in rows for k, _ in rk.variant if not k.startswith("method.")
                      and len({dict(r.variant).get(k) for r in rows}) > 1})

    pairs: dict = defaultdict(list)
    runs: dict = defaultdict(list)
    for r in recs:
        rk = row_of[id(r)]
        runs[rk].append(r)
        if r["results"]["final"] is not None:
            rc = r["run"]["run_config"]
            pairs[(rk, rc["setting"])].append((rc["seed"], r["results"]["final"] * scale))
    sec = Section(task, metric, recs, rows, row_names(rows), settings,
                  cells=_per_seed(task, metric, pairs, "setting"), runs=dict(runs), varying=varying)
    sec._row_of = row_of
    return sec


def per_domain_cells(sec: Section, setting: str, scale: float = 1.0) -> tuple[list[RowKey], list[str], dict]:
    """Rows, domains and cells ((row, domain) -> {seed: value}) of one setting's per-domain results."""
    recs = [r for r in sec.records if r["run"]["run_config"]["setting"] == setting and r["results"]["per_domain"]]
    pairs: dict = defaultdict(list)
    for r in recs:
        for d, v in r["results"]["per_domain"].items():
            pairs[(sec.row_of(r), d)].append((r["run"]["run_config"]["seed"], v * scale))
    rows = sorted({sec.row_of(r) for r in recs})
    domains = sorted({d for r in recs for d in r["results"]["per_domain"]})
    return rows, domains, _per_seed(sec.task, sec.metric, pairs, f"setting {setting} domain")


def worst_client_cells(sec: Section, scale: float = 1.0) -> tuple[list[RowKey], dict]:
    """Rows and cells ((row, setting) -> {seed: value}) of the worst client's score
    (``results.local.min``) of locally evaluated (personalised) runs."""
    recs = [r for r in sec.records if (r["results"].get("local") or {}).get("min") is not None]
    pairs: dict = defaultdict(list)
    for r in recs:
        rc = r["run"]["run_config"]
        pairs[(sec.row_of(r), rc["setting"])].append((rc["seed"], r["results"]["local"]["min"] * scale))
    rows = sorted({sec.row_of(r) for r in recs})
    return rows, _per_seed(sec.task, sec.metric, pairs, "worst client, setting")
