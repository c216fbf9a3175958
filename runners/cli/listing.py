"""``fedbench list``: the registered methods and tasks, the run's fields, with their help.

Listing imports every method and task (torch among them); the output for this exact code
and these plugins is cached (a hash of every source file, of the installed plugin entry
points and of the source files of the packages they name), so a second ``fedbench list``
starts in a fraction of a second, and an edited plugin is listed afresh. A listing that
left out a plugin that failed to load is not cached: the next one warns again.
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


def _plugin_sources(ep) -> list[Path]:
    """The source files of the top-level package (or module) entry point ``ep`` names, found
    without importing it (an editable install's too)."""
    import importlib.util

    spec = importlib.util.find_spec(ep.module.partition(".")[0])
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return sorted(f for d in spec.submodule_search_locations for f in Path(d).rglob("*.py"))
    return [Path(spec.origin)] if spec.origin else []


def _list_cache_path() -> Path | None:
    """Where the listing of this exact code is kept (start-up without importing torch):
    a hash of every source file's path, size and mtime; None when it cannot be computed."""
    import hashlib

    from fedbench import version

    if os.environ.get("FEDBENCH_NO_LIST_CACHE"):
        return None
    try:
        from fedbench.registry import plugin_entry_points

        h = hashlib.sha256(f"{version.__version__} {sys.version}".encode())
        for ep in plugin_entry_points():
            h.update(f"plugin {ep.group} {ep.name} {ep.value}\n".encode())
        plugin_files = sorted({f for ep in plugin_entry_points() for f in _plugin_sources(ep)})
        for f in _list_sources() + plugin_files:
            st = f.stat()
            h.update(f"{f} {st.st_size} {st.st_mtime_ns}\n".encode())
    except (OSError, ImportError, ValueError):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedbench"
    return base / f"list-{h.hexdigest()[:20]}.json"


def _list_entries() -> dict:
    """{registry: [[key, description, aliases, [[field, repr(default), help], ...]], ...]}; the
    run's own fields under "run" (one entry)."""
    path = _list_cache_path()
    if path is not None:
        try:
            return read_json(path, "list cache")  # bounded: a regular file of at most 8 MiB
        except UserError:  # missing or unreadable: built again below
            pass
    from fedbench.config import field_specs
    from fedbench.configs import RunConfig
    from fedbench.methods import METHODS
    from fedbench.tasks import TASKS

    def fields(cls):
        return [[f.name, repr(f.default), _describe(f)] for f in field_specs(cls)]

    entries = {name: [[e.key, e.description, list(e.aliases), fields(e.obj.config_cls)] for e in reg.entries()]
               for name, reg in (("methods", METHODS), ("tasks", TASKS))}
    entries["run"] = [["run", "fields of every run", [], fields(RunConfig)]]
    from fedbench.registry import plugin_entry_points

    listed = {row[0] for name in ("methods", "tasks") for row in entries[name]}
    # a plugin that failed to load is left out with a warning: not cached, so the next
    # listing warns again instead of leaving it out in silence
    if path is not None and all(ep.name in listed for ep in plugin_entry_points()):
        try:
            write_text(path, json.dumps(entries))  # the one safe writer
        except (OSError, OutputError):  # a cache: not writing it costs time only
            pass
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
