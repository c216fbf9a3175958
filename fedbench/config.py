"""Typed configs: frozen dataclasses, validated at load time.

Every config field is declared with :func:`cfg_field`: its default, its help text and its
**role**, the one place that says what the field is for:

* ``result`` (default): can change a run's results. Part of the run's identity (the run
  id hashes it) and of the leaderboard's row variant (two values = two rows).
* ``axis``: part of the identity, but the leaderboard lays it out as a table axis rather
  than a variant: the data setting and resource label (columns, row labels) and the seed
  (the replicates a cell averages over).
* ``record``: changes what the record holds but not the quality a method reaches
  (evaluation schedule, measuring FLOPs, the device): part of the identity, never a variant.
* ``runtime``: how or where a run executes (output folder, threads, executor, workers,
  checkpoint settings, data location): neither identity nor variant, and not stored in the
  record's config sections.

A field may also have a command-line flag (``flag=True``: ``--field-name``; or a string:
that flag) whose help is the field's help; ``aliases`` are older names still accepted.
The CLI's flags, ``fedbench list --fields``, the run id and the leaderboard's grouping all
derive from this metadata (:func:`field_specs`).

Values come from defaults, then a YAML file (sections ``run``, ``method``, ``task``), then
``--set section.key=value`` overrides (parsed by the field's declared type, never as YAML);
unknown keys are errors naming the valid ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from typing import Any, Mapping


from fedbench.errors import UserError, shown
from fedbench.infiles import read_yaml


RESULT, AXIS, RECORD, RUNTIME = "result", "axis", "record", "runtime"
ROLES = (RESULT, AXIS, RECORD, RUNTIME)
#: roles whose fields the run id hashes
IDENTITY_ROLES = (RESULT, AXIS, RECORD)

#: the bound of every integer field: a 64-bit signed integer (seeds, sizes, counts)
INT_MAX = 2**63 - 1


def cfg_field(default: Any, help: str, *, role: str = RESULT, flag: bool | str = False,
              aliases: tuple[str, ...] = (), **kw: Any) -> Any:
    """A dataclass field with help text, a role and optionally a CLI flag (mutable defaults
    go through a factory)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    meta = {"help": help, "role": role, "flag": flag, "aliases": tuple(aliases)}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return dataclasses.field(default=default, metadata=meta, **kw)


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """What :func:`cfg_field` declared about one field of a config class."""

    name: str
    type: Any
    default: Any
    help: str
    role: str
    flag: str | None  # the command-line flag ("--per-round"), or None
    aliases: tuple[str, ...]


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


@functools.lru_cache(maxsize=None)
def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """Every field of config class ``cls`` with its declared role, flag and help (read once
    per class: the run id, the record and the leaderboard ask for it per run and per record)."""
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        flag = f.metadata.get("flag", False)
        name = ("--" + f.name.replace("_", "-")) if flag is True else (flag or None)
        out.append(FieldSpec(f.name, hints[f.name], _default_of(f), f.metadata.get("help", ""),
                             f.metadata.get("role", RESULT), name, tuple(f.metadata.get("aliases", ()))))
    return tuple(out)


def values_with_roles(cls: type, values: Mapping[str, Any], roles: tuple[str, ...]) -> dict[str, Any]:
    """The entries of ``values`` (a config as a dict) whose field in ``cls`` has one of
    ``roles``; keys ``cls`` does not declare (an older record's fields) are left out."""
    keep = {s.name for s in field_specs(cls) if s.role in roles}
    return {k: v for k, v in values.items() if k in keep}


def without_defaults(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` whose value differs from the field's declared default in
    ``cls`` (compared as canonical JSON); keys ``cls`` does not declare are kept. A run id
    hashes these, so adding a field whose default keeps the old behaviour leaves every
    existing run id, and so every finished record a sweep skips, as it was."""
    defaults = {s.name: s.default for s in field_specs(cls)}

    def canon(v: Any) -> str:
        return json.dumps(v, sort_keys=True, default=str)

    return {k: v for k, v in values.items() if k not in defaults or canon(v) != canon(defaults[k])}


class FieldError(UserError):
    """A config field holding a value outside what it allows.

    Raised by a config's ``__post_init__`` (through :func:`check`); :func:`build_config`
    prefixes the field with its section, giving one line such as
    ``bad value -1 for run.seed: must be >= 0``.
    """

    def __init__(self, name: str, value: Any, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"bad value {_show(value)} for {name}: {allowed}")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class (a 2000-run preset builds 6000 configs)."""
    return typing.get_type_hints(cls)


_clip = shown  # a value in a message: bounded, whatever its size (errors.shown)


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)) and len(value) <= 64 and all(isinstance(v, (int, float, str)) for v in value):
        return shown(",".join(map(str, value)))
    return shown(value)


def check(cfg: Any, name: str, ok: bool, allowed: str) -> None:
    """In a config's ``__post_init__``: fail with :class:`FieldError` unless ``ok``.

    ``allowed`` says what the field accepts, e.g. ``"must be >= 1"``.
    """
    if not ok:
        raise FieldError(name, getattr(cfg, name), allowed)


def check_int(cfg: Any, name: str, lo: int, hi: int | None = None, optional: bool = False, why: str = "") -> None:
    """In a config's ``__post_init__``: field ``name`` must be an integer ``lo <= v <= hi`` (no
    upper bound when ``hi`` is None; None allowed when ``optional``); ``why`` explains the
    bounds in the message, e.g. ``"(the model's positions)"``."""
    value = getattr(cfg, name)
    allowed = f"must be an integer >= {lo}" + ("" if hi is None else f" and <= {hi}")
    allowed += (" (or none)" if optional else "") + (f" {why}" if why else "")
    in_range = value is not None and lo <= value and (hi is None or value <= hi)
    check(cfg, name, in_range or (optional and value is None), allowed)


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Turn a YAML / command-line value into the field's declared type.

    Booleans are not numbers, floats must be finite (NaN and infinity are refused for
    every float field), integers fit in 64 bits (:data:`INT_MAX`) and are written in
    decimal (``010`` is ten, as on the command line), lists accept ``a,b,c`` or
    ``[a, b, c]`` strings and single values.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(value, inner[0], name)
        errors = []
        for a in inner:
            try:
                return _coerce(value, a, name)
            except (UserError, ValueError, TypeError) as e:
                errors.append(str(e))
        raise UserError(errors[0] if errors else f"bad value {_clip(value)} for {name}: wrong type")
    if origin is typing.Literal:
        if value not in args:
            raise UserError(f"bad value {_clip(value)} for {name}; choose from {', '.join(map(str, args))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("[") and text.endswith("]"):
                text = text[1:-1]
            value = [v.strip() for v in text.split(",") if v.strip() != ""]
        elif isinstance(value, dict):
            raise UserError(f"bad value {_clip(value)} for {name}: expected a list")
        elif not isinstance(value, (list, tuple)):
            value = [value]
        inner = args[0] if args else Any
        out = [_coerce(v, inner, name) for v in value]
        return tuple(out) if origin is tuple else out
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise UserError(f"bad value {_clip(value)} for {name}: expected true/false")
    if tp is str:
        if isinstance(value, (list, tuple, dict, set)) or value is None:
            raise UserError(f"bad value {_clip(value)} for {name}: expected a string")
        return str(value)
    if tp in (int, float):
        expected = "an integer" if tp is int else "a number"
        if isinstance(value, bool) or value is None:
            raise UserError(f"bad value {_clip(value)} for {name}: expected {expected}")
        try:
            if tp is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            if isinstance(value, str) and len(value) > 64:  # no 10,000-digit numbers
                raise ValueError
            out = int(value.strip(), 10) if tp is int and isinstance(value, str) else tp(value)
        except (TypeError, ValueError, OverflowError):
            raise UserError(f"bad value {_clip(value)} for {name}: expected {expected}") from None
        if tp is float and not math.isfinite(out):
            raise UserError(f"bad value {_clip(value)} for {name}: must be a finite number (not NaN or infinity)")
        if tp is int and abs(out) > INT_MAX:
            raise UserError(f"bad value {_clip(value)} for {name}: must fit in 64 bits (|value| <= 2**63 - 1)")
        return out
    return value


def build_config(cls: type, values: Mapping[str, Any] | None = None, section: str = "") -> Any:
    """Instantiate dataclass ``cls`` from a mapping, coercing types; unknown keys fail."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    alias = {a: f.name for f in fields.values() for a in f.metadata.get("aliases", ())}
    values = {alias.get(k, k): v for k, v in (values or {}).items()}
    unknown = [k for k in values if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, list(fields), n=1)
        hint = f"; did you mean {section + '.' if section else ''}{close[0]}?" if close else ""
        prefix = f"{section}." if section else ""
        raise UserError(
            f"unknown config key {prefix}{k}{hint} (valid: {', '.join(prefix + f for f in sorted(fields))})"
        )
    kwargs = {k: _coerce(v, hints[k], f"{section}.{k}" if section else k) for k, v in values.items()}
    try:
        return cls(**kwargs)
    except FieldError as e:
        raise FieldError(f"{section}.{e.name}" if section else e.name, e.value, e.allowed) from None
    except UserError:
        raise
    except (ValueError, TypeError) as e:
        msg = str(e)
        name = msg.split(" ", 1)[0]
        if name in kwargs and " " in msg:  # "lora_r must be >= 1": name the value too
            where = f"{section}.{name}" if section else name
            raise UserError(f"bad value {_show(kwargs[name])} for {where}: {msg.split(' ', 1)[1]}") from None
        raise UserError(f"invalid {section or cls.__name__} config: {e}") from None


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg or {})




SECTIONS = ("run", "method", "task")


def parse_overrides(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["method.t_rgd=2", "lr=0.1"]`` -> ``{"method": {"t_rgd": "2"}, "run": {"lr": "0.1"}}``.

    A key without a section prefix belongs to the run config. Values stay strings: the
    field's declared type parses them (:func:`build_config`), so ``seed=010`` is ten and
    ``roc=6:3:1`` a ratio, never YAML's octal or sexagesimal numbers.
    """
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for item in items or []:
        if "=" not in item:
            raise UserError(f"bad --set {item!r}: expected key=value (e.g. method.t_rgd=2)")
        key, value = item.split("=", 1)
        key = key.strip()
        section, _, name = key.rpartition(".")
        section = section or "run"
        if section not in SECTIONS:
            raise UserError(f"bad --set key {key!r}: section must be one of {', '.join(SECTIONS)}")
        out[section][name] = value.strip()
    return out


def load_yaml_config(path: str) -> dict[str, dict[str, Any]]:
    data = read_yaml(path, "config file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path}: expected a mapping with sections {', '.join(SECTIONS)}")
    bad = [k for k in data if k not in SECTIONS]
    if bad:
        raise UserError(f"config file {path}: unknown section {bad[0]!r} (valid: {', '.join(SECTIONS)})")
    for s in SECTIONS:
        if data.get(s) is not None and not isinstance(data[s], dict):
            raise UserError(f"config file {path}: section {s!r} must be a mapping of fields, got {_clip(data[s])}")
    return {s: dict(data.get(s) or {}) for s in SECTIONS}
