"""The one safe output writer (fedbench/outfiles.py): every command that writes goes through
it, so an output path that is a device, a FIFO, a socket, a symlink out of the output folder
or an over-long name is one line and exit 2, and nothing outside the output folder changes."""

from __future__ import annotations

import os
import stat

import pytest

from fedbench import outfiles, records
from fedbench.leaderboard.output import write_text
from fedbench.runners.cli.cli import main

CLAIM = """
paper: paper
title: Paper
blocks:
  - {table: T, task: t, method: a, columns: {iid: IID}, groups: [{roc: "-", figures: {a: [1.0], b: [2.0]}}]}
"""


@pytest.fixture
def claims_argv(tmp_path):
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "paper.yaml").write_text(CLAIM)
    (tmp_path / "records").mkdir()
    return ["claims", "paper", "--claims", str(tmp_path / "claims"), "--records", str(tmp_path / "records")]


def _one_line_exit_2(code, capsys):
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("fedbench: error: ") and err.count("\n") == 1, err
    return err


def test_claims_out_to_a_fifo_is_refused_and_the_fifo_stays(tmp_path, claims_argv, capsys):
    fifo = tmp_path / "out.md"
    os.mkfifo(fifo)
    err = _one_line_exit_2(main([*claims_argv, "--out", str(fifo)]), capsys)
    assert "FIFO" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_claims_out_through_a_symlink_out_of_its_folder_is_refused(tmp_path, claims_argv, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "claims.md"
    link.symlink_to(outside)
    err = _one_line_exit_2(main([*claims_argv, "--out", str(link)]), capsys)
    assert "symlink" in err and outside.read_text() == "mine" and link.is_symlink()


def test_claims_out_name_over_the_limit_is_one_line(tmp_path, claims_argv, capsys):
    err = _one_line_exit_2(main([*claims_argv, "--out", str(tmp_path / ("x" * 300 + ".md"))]), capsys)
    assert "too long" in err


def test_claims_out_writes_a_regular_file(tmp_path, claims_argv, capsys):
    out = tmp_path / "claims.md"
    assert main([*claims_argv, "--out", str(out)]) == 0
    assert out.read_text().startswith("# Paper claims")


def test_a_device_is_never_replaced(tmp_path):
    before = os.lstat("/dev/null")
    with pytest.raises(outfiles.OutputError, match="a device"):
        write_text(outfiles.Path("/dev/null"), "x")
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_a_socket_or_a_directory_is_refused(tmp_path):
    import socket

    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(outfiles.OutputError, match="socket"):
            outfiles.write_text(tmp_path / "sock", "x")
    finally:
        s.close()
    (tmp_path / "d").mkdir()
    with pytest.raises(outfiles.OutputError, match="directory"):
        outfiles.write_text(tmp_path / "d", "x")


def test_a_record_whose_folder_links_out_of_the_records_root_is_refused(tmp_path):
    root, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "tiny_text").symlink_to(elsewhere)
    with pytest.raises(outfiles.OutputError, match="leads out"):
        records.atomic_write_text(root / "tiny_text" / "fedavg" / "r.json", "{}", root)
    assert not list(elsewhere.iterdir())


def test_a_symlink_inside_the_folder_is_followed_and_the_write_is_atomic(tmp_path):
    (tmp_path / "real.md").write_text("old")
    (tmp_path / "link.md").symlink_to("real.md")
    outfiles.write_text(tmp_path / "link.md", "new")
    assert (tmp_path / "link.md").is_symlink() and (tmp_path / "real.md").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]  # no temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("old")

    def full(tmp, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outfiles, "_rename", full)
    with pytest.raises(OSError):
        outfiles.write_text(tmp_path / "a.md", "new")
    assert (tmp_path / "a.md").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.md"]


def test_a_path_outside_the_root_is_refused(tmp_path):
    with pytest.raises(outfiles.OutputError, match="not inside"):
        outfiles.write_text(tmp_path / "a" / ".." / ".." / "b.md", "x", tmp_path / "a")


def test_leaderboard_checks_every_table_before_writing_any(tmp_path, capsys):
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "leaderboard" / "records"
    for task in ("tiny_text", "tiny_vision"):
        shutil.copytree(committed / task, tmp_path / "records" / task)
    out = tmp_path / "board"
    out.mkdir()
    os.mkfifo(out / "tiny_vision.md")
    err = _one_line_exit_2(main(["leaderboard", "--records", str(tmp_path / "records"), "--out", str(out)]), capsys)
    assert "FIFO" in err and [p.name for p in out.iterdir()] == ["tiny_vision.md"]  # tiny_text.md not written either


@pytest.mark.parametrize("out", ["n" * 300, "/".join(["d" * 200] * 22), "ok/" + "m" * 300 + "/deeper"])
def test_a_records_folder_the_file_system_cannot_hold_is_one_line_before_training(tmp_path, out, capsys, monkeypatch):
    """A name over 255 bytes anywhere in ``--out``, or a path over 4095, is one line and exit 2
    (it was an OSError traceback from ``exists()``, exit 1), and nothing is created."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "file name too long" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(outfiles.OutputError, match="file name too long"):
        records.prepare_out_dir(tmp_path / out, create=False)
