"""The README's quick starts and the tutorials' console blocks, run as written.

Every ```` ```console ```` block marked ``<!-- quickstart: run by tests/test_quickstart.py ... -->``
is run command by command (``$ ...`` lines, in order, in one sandbox per page: a fresh
folder with the repository's ``docs``, ``benchmarks`` and ``leaderboard`` linked in and
``templates`` copied, ``../shared`` where the checkout has it), and every output line the
block shows must come out, in that order, after the timings (``s/round``) are masked. A
``...`` line stands for lines left out. So a documented output that changes fails here
instead of going stale.

A block whose mark says ``saved first: methods/server_step.py tasks/noisy_blobs.py`` runs
after the tutorials' code blocks the pages say to save under those names ("Saved as
`methods/server_step.py`", their ``--8<--`` includes resolved as the docs site does) are
put where fedbench finds them without an edit of the checkout: a plugin package of the
sandbox whose entry points name the modules (``server_step = "tutorial_saved.server_step"``),
installed with pip into a folder on ``PYTHONPATH``. So the code the pages show is the code
that runs, and a change of it or of its shown output fails here.
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
PAGES = ["README.md", "docs/tutorial/run.md", "docs/tutorial/add-method.md", "docs/tutorial/add-task.md",
         "docs/tutorial/reproduce.md",
         pytest.param("docs/tutorial/sweep.md", marks=pytest.mark.slow)]
#: figures that change from run to run: masked on both sides
_TIMING = [(re.compile(r"[\d.]+(e-?\d+)? s/round"), "# s/round"), (re.compile(r"s/round [\d.]+(e-?\d+)?"), "s/round #"),
           (re.compile(r"est\. [\d.]+ CPU-(s|min)"), "est. # CPU-s")]


#: a tutorial's code block that its page says to save: ```python ...``` then "Saved as `methods/x.py`"
_SAVED = re.compile(r"```python\n((?:(?!```).)*)```\s+Saved as `((?:methods|tasks)/\w+\.py)`", re.S)
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"\n', re.M)
_GROUP = {"methods": "fedbench.methods", "tasks": "fedbench.tasks"}


def blocks(page: str) -> list[tuple[list[str], list[tuple[str, list[str]]]]]:
    """The marked console blocks of ``page``: per block, the files it needs saved first and
    each command with the lines it shows."""
    text = (REPO / page).read_text(encoding="utf-8")
    out = []
    for m in re.finditer(re.escape(MARK) + r"(.*?)-->", text, re.S):
        saved = re.search(r"saved first: ([^;]*)", m.group(1))
        body = re.search(r"```console\n(.*?)```", text[m.end():], re.S).group(1)
        cmds: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                cmds.append((line[2:], []))
            else:
                cmds[-1][1].append(line)
        out.append((saved.group(1).split() if saved else [], cmds))
    return out


def saved_code() -> dict[str, str]:
    """Every code block of the tutorial pages that its page says to save, by the path it
    names (``methods/server_step.py``), with its ``--8<--`` includes resolved."""
    out = {}
    for page in sorted((REPO / "docs" / "tutorial").glob("*.md")):
        for code, path in _SAVED.findall(page.read_text(encoding="utf-8")):
            out[path] = _SNIPPET.sub(lambda m: (REPO / m.group(1)).read_text(encoding="utf-8"), code)
    return out


def install_saved(root: Path, paths: list[str], n: int) -> Path:
    """``paths`` (``methods/x.py``, ``tasks/y.py``) as the modules of a plugin package whose
    entry points name them (a module's import registers its key), installed by pip into a
    folder of the sandbox; that folder (for ``PYTHONPATH``)."""
    code = saved_code()
    src = root / f"saved-src-{n}"
    (src / "tutorial_saved").mkdir(parents=True)
    (src / "tutorial_saved" / "__init__.py").write_text("", encoding="utf-8")
    groups: dict[str, list[str]] = {}
    for path in paths:
        assert path in code, f"no tutorial code block is followed by 'Saved as `{path}`' (found: {sorted(code)})"
        folder, name = path.split("/")[0], Path(path).stem
        (src / "tutorial_saved" / f"{name}.py").write_text(code[path], encoding="utf-8")
        groups.setdefault(_GROUP[folder], []).append(f'{name} = "tutorial_saved.{name}"')
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tutorial-saved"\nversion = "0"\n[tool.setuptools]\npackages = ["tutorial_saved"]\n'
        + "".join(f'[project.entry-points."{g}"]\n' + "\n".join(eps) + "\n" for g, eps in groups.items()),
        encoding="utf-8")
    site = root / f"saved-site-{n}"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return site


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
    assert "Paper-claim evidence: " in text and "(`fedbench claims --all --records\nleaderboard/records`" in text


@pytest.mark.skipif(not (REPO / "leaderboard" / "claims.md").is_file(), reason="no committed claims report")
def test_the_readmes_evidence_figure_is_the_committed_reports():
    """Claims run of runnable (tested, of tested + not run) and those at 5 seeds, as the
    committed leaderboard/claims.md counts them; a landing that moves them updates the README."""
    from fedbench.leaderboard.claims_cost import MIN_SEEDS
    from fedbench.leaderboard.claims_verdict import NOT_RUN, NOT_TESTABLE, VERDICTS

    report = (REPO / "leaderboard" / "claims.md").read_text(encoding="utf-8")
    runnable = "|".join(re.escape(v) for v in VERDICTS if v != NOT_TESTABLE)
    n = {v: int(k) for k, v in re.findall(rf"(\d+) ({runnable})[,.]", report.split("\n## ")[0])}
    tested = sum(n.values()) - n[NOT_RUN]
    (full,) = re.findall(rf"^Seeds: (\d+) of (?:\d+) tested claims at {MIN_SEEDS} or more", report, re.M)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert (f"Paper-claim evidence: {tested} of {tested + n[NOT_RUN]} runnable claims run, {full} of them at "
            f"{MIN_SEEDS} seeds") in readme


def test_every_marked_block_is_found():
    found = {p if isinstance(p, str) else p.values[0]: len(blocks(p if isinstance(p, str) else p.values[0]))
             for p in PAGES}
    assert all(found.values()), found
    assert "--profile cpu" in (REPO / "README.md").read_text(encoding="utf-8")  # the real-data quick start


def test_every_file_the_tutorials_save_is_run():
    """The method and the task the tutorials say to save are found (their pages' code blocks)
    and a marked block runs each of them."""
    code = saved_code()
    assert {"methods/server_step.py", "tasks/noisy_blobs.py"} <= set(code)
    assert "class ServerStep(Method)" in code["methods/server_step.py"]  # the include is resolved
    run = {path for p in PAGES for saved, _ in blocks(p if isinstance(p, str) else p.values[0]) for path in saved}
    assert run == set(code)


@pytest.mark.parametrize("page", PAGES)
def test_the_commands_give_the_output_they_show(page, tmp_path):
    if page == "docs/tutorial/reproduce.md" and not shared_data("licenses").is_dir():
        pytest.skip("needs ../shared/data/licenses (the licenses preset names it)")
    root = sandbox(tmp_path)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    for n, (saved, block) in enumerate(blocks(page)):
        block_env = {**env, "PYTHONPATH": str(install_saved(root, saved, n))} if saved else env
        for cmd, shown in block:
            p = subprocess.run(["bash", "-c", cmd], cwd=root, env=block_env, capture_output=True, text=True,
                               timeout=1200)
            got = (p.stdout + p.stderr).splitlines()
            line = missing(shown, got)
            assert line is None, f"{page}: `{cmd}` did not print\n{line}\nit printed:\n" + "\n".join(got[-40:])
