"""The adversary harness (benchmarks/adversary.py) judges what it sees: a hang, a traceback,
a wrong exit status, more than one line, a FIFO or device replaced by a file, a file
written on a refusal; each is a defect, and only a clean refusal or a documented status
passes. Checked on hand-made outcomes (the harness's own run takes minutes)."""

import importlib.util
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("_bench_adversary", BENCH / "adversary.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


def test_verdicts(tmp_path):
    adv = _load()
    case = adv.Case("x", "new", ["run"])
    one = "fedbench: error: bad value\n"
    assert adv.verdict(tmp_path, case, 2, one, []) == "clean"
    assert adv.verdict(tmp_path, case, None, "", []).startswith("HANG")
    assert adv.verdict(tmp_path, case, 1, "Traceback (most recent call last):\n  boom\n", []) == "TRACEBACK"
    assert adv.verdict(tmp_path, case, 1, one, []) == "EXIT 1 (want 2)"
    assert adv.verdict(tmp_path, case, 2, one + "fedbench: error: again\n", []) == "LINES 2"
    assert adv.verdict(tmp_path, case, 2, one, ["outside/victim.md"]) == "CHANGED outside/victim.md"
    documented = adv.Case("y", "9", ["leaderboard"], expect=0, stderr="warning", doc="d")
    assert adv.verdict(tmp_path, documented, 0, "WARNING skipping a record\n", []) == "documented"
    assert adv.verdict(tmp_path, documented, 0, "", []).startswith("STDERR lacks")
    checked = adv.Case("z", "1", ["claims"], check=lambda root: "fifo is no longer a fifo")
    assert adv.verdict(tmp_path, checked, 2, one, []) == "fifo is no longer a fifo"


def test_snapshot_sees_a_fifo_replaced_and_never_opens_it(tmp_path):
    """A FIFO is only stat-ed (opening it would block); replaced by a file, it is a change;
    a change under a path the case may write is not."""
    adv = _load()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "out").mkdir()
    before = adv.snapshot(tmp_path)
    (tmp_path / "fifo").unlink()
    (tmp_path / "fifo").write_text("replaced")
    (tmp_path / "out" / "report.md").write_text("ok")
    after = adv.snapshot(tmp_path)
    assert adv.changed(before, after, ("out",)) == ["fifo"]
    assert adv.changed(before, after, ()) == ["fifo", "out/report.md"]
