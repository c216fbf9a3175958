"""The committed leaderboards are exactly what the committed records generate.

Every table under ``leaderboard/`` must come from ``leaderboard/records`` by the documented
command (``fedbench leaderboard --records leaderboard/records --out leaderboard``): a record
committed without regenerating the tables, or a table edited by hand, fails here. Plot
links depend on the PNGs present, so the committed plot folders are linked into the
temporary output first.
"""

from pathlib import Path

import pytest

from fedbench.leaderboard.generate import generate

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
RECORDS = ROOT / "records"


@pytest.mark.skipif(not RECORDS.is_dir(), reason="no committed records (not a source checkout)")
def test_committed_tables_regenerate_from_committed_records(tmp_path):
    for folder in ROOT.iterdir():
        if folder.is_dir() and any(folder.glob("*.png")):
            (tmp_path / folder.name).symlink_to(folder, target_is_directory=True)
    written = generate(RECORDS, tmp_path)
    assert written, "no tables generated from leaderboard/records"
    for path in written:
        committed = ROOT / path.name
        assert committed.is_file(), f"records of task {path.stem} but no committed {committed.name}; run the command"
        assert path.read_text() == committed.read_text(), (
            f"leaderboard/{path.name} is not what leaderboard/records generate; run "
            "`fedbench leaderboard --records leaderboard/records --out leaderboard`")
