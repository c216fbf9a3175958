"""The results pages of the documentation site, from the committed results: a page per task
(its leaderboard with its plots shown), per paper's claims, and per method (its paper and
equations, its config, its hand-check tests and its measured cost per resource tier).

``mkdocs build`` makes them (the hook ``docs/hooks/results.py`` calls :func:`site_pages` and
:func:`results_nav`), so the one command that builds the docs builds the results with them.
They are read from the committed files, which the tests keep equal to what the committed
records generate: ``leaderboard/<task>.md`` and its PNGs (``fedbench leaderboard`` / ``fedbench
plot``), ``leaderboard/claims.md`` (``fedbench claims --all``), and, for the cost per tier,
the records under ``leaderboard/records``. Page paths are under ``results/``.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import defaultdict
from pathlib import Path

from fedbench.leaderboard.families import family_of
from fedbench.leaderboard.generate import plot_links
from fedbench.leaderboard.plot_costs import tier_order
from fedbench.leaderboard.render import esc, fmt_cost, table
from fedbench.leaderboard.stats import mean
from fedbench.records import load_records
from fedbench.version import __version__

__all__ = ["PREFIX", "claims_sections", "results_nav", "site_pages"]

PREFIX = "results"


def _tasks(board: Path) -> list[str]:
    return sorted(p.stem for p in board.glob("*.md") if p.name != "claims.md" and (board / "records" / p.stem).is_dir())


def _task_page(board: Path, task: str) -> str:
    """The committed leaderboard, its plots shown under it (the links stay valid: the PNGs sit
    in ``results/<task>/`` beside the page, as in ``leaderboard/``)."""
    text = (board / f"{task}.md").read_text(encoding="utf-8")
    plots = plot_links(board, task)
    if plots:
        text += "\n## Plots\n\n" + "\n\n".join(f"![{esc(Path(p).stem)}]({p})" for p in plots) + "\n"
    return text


def claims_sections(text: str) -> tuple[str, dict[str, str]]:
    """(the report's preamble: title, rules and summary; {paper name: its section}) of the
    claims report's markdown (a section is a ``## `` heading and its lines, its first line
    after the heading names the paper as ``\\`name\\`: N claims``)."""
    parts = re.split(r"(?m)^(?=## )", text)
    sections = {}
    for part in parts[1:]:
        m = re.search(r"(?m)^`([^`]+)`: \d+ claims", part)
        if m:
            sections[m.group(1)] = part
    return parts[0], sections


def _claims_page(preamble: str, section: str) -> str:
    """One paper's section as a page, the report's rules and its summary over every paper under it."""
    rules = preamble.split("\n", 1)[1].strip()  # without the report's title
    return (section.replace("## ", "# ", 1).rstrip() + "\n\n## How the claims are tested (every paper)\n\n"
            + rules + "\n")


def method_tests(repo: Path) -> list[tuple[str, str, str, str]]:
    """(file, test, source, first docstring paragraph) of every test function under
    ``tests/methods``, each file read and parsed once."""
    out = []
    for path in sorted((repo / "tests" / "methods").glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
                out.append((path.name, node.name, "\n".join(lines[node.lineno - 1:node.end_lineno]), doc))
    return out


def _tests_of(tests: list[tuple[str, str, str, str]], key: str, cls: type) -> list[str]:
    """``tests/methods/<file>::<test>``: first docstring line, for the tests (:func:`method_tests`)
    of the method's module (``test_<module>.py``) and any test under ``tests/methods`` that
    names its key."""
    module_file = f"test_{cls.__module__.rsplit('.', 1)[-1]}.py"
    return [f"`tests/methods/{file}::{name}`" + (f": {esc(doc)}" if doc else "")
            for file, name, source, doc in tests if file == module_file or f'"{key}"' in source]


def _tier_costs(records: list[dict], key: str) -> list[str]:
    """Markdown table of the method's measured cost per tier, per task and resource label:
    means over its ok committed records (a tier that never trained has no row)."""
    cells: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] != "ok" or r["run"]["method"] != key:
            continue
        cost = r["cost"]
        for tier, v in cost["tflops_per_step"]["by_tier"].items():
            at = (r["run"]["task"], r["run"].get("resource_label") or "-", tier)
            cells[at]["tflops"].append(v["mean"])
            cells[at]["mem"].append(cost["peak_mem_gb"]["by_tier"].get(tier, {}).get("mean"))
            cells[at]["traffic"].append(cost["traffic_mb_per_client_round"]["by_tier"].get(tier, {}).get("total"))
    rows = []
    for (task, label, tier) in sorted(cells, key=lambda k: (k[0], k[1], tier_order(k[2]))):
        c = cells[(task, label, tier)]

        def m(vals):
            vals = [v for v in vals if v is not None]
            return mean(vals) if vals else None

        rows.append([f"[{esc(task)}](../{task}.md)", esc(label), esc(tier), fmt_cost(m(c["tflops"]), "tflops"),
                     fmt_cost(m(c["mem"]), "gb"), fmt_cost(m(c["traffic"]), "mb"), str(len(c["tflops"]))])
    if not rows:
        return ["No committed record of this method."]
    return table(["Task", "RoC", "Tier", "TFLOPs/step", "Mem", "Traffic/round", "Client measurements"], 3, rows)


def _method_page(all_tests: list[tuple[str, str, str, str]], key: str, entry, records: list[dict]) -> str:
    from fedbench.config import field_specs

    cls = entry.obj
    module_doc = inspect.getdoc(inspect.getmodule(cls)) or ""
    lines = [f"# {esc(key)}", "", esc(entry.description or ""), "",
             f"Class `{cls.__module__}.{cls.__qualname__}` (family: {esc(family_of(key))}; rule version "
             f"{cls.version}, recorded in every record as `run.method_version`; evaluation: {cls.evaluation}).", "",
             "## Paper and equations", "", "From the module's docstring:", "", "```text", module_doc, "```"]
    class_doc = inspect.getdoc(cls)
    if class_doc and class_doc not in module_doc:
        lines += ["", "The class:", "", "```text", class_doc, "```"]
    fields = [[f"`{s.name}`", f"`{s.default!r}`", esc(s.role), esc(s.help)] for s in field_specs(cls.config_cls)]
    lines += ["", "## Config", ""] + table(["Field", "Default", "Role", "What it is"], 4, fields)
    tests = _tests_of(all_tests, key, cls)
    lines += ["", "## Hand-check tests", "",
              "Every registered method also passes the conformance and learning checks (`tests/test_conformance.py`, "
              "`tests/test_learning.py`)." + (" Its own tests:" if tests else "")]
    lines += [""] + [f"- {t}" for t in tests] if tests else []
    lines += ["", "## Measured cost per resource tier", "",
              "Means over the method's committed records (`leaderboard/records`), per task and resource label: "
              "TFLOPs of one client step, its peak memory (as each record measured it) and its traffic down + up "
              "per round.", ""] + _tier_costs(records, key)
    return "\n".join(lines) + "\n"


def _index(board: Path, tasks: list[str], papers: list[str], methods: list[str], records: list[dict]) -> str:
    counts = {t: sum(r["run"]["task"] == t for r in records) for t in tasks}
    versions = sorted({r["run"]["fedbench_version"] for r in records})
    lines = ["# Results", "",
             f"The committed results of fedbench {__version__}: {len(records)} result records "
             f"(written by fedbench {', '.join(versions)}) under `leaderboard/records`, the tables, plots and "
             "claims report generated from them, and a page per method. Regenerate them with "
             "`fedbench leaderboard --records leaderboard/records --out leaderboard`, `fedbench plot --records "
             "leaderboard/records --out leaderboard` and `fedbench claims --all --records leaderboard/records --out "
             "leaderboard/claims.md`; `mkdocs build` builds these pages from them. To cite a result, cite the "
             "version that made it (`CITATION.cff`, `fedbench --version`).", "", "## Tasks", ""]
    lines += table(["Task", "Records"], 1, [[f"[{esc(t)}]({t}.md)", str(counts[t])] for t in tasks])
    lines += ["", "## Paper claims", ""] + [f"- [{esc(p)}](claims/{p}.md)" for p in papers]
    lines += ["", "## Methods", "", "[Every method](methods/index.md): " + ", ".join(
        f"[{esc(m)}](methods/{m}.md)" for m in methods) + "."]
    return "\n".join(lines) + "\n"


def site_pages(repo: str | Path) -> tuple[dict[str, str], dict[str, Path]]:
    """({page path: markdown}, {asset path: file}) of the results pages, paths relative to
    the docs folder, from the committed results under ``<repo>/leaderboard``."""
    from fedbench.methods import METHODS

    repo = Path(repo)
    board = repo / "leaderboard"
    records = load_records(board / "records") if (board / "records").is_dir() else []  # a copy without records
    tasks = _tasks(board)
    pages = {f"{PREFIX}/{t}.md": _task_page(board, t) for t in tasks}
    assets = {f"{PREFIX}/{p}": board / p for t in tasks for p in plot_links(board, t)}
    preamble, sections = claims_sections((board / "claims.md").read_text(encoding="utf-8"))
    for paper, section in sections.items():
        pages[f"{PREFIX}/claims/{paper}.md"] = _claims_page(preamble, section)
        for link in re.findall(r"\]\(([\w./-]+\.png)\)", section):  # the paper's figure (plot_claims)
            assets[f"{PREFIX}/claims/{link}"] = board / link
    methods, tests = sorted(METHODS.keys()), method_tests(repo)
    for key in methods:
        pages[f"{PREFIX}/methods/{key}.md"] = _method_page(tests, key, METHODS.entry(key), records)
    pages[f"{PREFIX}/methods/index.md"] = "# Methods\n\n" + "\n".join(table(
        ["Method", "Family", "What it does"], 3,
        [[f"[{esc(k)}]({k}.md)", esc(family_of(k)), esc(METHODS.entry(k).description or "")] for k in methods])) + "\n"
    pages[f"{PREFIX}/index.md"] = _index(board, tasks, list(sections), methods, records)
    return pages, assets


def results_nav(pages: dict[str, str]) -> list:
    """The site's "Results" navigation for ``pages`` (:func:`site_pages`)."""
    def under(folder: str) -> list:
        return [{Path(p).stem: p} for p in sorted(pages) if Path(p).parent.as_posix() == folder
                and Path(p).stem != "index"]

    return [{"Overview": f"{PREFIX}/index.md"}, {"Tasks": under(PREFIX)}, {"Paper claims": under(f"{PREFIX}/claims")},
            {"Methods": [{"Every method": f"{PREFIX}/methods/index.md"}] + under(f"{PREFIX}/methods")}]
