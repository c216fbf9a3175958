"""The ok records of one task as leaderboard sections (one per metric): the single entry
point that the tables, plots, export and ``fedbench compare`` share."""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict

from fedbench.leaderboard.groups import Section, build_section, setting_sort_key
from fedbench.leaderboard.render import Fmt
from fedbench.records import one_line, validate_record

__all__ = ["SAFE_TASK", "by_file_task", "ok_sections", "setting_sort_key"]

log = logging.getLogger(__name__)

#: Task names usable as a file name (``<out>/<task>.md``, ``<out>/<task>/``); records of
#: other tasks are skipped with a warning by the commands that write files.
SAFE_TASK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def by_file_task(records: list[dict]) -> dict[str, list[dict]]:
    """{task: its records} for the commands that write a file per task, sorted by task; tasks
    whose name is not usable as a file name are left out with a warning."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["run"]["task"]].append(r)
    for task in sorted(out):
        if not SAFE_TASK.fullmatch(task):
            log.warning("skipping task %s: not usable as a file name", one_line(repr(task)))
            del out[task]
    return {t: out[t] for t in sorted(out)}


def ok_sections(task: str, records: list[dict]) -> tuple[list[dict], Counter, list[Section]]:
    """(records of ``task``, skipped-status counter, [Section per metric, sorted]). Records
    must be valid; records of other tasks are ignored."""
    recs = [r for r in records if r["run"]["task"] == task]
    for r in recs:
        validate_record(r)
    ok = [r for r in recs if r["status"] == "ok"]
    skipped = Counter(r["status"] for r in recs if r["status"] != "ok")
    metrics = sorted({r["results"]["metric_name"] for r in ok})
    sections = [build_section(task, m, [r for r in ok if r["results"]["metric_name"] == m], Fmt(m).scale)
                for m in metrics]
    return recs, skipped, sections
