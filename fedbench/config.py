"""Typed configs: frozen dataclasses, validated at load time.

Every config field carries help text in ``field(metadata={"help": ...})``. Values come
from defaults, then a YAML file (sections ``run``, ``method``, ``task``), then
``--set section.key=value`` overrides; unknown keys are errors naming the valid ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Mapping

import yaml

from fedbench.errors import UserError


def cfg_field(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with help text (mutable defaults go through a factory)."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return dataclasses.field(default=default, metadata={"help": help}, **kw)


class FieldError(UserError):
    """A config field holding a value outside what it allows.

    Raised by a config's ``__post_init__`` (through :func:`check`); :func:`build_config`
    prefixes the field with its section, giving one line such as
    ``bad value -1 for run.seed: must be >= 0``.
    """

    def __init__(self, name: str, value: Any, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"bad value {_show(value)} for {name}: {allowed}")


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return repr(",".join(map(str, value)))
    return repr(value)


def check(cfg: Any, name: str, ok: bool, allowed: str) -> None:
    """In a config's ``__post_init__``: fail with :class:`FieldError` unless ``ok``.

    ``allowed`` says what the field accepts, e.g. ``"must be >= 1"``.
    """
    if not ok:
        raise FieldError(name, getattr(cfg, name), allowed)


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Turn a YAML / command-line value into the field's declared type.

    Booleans are not numbers, floats must be finite (NaN and infinity are refused for
    every float field), lists accept ``a,b,c`` strings and single values.
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
        raise UserError(errors[0] if errors else f"bad value {value!r} for {name}: wrong type")
    if origin is typing.Literal:
        if value not in args:
            raise UserError(f"bad value {value!r} for {name}; choose from {', '.join(map(str, args))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip() != ""]
        elif isinstance(value, dict):
            raise UserError(f"bad value {value!r} for {name}: expected a list")
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
        raise UserError(f"bad value {value!r} for {name}: expected true/false")
    if tp is str:
        if isinstance(value, (list, tuple, dict, set)) or value is None:
            raise UserError(f"bad value {value!r} for {name}: expected a string")
        return str(value)
    if tp in (int, float):
        expected = "an integer" if tp is int else "a number"
        if isinstance(value, bool) or value is None:
            raise UserError(f"bad value {value!r} for {name}: expected {expected}")
        try:
            if tp is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            out = int(value.strip()) if tp is int and isinstance(value, str) else tp(value)
        except (TypeError, ValueError, OverflowError):
            raise UserError(f"bad value {value!r} for {name}: expected {expected}") from None
        if tp is float and not math.isfinite(out):
            raise UserError(f"bad value {value!r} for {name}: must be a finite number (not NaN or infinity)")
        return out
    return value


def build_config(cls: type, values: Mapping[str, Any] | None = None, section: str = "") -> Any:
    """Instantiate dataclass ``cls`` from a mapping, coercing types; unknown keys fail."""
    values = dict(values or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
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


def describe_fields(cls: type) -> list[tuple[str, Any, str]]:
    """(name, default, help) for each field, for ``fedbench list --verbose``."""
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            d = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            d = f.default_factory()  # type: ignore[misc]
        else:
            d = None
        out.append((f.name, d, f.metadata.get("help", "")))
    return out


SECTIONS = ("run", "method", "task")


def parse_overrides(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["method.t_rgd=2", "lr=0.1"]`` -> ``{"method": {"t_rgd": "2"}, "run": {"lr": "0.1"}}``.

    A key without a section prefix belongs to the run config.
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
        out[section][name] = yaml.safe_load(value) if value.strip() else ""
    return out


def load_yaml_config(path: str) -> dict[str, dict[str, Any]]:
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise UserError(f"config file not found: {path}") from None
    except yaml.YAMLError as e:
        raise UserError(f"config file {path} is not valid YAML: {yaml_error_line(e)}") from None
    if not isinstance(data, dict):
        raise UserError(f"config file {path}: expected a mapping with sections {', '.join(SECTIONS)}")
    bad = [k for k in data if k not in SECTIONS]
    if bad:
        raise UserError(f"config file {path}: unknown section {bad[0]!r} (valid: {', '.join(SECTIONS)})")
    for s in SECTIONS:
        if data.get(s) is not None and not isinstance(data[s], dict):
            raise UserError(f"config file {path}: section {s!r} must be a mapping of fields, got {data[s]!r}")
    return {s: dict(data.get(s) or {}) for s in SECTIONS}


def yaml_error_line(e: Exception) -> str:
    """``line N: problem`` of a YAML error (PyYAML's message spans several lines)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    what = getattr(e, "problem", None) or (str(e).splitlines() or ["bad YAML"])[0]
    return f"{where}{what}"
