"""Registries of methods, tasks and executors.

A registry maps a lowercase snake-case key to a factory and a one-line description.
Modules register themselves with a decorator; a registry given its ``package`` imports
every module of that folder (``import_submodules``) the first time it is read, so adding a
method touches one file and importing ``fedbench.methods`` or ``fedbench.tasks`` (or one of
their torch-free modules, such as ``fedbench.tasks.setting``) imports no torch.
:func:`declared_keys` reads the keys from the source without importing it.

Plugins: a registry with an entry-point ``group`` (``fedbench.methods``,
``fedbench.tasks``) also holds what installed packages declare there, loaded the first
time the registry is read. An entry point names a class (registered under the entry
point's name) or a module (whose import registers its classes with the decorator)::

    # a user's pyproject.toml
    [project.entry-points."fedbench.methods"]
    my_method = "my_package.methods:MyMethod"

Plugin loading is isolated: a plugin that fails to import (any exception, or a
``sys.exit`` at import, which is reported and not obeyed), that names something other than
a subclass of the registry's base class (a method must be a ``Method``, a task a ``Task``),
or that is named like a built-in entry (the built-in is kept) is skipped with one warning
naming it; it never breaks the suite's own methods and tasks or the other plugins.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import pkgutil
import re
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from fedbench.errors import UserError, user_failure

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry(Generic[T]):
    key: str
    obj: T
    description: str
    aliases: tuple[str, ...] = ()


def plugin_entry_points(group: str | None = None) -> list:
    """Installed entry points of the plugin groups (or of ``group``), sorted by name."""
    from importlib.metadata import entry_points

    groups = [group] if group else list(PLUGIN_GROUPS)
    return sorted((ep for g in groups for ep in entry_points(group=g)), key=lambda ep: (ep.group, ep.name))


#: the entry-point groups third-party packages register methods and tasks in
PLUGIN_GROUPS = ("fedbench.methods", "fedbench.tasks")


def unknown_key(kind: str, key: str, choices: list[str]) -> UserError:
    """The one line for a key no registry holds, with the nearest one as a hint (the
    registry's own error, and the CLI's check before the imports: :func:`declared_keys`)."""
    choices = sorted(choices)
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.0)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UserError(f"unknown {kind} {key!r}{hint} (choose from: {', '.join(choices)})")


#: ``@METHODS.register("key", ..., aliases=("a", ...))`` up to the class or function it decorates
_DECLARATION = re.compile(r'@(\w+)\.register\(\s*(?:"([^"]+)"|([A-Z_][A-Z0-9_]*))(.*?)\n(?:class|def) ', re.S)
_ALIASES = re.compile(r"aliases=\(([^)]*)\)")


def declared_keys(package: str, registry: str) -> list[str]:
    """Every key and alias ``registry`` (its name in the source, e.g. ``METHODS``) is given
    by a ``@REGISTRY.register(...)`` decorator in a module of ``package``, read from the
    source text without importing it (so without torch): what ``fedbench run`` checks a
    ``--method`` against before the imports. A test checks it equals the registry's keys
    and aliases once the modules are imported. Plugins are not in it
    (:func:`plugin_entry_points` lists their names)."""
    from importlib.util import find_spec
    from pathlib import Path

    from fedbench.infiles import read_text

    spec = find_spec(package)
    keys: list[str] = []
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder).glob("*.py")):
            text = read_text(path, "module source")  # the one bounded reader
            if f"@{registry}.register(" not in text:
                continue
            for name, key, const, rest in _DECLARATION.findall(text):
                if const:  # register(NAME, ...) with NAME = "key" in the same module
                    found = re.search(rf'^{const}\s*(?::[^=]*)?=\s*"([^"]+)"', text, re.M)
                    key = found.group(1) if found else ""
                if name == registry and key:
                    aliases = _ALIASES.search(rest)
                    keys += [key] + (re.findall(r'"([^"]+)"', aliases.group(1)) if aliases else [])
    return sorted(keys)


#: kind -> (package, the registry's name in its source, the plugins' entry-point group)
DECLARING = {"method": ("fedbench.methods", "METHODS", "fedbench.methods"),
             "task": ("fedbench.tasks", "TASKS", "fedbench.tasks")}


def check_declared(kind: str, key: str) -> None:
    """Raise the registry's own :func:`unknown_key` line when ``key`` is no built-in key or
    alias of ``kind`` (:data:`DECLARING`) and no installed plugin's, without importing the
    modules (the checks before torch is imported)."""
    package, registry, group = DECLARING[kind]
    known = declared_keys(package, registry)
    if key not in known:
        known += [ep.name for ep in plugin_entry_points(group)] + loaded_keys(package, registry)
        if key not in known:
            raise unknown_key(kind, key, known)


def loaded_keys(module: str, registry: str) -> list[str]:
    """The keys and aliases registered so far in ``module``'s ``registry`` when that module is
    imported already (a caller's own registrations, e.g. a test's), without loading anything."""
    import sys

    reg = getattr(sys.modules.get(module), registry, None)
    return [] if reg is None else sorted([*reg._entries, *reg._aliases])


class Registry(Generic[T]):
    """Keys of one kind. ``package`` (e.g. ``fedbench.methods``): the package whose modules
    register the built-in entries, imported the first time the registry is read (so that
    importing the package, or a module of it such as ``fedbench.tasks.setting``, does not
    import every method or task and torch with them). ``base``: ``"module:Class"`` every
    entry must subclass."""

    def __init__(self, kind: str, group: str | None = None, base: str | None = None, package: str | None = None):
        self.kind = kind
        self.group = group  # entry-point group of plugins (None: no plugins)
        self.base = base  # "module:Class" every entry must subclass (None: anything)
        self.package = package
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}
        self._plugins_loaded = group is None and package is None

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # first: a module imported below may read the registry
        if self.package is not None:
            import_submodules(self.package)
        if self.group is None:
            return
        for ep in plugin_entry_points(self.group):
            if ep.name in self._entries or ep.name in self._aliases:
                log.warning("%s plugin %r (%s) is named like a built-in %s: skipped, the built-in is kept",
                            self.kind, ep.name, ep.value, self.kind)
                continue
            try:
                obj = ep.load()
                if isinstance(obj, type):
                    self.add(ep.name, obj)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - a broken plugin must not break the suite
                log.warning("%s plugin %r (%s) could not be loaded: %s", self.kind, ep.name, ep.value, user_failure(e))

    def register(self, key: str, description: str = "", aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(key, obj, description, aliases)
            return obj

        return deco

    def add(self, key: str, obj: T, description: str = "", aliases: tuple[str, ...] = ()) -> None:
        if key != key.lower() or " " in key:
            raise ValueError(f"{self.kind} key {key!r} must be lowercase snake case")
        if key in self._entries or key in self._aliases:
            raise ValueError(f"{self.kind} {key!r} registered twice")
        self._check_base(key, obj)
        if not description:
            doc = (getattr(obj, "__doc__", None) or "").strip()
            description = doc.splitlines()[0] if doc else ""
        self._entries[key] = Entry(key, obj, description, tuple(aliases))
        for a in aliases:
            self._aliases[a] = key

    def _check_base(self, key: str, obj: T) -> None:
        if self.base is None:
            return
        mod, _, name = self.base.partition(":")
        base = getattr(importlib.import_module(mod), name)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise TypeError(f"{self.kind} {key!r} is {getattr(obj, '__qualname__', type(obj).__name__)}, "
                            f"not a subclass of {name}: not registered")

    def remove(self, key: str) -> None:
        """Unregister ``key`` and its aliases (tests that register a method of their own)."""
        key = self.resolve(key)
        entry = self._entries.pop(key)
        for a in entry.aliases:
            self._aliases.pop(a, None)

    def resolve(self, key: str) -> str:
        self._load_plugins()
        if key in self._entries:
            return key
        if key in self._aliases:
            return self._aliases[key]
        raise unknown_key(self.kind, key, list(self._entries) + list(self._aliases))

    def get(self, key: str) -> T:
        return self._entries[self.resolve(key)].obj

    def entry(self, key: str) -> Entry[T]:
        return self._entries[self.resolve(key)]

    def keys(self) -> list[str]:
        self._load_plugins()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        return [self._entries[k] for k in self.keys()]

    def __contains__(self, key: str) -> bool:
        self._load_plugins()
        return key in self._entries or key in self._aliases


def import_submodules(package_name: str) -> None:
    """Import every module of a package so their ``@register`` decorators run."""
    pkg = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")
