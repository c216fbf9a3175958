"""Sweep presets: load, expand (methods x settings x resources x seeds), validate, label.

A preset is checked as a whole before its first run: its keys and their types, every
method and the task, and every run's run / method / task configs (built and validated
as ``fedbench run`` would). Any problem is one :class:`~fedbench.errors.UserError` line
naming the preset file and the key, so a typo in the last method never costs the
training of the first ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedbench.infiles import read_yaml
from fedbench.errors import UserError
from fedbench.only import keep, shown

if TYPE_CHECKING:
    from fedbench.runners.core.spec import RunSpec

#: key -> what it holds (for messages)
#: a preset of this many runs says it is being checked: issue 39 timed 40,000 runs at over 180 s
#: of silence (about 5 ms a run, when every run was validated on its own); a thousand still take a second or more
SAY_CHECKING_FROM = 1000

PRESET_KEYS = {
    "task": "a task key, e.g. tiny_text",
    "methods": "a list of method keys, e.g. [fedavg, fedra]",
    "settings": "a list of data splits, e.g. [iid, dir(0.5)]",
    "resources": "a list of run-field mappings, e.g. [{roc: \"6:3:1\"}, {capacities: [12, 6]}]",
    "seeds": "a list of integer seeds, e.g. [0, 1]",
    "run": "a mapping of run fields, e.g. {rounds: 5, clients: 6}",
    "task_config": "a mapping of task fields, e.g. {n_train: 600}",
    "method_config": "a mapping of method key (or `all`) to a mapping of method fields",
    "method_variants": "a list of method-field mappings applied to every method, one more sweep axis, e.g. "
                       "[{archs: cnn1}, {archs: hetero}]",
    "out": "a records directory",
}


def load_preset(path: str | Path) -> dict:
    """Read a preset file: a YAML mapping (read bounded and safely: :func:`~fedbench.infiles.read_yaml`)."""
    data = read_yaml(path, "sweep preset")
    if data is None:
        raise UserError(f"preset {path} is empty: it needs at least `task` and `methods`")
    if not isinstance(data, dict):
        raise UserError(f"preset {path}: expected a mapping of keys ({', '.join(PRESET_KEYS)}), "
                        f"got a {type(data).__name__}")
    return data


def _type_error(key: str, value: Any) -> UserError:
    return UserError(f"key {key!r} must be {PRESET_KEYS[key]}; got {value!r}")


def check_preset(preset: dict) -> None:
    """Keys and their types (not yet the values inside the configs)."""
    bad = sorted(set(preset) - set(PRESET_KEYS), key=str)
    if bad:
        raise UserError(f"unknown key {bad[0]!r} (valid: {', '.join(sorted(PRESET_KEYS))})")
    if "task" not in preset or "methods" not in preset:
        raise UserError("a preset needs `task` and a non-empty `methods` list")
    if not isinstance(preset["task"], str) or not preset["task"].strip():
        raise _type_error("task", preset["task"])
    for key, item_ok in (("methods", lambda v: isinstance(v, str) and v.strip() != ""),
                         ("settings", lambda v: isinstance(v, str) and v.strip() != ""),
                         ("resources", lambda v: v is None or isinstance(v, dict)),
                         ("method_variants", lambda v: v is None or isinstance(v, dict)),
                         ("seeds", lambda v: isinstance(v, int) and not isinstance(v, bool))):
        value = preset.get(key)
        if value is None and key != "methods":
            continue
        if not isinstance(value, list) or not value or not all(item_ok(v) for v in value):
            raise _type_error(key, value)
    dupes = sorted({m for m in preset["methods"] if preset["methods"].count(m) > 1})
    if dupes:
        raise UserError(f"key 'methods' lists {dupes[0]!r} more than once")
    for key in ("run", "task_config", "method_config"):
        if preset.get(key) is not None and not isinstance(preset[key], dict):
            raise _type_error(key, preset[key])
    for name, cfg in (preset.get("method_config") or {}).items():
        if name != "all" and name not in preset["methods"]:
            raise UserError(f"key 'method_config' has an entry for {name!r}, which is neither `all` nor one of "
                            f"the preset's methods ({', '.join(preset['methods'])})")
        if cfg is not None and not isinstance(cfg, dict):
            raise UserError(f"key 'method_config.{name}' must be a mapping of method fields; got {cfg!r}")
    if preset.get("out") is not None and (not isinstance(preset["out"], str) or not preset["out"].strip()):
        raise _type_error("out", preset["out"])


def expand_sweep(preset: dict) -> list[dict]:
    """A preset's runs: methods x method variants x settings x resources x seeds.

    Keys: ``task`` (required), ``methods`` (list), ``settings`` (list, default [iid]),
    ``resources`` (list of {roc: ...} / {capacities: ...} / {} ; default [{}]),
    ``seeds`` (list, default [0]), ``run`` / ``task_config`` (dicts), ``method_config``
    (dict of method key -> dict; key ``all`` applies to every method), ``method_variants``
    (list of method-field dicts, each applied to every method over ``method_config``,
    default [{}]), ``out``.
    """
    check_preset(preset)
    mcfg = preset.get("method_config") or {}
    runs = []
    for method, variant, setting, res, seed in itertools.product(
        preset["methods"], preset.get("method_variants") or [{}], preset.get("settings") or ["iid"],
        preset.get("resources") or [{}], preset.get("seeds") or [0]
    ):
        run = dict(preset.get("run") or {})
        run.update(res or {})
        run.update(setting=setting, seed=seed)
        if preset.get("out"):
            run.setdefault("out", preset["out"])
        m = {**(mcfg.get("all") or {}), **(mcfg.get(method) or {}), **(variant or {})}
        runs.append({"method": method, "task": preset["task"], "run": run, "method_config": m,
                     "task_config": dict(preset.get("task_config") or {})})
    return runs


def _short(r: dict) -> str:
    return f"{r['method']}, {r['run'].get('setting')}, seed {r['run'].get('seed')}"


@dataclass(frozen=True)
class SweepRun:
    spec: RunSpec
    label: str  # names everything that differs between the sweep's runs
    config: str = ""  # the row's fields but its seed (:func:`config_key`): runs that differ only by seed share it


def load_sweep(path: str | Path, out: str | None = None,
               say: Callable[[str], None] | None = None) -> list[SweepRun]:
    """Load, expand and validate a preset: every run's spec is built (every config checked)
    before the first run starts. ``out`` (``--out``) overrides the preset's. Two rows that
    are the same run (same run id: a duplicate seed, method variant or setting spelling)
    are refused. ``say`` (the CLI's stderr): told when a preset of at least
    :data:`SAY_CHECKING_FROM` runs is being checked; the library prints nothing."""
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    preset = load_preset(path)
    try:
        runs = expand_sweep(preset)
        TASKS.resolve(preset["task"])
        for m in preset["methods"]:
            try:
                METHODS.resolve(m)
            except UserError as e:
                raise UserError(f"key 'methods': {e}") from None
    except UserError as e:
        raise UserError(f"preset {path}: {e}") from None
    specs, seen, built = [], {}, {}
    if say is not None and len(runs) >= SAY_CHECKING_FROM:  # seconds of checks ahead: say so rather than look hung
        say(f"fedbench: checking the {len(runs)} runs of {path} ...")
    for r in runs:
        if out:
            r["run"]["out"] = out
        try:
            spec = _spec_of(r, built)
        except UserError as e:
            key = _preset_key(preset, r, str(e))
            raise UserError(f"preset {path}: {f'key {key!r}, ' if key else ''}run {_short(r)}: {e}") from None
        if spec.run_id in seen:
            raise UserError(f"preset {path}: run {_short(r)} is the same run as {_short(seen[spec.run_id])} "
                            f"(a duplicate seed, setting or variant)")
        seen[spec.run_id] = r
        specs.append(spec)
    if say is not None and len(runs) >= SAY_CHECKING_FROM:
        say(f"fedbench: {len(runs)} runs checked ({len(built)} distinct configurations, each validated once)")
    return [SweepRun(spec, label, config_key(r)) for spec, label, r in zip(specs, run_labels(runs, specs), runs)]


def config_key(r: dict) -> str:
    """A preset row's fields but its seed, as canonical JSON: rows with the same key are one
    configuration at several seeds, validated once (:func:`load_sweep`)."""
    run = {k: v for k, v in r["run"].items() if k != "seed"}
    return json.dumps([r["method"], r["task"], run, r["method_config"], r["task_config"]], sort_keys=True, default=repr)


def _spec_of(r: dict, built: dict[str, RunSpec]) -> RunSpec:
    """The spec of preset row ``r``: built and validated (:func:`~fedbench.runners.core.spec.build_spec`)
    once per configuration (:func:`config_key`), then derived for each other seed
    (:meth:`~fedbench.runners.core.spec.RunSpec.with_seed`). A seed the derivation refuses is
    built in full, so its error is the one ``fedbench run`` gives."""
    from fedbench.runners.core.spec import build_spec

    key = config_key(r)
    base = built.get(key)
    if base is not None:
        try:
            return base.with_seed(r["run"]["seed"])
        except UserError:
            pass
    spec = build_spec(r["method"], r["task"], r["run"], r["method_config"], r["task_config"])
    built.setdefault(key, spec)
    return spec


def check_preset_early(path: str | Path) -> None:
    """The preset's checks that need no torch, with :func:`load_sweep`'s lines: YAML, keys and
    their types, the task and methods (:func:`~fedbench.registry.check_declared`), every
    run's run fields, setting and ``--roc`` (``fedbench sweep`` makes them before the
    imports; :func:`load_sweep` checks everything again, the method's and task's fields too)."""
    from fedbench.config import build_config
    from fedbench.configs import RunConfig
    from fedbench.registry import check_declared
    from fedbench.runners.core.config import check_run

    preset = load_preset(path)
    try:
        runs = expand_sweep(preset)
        check_declared("task", preset["task"])
        for m in preset["methods"]:
            try:
                check_declared("method", m)
            except UserError as e:
                raise UserError(f"key 'methods': {e}") from None
    except UserError as e:
        raise UserError(f"preset {path}: {e}") from None
    checked: set[str] = set()  # each run-field mapping checked whole once; other seeds, the seed alone
    for r in runs:
        try:
            key = json.dumps({k: v for k, v in r["run"].items() if k != "seed"}, sort_keys=True, default=repr)
            if key in checked:
                build_config(RunConfig, {"seed": r["run"].get("seed")}, "run")
                continue
            check_run(build_config(RunConfig, r["run"], "run"))
            checked.add(key)
        except UserError as e:
            key = _preset_key(preset, r, str(e))
            raise UserError(f"preset {path}: {f'key {key!r}, ' if key else ''}run {_short(r)}: {e}") from None


#: :data:`fedbench.only.KEYS` -> the spec value each selects on; besides them, ``method.<field>``,
#: ``task.<field>`` and ``run.<field>`` select on a config field (:func:`_field_value`)
ONLY_KEYS = {"method": lambda s: s.method, "setting": lambda s: s.run.setting, "seed": lambda s: s.run.seed,
             "clients": lambda s: s.run.clients, "roc": lambda s: s.run.roc}
_SECTIONS = {"method": lambda s: s.method_config, "task": lambda s: s.task_config, "run": lambda s: s.run}


_ABSENT = object()


def _config_value(spec: RunSpec, key: str) -> Any:
    """The value of config field ``key`` (``method.server_rule``) of ``spec``, defaults
    included; ``_ABSENT`` when the run's config has no such field."""
    section, _, name = key.partition(".")
    cfg = _SECTIONS[section](spec)
    return getattr(cfg, name) if name in {f.name for f in dataclasses.fields(cfg)} else _ABSENT


def _field_value(spec: RunSpec, key: str) -> str | None:
    """The value of config field ``key`` of ``spec`` as ``--only`` compares it
    (:func:`fedbench.only.shown`); None when the run's config has no such field (a method
    without it is not selected)."""
    v = _config_value(spec, key)
    return None if v is _ABSENT else shown(v)


def _spec_value(run: SweepRun, key: str, field: bool) -> str | None:
    return _field_value(run.spec, key) if field else str(ONLY_KEYS[key](run.spec))


def select(runs: list[SweepRun], only: list[str] | None) -> list[SweepRun]:
    """The runs matching every ``KEY=V1,V2`` of ``only`` (``--only``, :mod:`fedbench.only`;
    keys: method, setting, seed, clients, roc, and any config field as ``method.<field>``,
    ``task.<field>`` or ``run.<field>``, e.g. ``method.server_rule=authors_code``), in preset
    order: part of a preset, with the same run ids as the whole (a later run of the whole preset
    skips them). A key of neither kind, or a filter that matches no run, is a
    :class:`~fedbench.errors.UserError`."""
    return keep(runs, only, _spec_value, "run of the preset")


def _preset_key(preset: dict, r: dict, message: str) -> str | None:
    """The preset key a run's config error comes from, from the field it names."""
    m = re.search(r"\b(run|method|task)\.(\w+)", message)
    if m is None:
        return "settings" if "setting" in message else None
    section, name = m.groups()
    if section == "task":
        return "task_config"
    if section == "method":
        mcfg = preset.get("method_config") or {}
        if any(name in (v or {}) for v in preset.get("method_variants") or []):
            return "method_variants"
        return f"method_config.{r['method']}" if name in (mcfg.get(r["method"]) or {}) else "method_config.all"
    if name in ("seed", "setting"):
        return name + "s"
    if any(name in (res or {}) for res in preset.get("resources") or []):
        return "resources"
    return "run"


def _fmt(v: Any) -> str:
    """A label's value as ``--only`` reads it back: strings bare, the rest compact JSON
    (``false``, ``[0.16,0.33,1.0]``), so a label's ``key=value`` pastes into ``--only``."""
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def run_labels(runs: list[dict], specs: list[RunSpec] | None = None) -> list[str]:
    """One label per run naming everything that differs between the sweep's runs
    (method, setting, resources, seed, and any run / method / task field), so no two
    distinct runs look the same in the progress lines. Each ``key=value`` of a label is an
    ``--only`` filter that keeps its run (a run field the filter keys lack is ``run.<field>``);
    with the runs' ``specs``, a field one row sets and another leaves to its default shows the
    default too (``method_variants: [{}, {train_head: false}]``: ``method.train_head=true``)."""
    flat = []
    for r in runs:
        d = {"method": r["method"]}
        d.update({k if k in ONLY_KEYS else f"run.{k}": v for k, v in r["run"].items() if k != "out"})
        d.update({f"method.{k}": v for k, v in r["method_config"].items()})
        d.update({f"task.{k}": v for k, v in r["task_config"].items()})
        flat.append(d)
    keys: list[str] = []
    for d in flat:
        keys += [k for k in d if k not in keys]
    for d, spec in zip(flat, specs or ()):
        for k in keys:
            if k not in d and k.partition(".")[0] in _SECTIONS and (v := _config_value(spec, k)) is not _ABSENT:
                d[k] = v
    differ = [k for k in keys if len({repr(d.get(k, _ABSENT)) for d in flat}) > 1]
    order = (["setting"] if "setting" in differ else []) + [k for k in differ if k not in ("method", "setting", "seed")]
    labels = []
    for d in flat:
        parts = [d["method"]]
        for k in order:
            if k == "setting":
                parts.append(_fmt(d["setting"]))
            elif k in d:
                parts.append(f"{k}={_fmt(d[k])}")
        if "seed" in differ:
            parts.append(f"seed {d['seed']}")
        labels.append(" ".join(parts))
    return labels


def pending(runs: list[SweepRun], warn, say=print, limit: int | None = None) -> tuple[list[tuple[str, SweepRun]], int]:
    """The runs still to do, each with its progress label (``[i/n] label``), and how many
    are done; ``say`` gets a line for each done run (the first ``limit``, then one line
    counting the rest; None = every one)."""
    todo, done = [], 0
    for i, r in enumerate(runs, 1):
        label = f"[{i}/{len(runs)}] {r.label}"
        path = r.spec.record_path()
        if is_done(path, warn):
            if limit is None or done < limit:
                say(f"{label}: done ({path})")
            done += 1
        else:
            todo.append((label, r))
    if limit is not None and done > limit:
        say(f"... {done - limit} more runs done not listed (the first {limit} are)")
    return todo, done


def is_done(path: Path, warn) -> bool:
    """Whether the record at ``path`` is a finished (``ok``) run. A corrupt record is one
    ``warn(line)`` and counts as not done, so the run is redone and the file replaced."""
    from fedbench.records import RecordError, read_record_status

    try:
        return read_record_status(path) == "ok"
    except RecordError as e:
        warn(f"corrupt record {e}; running it again")
        return False
