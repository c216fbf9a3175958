"""MkDocs hook: let mkdocstrings read the code under its import names, without moving it.

The import names live under ``fedbench.*`` while the code sits in top-level folders
(``methods/`` is ``fedbench.methods``, ...: ``[tool.setuptools] package-dir`` of ``pyproject.toml``). griffe,
mkdocstrings' Python reader, finds a module by walking folders from a search path, so it
would look for ``fedbench.methods`` in ``fedbench/methods/``. This hook builds, once per
process, a temporary folder in the import layout made of symbolic links (``fedbench/``
holding links to every file of ``fedbench/`` plus ``methods -> <repo>/methods``, ...) and
puts it first in the Python handler's ``paths``. The code is read statically (nothing is
imported), so the reference shows the source as it is.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

_LAYOUT: Path | None = None  # the folder of this process (``mkdocs serve`` rebuilds reuse it)


def package_roots(pyproject: Path) -> dict[str, str]:
    """``[tool.setuptools] package-dir`` of ``pyproject.toml`` (import name -> folder)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    roots = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    if not roots:
        raise RuntimeError(f"{pyproject} declares no package-dir mapping")
    return roots


def build_layout(repo: Path, roots: dict[str, str], into: Path) -> None:
    """Links under ``into`` so that ``into/<a>/<b>`` is the folder of import name ``a.b``."""
    for name, folder in sorted(roots.items(), key=lambda kv: kv[0].count(".")):
        target = into.joinpath(*name.split("."))
        if "." not in name:  # a top-level package: a real folder (its subpackages go inside)
            target.mkdir(parents=True)
            for item in (repo / folder).iterdir():
                if item.name != "__pycache__":
                    (target / item.name).symlink_to(item.resolve())
        else:
            target.symlink_to((repo / folder).resolve(), target_is_directory=True)


@event_priority(100)  # before mkdocstrings reads its handlers' options
def on_config(config):
    global _LAYOUT
    repo = Path(config.config_file_path).resolve().parent
    if _LAYOUT is None:
        _LAYOUT = Path(tempfile.mkdtemp(prefix="fedbench-docs-"))
        atexit.register(shutil.rmtree, _LAYOUT, ignore_errors=True)
        build_layout(repo, package_roots(repo / "pyproject.toml"), _LAYOUT)
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    paths = python.setdefault("paths", [])
    if str(_LAYOUT) not in paths:
        paths.insert(0, str(_LAYOUT))
    return config
