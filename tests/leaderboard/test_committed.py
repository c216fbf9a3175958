"""The committed leaderboards are exactly what the committed records generate.

Every table under ``leaderboard/`` must come from ``leaderboard/records`` by the documented
command (``fedbench leaderboard --records leaderboard/records --out leaderboard``): a record
committed without regenerating the tables, or a table edited by hand, fails here. Plot
links depend on the PNGs present, so the committed plot folders are linked into the
temporary output first.
"""

import json
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


#: commit 036bd67 (runners/cost/meters.py EXTRA_FLOP_FORMULAS): torch 2.14's FlopCounterMode counts no
#: FLOPs for the CPU attention kernel ``aten._scaled_dot_product_flash_attention_for_cpu``; records made
#: before it under torch 2.14 undercount the attention of models whose batches take that kernel
ATTENTION_FIX = "2026-11-29T01:13:57+00:00"
#: tasks whose committed models take the CPU flash kernel: tiny_text's BERT (unpadded batches) and the
#: ViTs of tiny_vision and domainnet (vit_tiny_test: 3.47e8 FLOPs per forward and backward of 4 images
#: without the kernel's, 4.84e8 with). ledgar's padded batches take the math path (its records' TFLOPs
#: agree under torch 2.14 and 2.15: exclusive 0.022177, straggler 0.022101); fashion_mnist's CNNs have
#: no attention
FLASH_TASKS = ("tiny_text", "tiny_vision", "domainnet")


@pytest.mark.skipif(not RECORDS.is_dir(), reason="no committed records (not a source checkout)")
def test_committed_records_count_the_attention_flops():
    stale = []
    for path in sorted(RECORDS.rglob("*.json")):
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or rec.get("run", {}).get("task") not in FLASH_TASKS:
            continue
        if rec["env"]["torch"].startswith("2.14") and rec["run"]["created_at"] < ATTENTION_FIX:
            stale.append(str(path.relative_to(RECORDS)))
    assert not stale, f"{len(stale)} records undercount attention FLOPs (re-run them): {stale[:5]}"
