"""The README's quick starts and the tutorials' console blocks, run as written.

Every ```` ```console ```` block marked ``<!-- quickstart: run by tests/test_quickstart.py ... -->``
is run command by command (``$ ...`` lines, in order, in one sandbox per page: a fresh
folder with the repository's ``docs``, ``benchmarks`` and ``leaderboard`` linked in and
``templates`` copied, ``../shared`` where the checkout has it), and every output line the
block shows must come out, in that order, after the timings (``s/round``) are masked. A
``...`` line stands for lines left out. So a documented output that changes fails here
instead of going stale.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smoke import shared_data

REPO = Path(__file__).resolve().parents[1]
MARK = "<!-- quickstart: run by tests/test_quickstart.py"
#: pages with marked blocks; the slow ones train several runs
PAGES = ["README.md", "docs/tutorial/run.md", "docs/tutorial/add-method.md", "docs/tutorial/reproduce.md",
         pytest.param("docs/tutorial/sweep.md", marks=pytest.mark.slow)]
#: figures that change from run to run: masked on both sides
_TIMING = [(re.compile(r"[\d.]+(e-?\d+)? s/round"), "# s/round"), (re.compile(r"s/round [\d.]+(e-?\d+)?"), "s/round #"),
           (re.compile(r"est\. [\d.]+ CPU-(s|min)"), "est. # CPU-s")]


def blocks(page: str) -> list[list[tuple[str, list[str]]]]:
    """The marked console blocks of ``page``: per block, each command with the lines it shows."""
    text = (REPO / page).read_text(encoding="utf-8")
    out = []
    for start in [m.end() for m in re.finditer(re.escape(MARK), text)]:
        body = re.search(r"```console\n(.*?)```", text[start:], re.S).group(1)
        cmds: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                cmds.append((line[2:], []))
            else:
                cmds[-1][1].append(line)
        out.append(cmds)
    return out


def normal(line: str) -> str:
    for pattern, mask in _TIMING:
        line = pattern.sub(mask, line)
    return line.rstrip()


def missing(shown: list[str], got: list[str]) -> str | None:
    """The first shown line that does not come out (in order), or None."""
    it = iter([normal(g) for g in got if g.strip()])
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        if not any(normal(line) == g for g in it):
            return line
    return None


def sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "work" / "repo"
    root.mkdir(parents=True)
    for name in ("docs", "benchmarks", "leaderboard"):
        (root / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "templates", root / "templates", ignore=shutil.ignore_patterns("*.egg-info", "build"))
    shared = shared_data("licenses").parents[1]
    if shared.is_dir():
        (tmp_path / "work" / "shared").symlink_to(shared)
    return root


def test_the_readme_is_a_front_page():
    """At most ~300 lines (issue 41); the measurement reports live in docs/guide/."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "Paper-claim evidence: " in text and " of 72 runnable claims run (`fedbench claims --all --records " \
        "leaderboard/records`)." in text


def test_every_marked_block_is_found():
    found = {p if isinstance(p, str) else p.values[0]: len(blocks(p if isinstance(p, str) else p.values[0]))
             for p in PAGES}
    assert all(found.values()), found
    assert "--profile cpu" in (REPO / "README.md").read_text(encoding="utf-8")  # the real-data quick start


@pytest.mark.parametrize("page", PAGES)
def test_the_commands_give_the_output_they_show(page, tmp_path):
    if page == "docs/tutorial/reproduce.md" and not shared_data("licenses").is_dir():
        pytest.skip("needs ../shared/data/licenses (the licenses preset names it)")
    root = sandbox(tmp_path)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    for block in blocks(page):
        for cmd, shown in block:
            p = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=1200)
            got = (p.stdout + p.stderr).splitlines()
            line = missing(shown, got)
            assert line is None, f"{page}: `{cmd}` did not print\n{line}\nit printed:\n" + "\n".join(got[-40:])
