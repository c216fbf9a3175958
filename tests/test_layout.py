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
