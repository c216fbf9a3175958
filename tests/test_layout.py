"""The package mapping is declared statically in pyproject.toml and covers every folder."""

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_mapped():
    conf = _setuptools()
    roots, listed = conf["package-dir"], set(conf["packages"])
    found = set()
    for name, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed, f"folders not listed: {sorted(found - listed)}; listed, not folders: {sorted(listed - found)}"


def test_no_computed_package_list():
    assert not (ROOT / "setup.py").exists(), "the package mapping lives in pyproject.toml"


def _module_files() -> dict[str, Path]:
    """Import name -> file of every module of the packages pyproject.toml declares."""
    roots = _setuptools()["package-dir"]
    out = {}
    for name, folder in roots.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((name, *parts))] = path
    return out


def test_no_import_cycle_among_module_level_imports():
    """The modules' top-level imports (those run at import time; imports inside functions
    are deferred on purpose) form no cycle: each package can be read bottom-up."""
    import ast

    files = _module_files()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            deps |= {t for t in targets if t in files and t != name}
        graph[name] = deps
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                cycle = trail[trail.index(d):] + [d] if d in trail else [n, d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d, trail + [d])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])


def test_no_file_over_400_lines():
    too_long = {str(p.relative_to(ROOT)): n for p in _module_files().values()
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not too_long, f"split these files (at most 400 lines): {too_long}"
