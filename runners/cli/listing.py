"""``fedbench list``: the registered methods and tasks, the run's fields, with their help.

Listing imports every method and task (torch among them); the output for this exact code
and these plugins is cached (a hash of every source file, of the installed plugin entry
points and of the plugins' own source files), so a second ``fedbench list`` starts in a
fraction of a second; the warnings about broken plugins are cached with it and shown again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fedbench.errors import UserError
from fedbench.infiles import read_json
from fedbench.outfiles import OutputError, write_text


def _list_sources() -> list[Path]:
    """The source files whose code can change what ``fedbench list`` prints."""
    import importlib.util

    from fedbench import version

    files = []
    for pkg in ("fedbench.methods", "fedbench.tasks", "fedbench.runners"):
        spec = importlib.util.find_spec(pkg)  # imports fedbench only, not the package itself
        for d in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(d).rglob("*.py"))
    return files + sorted(Path(version.__file__).parent.glob("*.py"))


def _plugin_sources() -> list[Path]:
    """The source files of the installed plugins' top-level modules (found, not imported): a
    plugin fixed or broken since the listing was cached makes a new listing."""
    import importlib.util

    from fedbench.registry import plugin_entry_points

    files = []
    for top in sorted({ep.value.split(":")[0].split(".")[0].strip() for ep in plugin_entry_points()}):
        spec = importlib.util.find_spec(top)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            files += [f for d in spec.submodule_search_locations for f in sorted(Path(d).rglob("*.py"))]
        elif spec.origin and spec.origin not in ("built-in", "frozen"):
            files.append(Path(spec.origin))
    return files


def _list_cache_path() -> Path | None:
    """Where the listing of this exact code is kept (start-up without importing torch):
    a hash of every source file's path, size and mtime; None when it cannot be computed."""
    import hashlib

    from fedbench import version

    if os.environ.get("FEDBENCH_NO_LIST_CACHE"):
        return None
    try:
        from fedbench.registry import plugin_entry_points

        h = hashlib.sha256(f"{version.__version__} {sys.version} cache 2".encode())
        for ep in plugin_entry_points():
            h.update(f"plugin {ep.group} {ep.name} {ep.value}\n".encode())
        for f in [*_plugin_sources(), *_list_sources()]:
            st = f.stat()
            h.update(f"{f} {st.st_size} {st.st_mtime_ns}\n".encode())
    except (OSError, ImportError, ValueError):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedbench"
    return base / f"list-{h.hexdigest()[:20]}.json"


def _list_entries() -> dict:
    """{registry: [[key, description, aliases, [[field, repr(default), help], ...]], ...]}; the
    run's own fields under "run" (one entry)."""
    import logging

    registry_log = logging.getLogger("fedbench.registry")
    path = _list_cache_path()
    if path is not None:
        try:
            cached = read_json(path, "list cache")  # bounded: a regular file of at most 8 MiB
            for line in cached["warnings"]:  # a broken plugin is named every time, cached or not
                registry_log.warning("%s", line)
            return cached["entries"]
        except (UserError, KeyError, TypeError):  # missing, unreadable or another shape: built again below
            pass
    warned: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warned.append(record.getMessage())

    keep = _Keep()
    registry_log.addHandler(keep)
    try:
        entries = _build_entries()
    finally:
        registry_log.removeHandler(keep)
    if path is not None:
        try:
            write_text(path, json.dumps({"entries": entries, "warnings": warned}))  # the one safe writer
        except (OSError, OutputError):  # a cache: not writing it costs time only
            pass
    return entries


def _build_entries() -> dict:
    from fedbench.config import field_specs
    from fedbench.configs import RunConfig
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    def fields(cls):
        return [[f.name, repr(f.default), _describe(f)] for f in field_specs(cls)]

    entries = {name: [[e.key, e.description, list(e.aliases), fields(e.obj.config_cls)] for e in reg.entries()]
               for name, reg in (("methods", METHODS), ("tasks", TASKS))}
    entries["run"] = [["run", "fields of every run", [], fields(RunConfig)]]
    return entries


def _describe(f) -> str:
    """A field's help, its flag and its role, for ``list --fields``."""
    where = f"{f.flag}; " if f.flag else ""
    return f"{f.help} [{where}role: {f.role}]"


def cmd_list(args) -> int:
    entries = _list_entries()

    def show(title, rows):
        print(f"{title}:")
        width = max(len(r[0]) for r in rows)
        for key, description, aliases, fields in rows:
            alias = f" (alias: {', '.join(aliases)})" if aliases else ""
            print(f"  {key:<{width}}  {description}{alias}")
            if args.fields:
                for name, default, help_ in fields:
                    print(f"  {'':<{width}}    {name} = {default}: {help_}")

    if args.what in ("methods", "all"):
        show("methods (--method; fields: --set method.FIELD=VALUE)", entries["methods"])
    if args.what in ("tasks", "all"):
        show("tasks (--task; fields: --set task.FIELD=VALUE)", entries["tasks"])
    if args.what in ("run", "all") and args.fields:
        print("run fields (--set FIELD=VALUE or the flag named):")
        for name, default, help_ in entries["run"][0][3]:
            print(f"    {name} = {default}: {help_}")
    return 0
