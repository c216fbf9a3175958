"""A citable release: one version in the package, its metadata, ``CITATION.cff``, the
changelog's release section (with the results it ships) and ``fedbench --version``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import fedbench
from fedbench.runners.cli.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_one_version_everywhere():
    version = fedbench.__version__
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8").split("[project]")[1]
    assert re.search(r'^version = "([^"]+)"$', project, re.M).group(1) == version
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["version"] == version
    assert cff["title"] and cff["authors"] and cff["license"] == "Apache-2.0" and cff["type"] == "software"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    m = re.search(rf"^## \[{re.escape(version)}\] - (\d{{4}}-\d{{2}}-\d{{2}})$", changelog, re.M)
    assert m and m.group(1) == str(cff["date-released"]), "the release's section and CITATION.cff's date agree"
    release = changelog[m.end():].split("\n## ")[0]
    assert "### Results" in release and "leaderboard/claims.md" in release  # the results it ships
    assert "CITATION.cff" in (REPO / "README.md").read_text(encoding="utf-8")


def test_fedbench_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"fedbench {fedbench.__version__}\n"


@pytest.mark.skipif(not (REPO / "leaderboard" / "claims.md").is_file(), reason="no committed results")
def test_committed_results_name_the_version_that_made_them():
    for path in [*sorted((REPO / "leaderboard").glob("*.md"))]:
        head = path.read_text(encoding="utf-8").split("\n\n")[1]
        assert f"(fedbench {fedbench.__version__}) from" in head, path.name
        assert "written by fedbench " in head, path.name
