"""The leaderboard commands under hostile input: a pathological record is skipped with one
warning line and the command goes on; a bad ``--out`` is one error line and exit 2; a
name cannot break a table; a method compared with itself is said to be."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fedbench.leaderboard.compare import compare
from fedbench.leaderboard.generate import render_task
from fedbench.runners.cli.cli import main

from .test_generate import make, table_rows
from .test_groups import with_config

RECORDS = Path(__file__).parent / "fixtures" / "records"


def _good_copy(tmp_path: Path) -> Path:
    root = tmp_path / "records"
    shutil.copytree(RECORDS / "tiny_text", root / "tiny_text")
    return root


def _valid_text() -> str:
    return (RECORDS / "tiny_text" / "fedra" / "tiny_text-fedra-iid-s0.json").read_text()


def _big_final(root: Path) -> None:
    rec = json.loads(_valid_text())
    rec["run"]["run_id"] = "huge"
    (root / "huge.json").write_text(json.dumps(rec).replace('"final": 0.825', '"final": ' + "9" * 400))


def _touch(path: Path) -> Path:
    path.touch()
    return path


def _forged_key(root: Path) -> None:
    """A wrong type under a key whose newline would forge a second log line."""
    rec = json.loads(_valid_text())
    rec["cost"]["tflops_per_step"]["by_tier"]["0\nWARNING forged"] = 5
    (root / "wrong_type_key.json").write_text(json.dumps(rec))


# name -> how to put the pathological thing at <root>/<name>, the reason the warning gives
PATHOLOGICAL = {
    "bad.json": (lambda root: (root / "bad.json").write_text('{"schema_version": 1,'), "not valid JSON"),
    "latin1.json": (lambda root: (root / "latin1.json").write_bytes(_valid_text().replace(
        '"fedra"', '"fédra"').encode("latin-1")), "not UTF-8"),
    "deep.json": (lambda root: (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    "deep_in_config.json": (lambda root: (root / "deep_in_config.json").write_text(_valid_text().replace(
        '"method_config": {}', '"method_config": {"x": ' + "[" * 500 + "]" * 500 + "}")),
        "nested more than 64 levels"),
    "long_int.json": (lambda root: (root / "long_int.json").write_text('{"schema_version": ' + "9" * 5000 + "}"),
                      "integer string conversion"),
    "huge.json": (_big_final, "number out of range"),
    "folder.json": (lambda root: (root / "folder.json").mkdir(), "not a regular file (a directory)"),
    "fifo.json": (lambda root: os.mkfifo(root / "fifo.json"), "not a regular file (a fifo)"),
    "zero.json": (lambda root: os.symlink("/dev/zero", root / "zero.json"), "not a regular file (a special file)"),
    "sparse.json": (lambda root: os.truncate(_touch(root / "sparse.json"), 300 * 2**20), "larger than any record"),
    "loop.json": (lambda root: (os.symlink("loop2.json", root / "loop.json"),
                                os.symlink("loop.json", root / "loop2.json")), "cannot be read"),
    "wrong_type.json": (lambda root: (root / "wrong_type.json").write_text(_valid_text().replace(
        '"seed": 0', '"seed": "zero"')), "run.run_config.seed: expected int"),
    "wrong_type_key.json": (_forged_key, "by_tier.0\\nWARNING forged: expected dict, got int"),
    "surrogate.json": (lambda root: (root / "surrogate.json").write_text(_valid_text().replace(
        '"method": "fedra"', '"method": "fedra\\ud800"')), "not Unicode text"),
    "new\nline.json": (lambda root: (root / "new\nline.json").write_text("{"), "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
@pytest.mark.parametrize("cmd", ["leaderboard", "export", "compare"])
def test_a_pathological_record_is_skipped_with_one_warning_line(tmp_path, caplog, capsys, name, cmd):
    root = _good_copy(tmp_path)
    make_it, reason = PATHOLOGICAL[name]
    make_it(root)
    out = tmp_path / "out"
    argv = {"leaderboard": ["leaderboard", "--records", str(root), "--out", str(out)],
            "export": ["export", "--records", str(root), "--out", str(out)],
            "compare": ["compare", "fed_hello", "--against", "fedra", "--task", "tiny_text",
                        "--records", str(root)]}[cmd]
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    mine = [w for w in warnings if name.split("\n")[0] in w]
    assert len(mine) == 1 and "\n" not in mine[0] and reason in mine[0], warnings
    if name == "loop.json":  # both links of the loop are reported, each once
        assert sum("loop2.json" in w for w in warnings) == 1
    if cmd == "leaderboard":
        assert table_rows((out / "tiny_text.md").read_text())[("fedra", "6:3:1")]["iid"] == "**82.50**"
    elif cmd == "export":
        assert (out / "tiny_text.cell.json").is_file()
    else:
        assert capsys.readouterr().out.startswith("# fed_hello against fedra on tiny_text")


def test_plot_goes_on_past_a_pathological_record(tmp_path, caplog):
    pytest.importorskip("matplotlib")
    root = _good_copy(tmp_path)
    PATHOLOGICAL["deep.json"][0](root)
    with caplog.at_level(logging.WARNING):
        assert main(["plot", "--records", str(root), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "tiny_text" / "iid_pareto.png").is_file()
    assert any("deep.json" in r.getMessage() for r in caplog.records)


def test_values_the_schema_allows_do_not_break_a_table():
    """Negative memory and a tier id that is not a number are schema-valid: shown, not fatal."""
    rec = make("fedra", final=0.5)
    rec["cost"]["peak_mem_gb"]["mean"] = -0.4935
    rec["cost"]["tflops_per_step"]["by_tier"] = {"abc": {"mean": 1.0, "forward": 0.5, "backward": 0.5}}
    costs = table_rows(render_task("t", [rec]).split("## Costs")[1])
    assert costs[("fedra", "6:3:1")]["Mem"] == "-493.5 MB"


def test_tiers_plot_with_a_tier_id_that_is_not_a_number():
    pytest.importorskip("matplotlib")
    from fedbench.leaderboard.plot_costs import tiers
    from fedbench.leaderboard.plots import pyplot
    from fedbench.leaderboard.sections import ok_sections

    a, b = make("fedra", final=0.5), make("fedavg", final=0.6)
    a["cost"]["tflops_per_step"]["by_tier"] = {"10": {"mean": 2.0, "forward": 1, "backward": 1},
                                               "abc": {"mean": 1.0, "forward": 0.5, "backward": 0.5}}
    b["cost"]["tflops_per_step"]["by_tier"] = {"9": {"mean": 3.0, "forward": 1, "backward": 2}}
    plt = pyplot()
    fig = tiers(plt, ok_sections("t", [a, b])[2][0], "iid", "t / iid")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["tier 9 (weakest)", "tier 10", "tier abc (strongest)"]
    plt.close(fig)


# --------------------------------------------------------------------------- --out


@pytest.mark.parametrize("cmd", ["leaderboard", "export", "plot"])
def test_out_on_a_file_is_one_line_and_exit_2(tmp_path, capsys, cmd):
    if cmd == "plot":
        pytest.importorskip("matplotlib")
    (tmp_path / "taken").write_text("a file")
    assert main([cmd, "--records", str(RECORDS), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench: error: output directory") and "not a directory" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("cmd", ["leaderboard", "export"])
def test_out_read_only_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, cmd):
    """A folder where nothing can be created (read-only; simulated, since root may write anywhere)."""
    out = tmp_path / "ro"
    out.mkdir()

    def refuse(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).resolve() == out.resolve():
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert main([cmd, "--records", str(RECORDS), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"fedbench: error: output directory {out} is not writable: Permission denied\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_really_read_only(tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["leaderboard", "--records", str(RECORDS), "--out", str(out)]) == 2
    finally:
        out.chmod(0o755)
    assert "not writable" in capsys.readouterr().err


def test_table_name_taken_by_a_folder_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "tiny_text.md").mkdir()
    assert main(["leaderboard", "--records", str(RECORDS), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedbench: error: cannot write {tmp_path / 'tiny_text.md'}: ") and err.count("\n") == 1


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("bad,shown", [("a\nb", "a\\nb"), ("a|b", "a\\|b"), ("a\r\nb|c\\", "a\\r\\nb\\|c\\\\")])
def test_a_name_cannot_break_the_markdown(bad, shown):
    recs = [make(bad, setting=f"iid{bad}", final=0.5), make("fedra", setting=f"iid{bad}", final=0.4)]
    recs[0]["results"]["metric_name"] = recs[1]["results"]["metric_name"] = f"top1{bad}"
    recs[0]["run"]["resource_label"] = recs[1]["run"]["resource_label"] = f"6:3:1{bad}"
    text = render_task("t", recs)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| Method |"))
    for line in lines[header:header + 4]:
        assert line.startswith("| ") and line.endswith(" |")
        assert len([c for c in line.replace("\\|", "").split("|")]) == 5  # 3 cells (+ 2 empty ends)
    assert f"**RoC 6:3:1{shown}** (2 rows" in text  # the group's caption
    assert f"| {shown} | 6:3:1{shown} |" in text  # method and RoC cells of the cost table
    assert all(not line.startswith(("b", "|c")) for line in lines)  # nothing spilled onto a line of its own


# --------------------------------------------------------------------------- compare


def test_compare_a_method_with_itself_says_so(capsys):
    recs = [make("fedra", seed=s, final=f) for s, f in enumerate((0.5, 0.6, 0.7))]
    with pytest.raises(Exception, match="fedra is compared with itself"):
        compare("t", recs, ["fedra"], ["fedra"])
    assert main(["compare", "fedra", "--against", "fedra", "--task", "tiny_text", "--records", str(RECORDS)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench: error: fedra is compared with itself") and err.count("\n") == 1


def test_compare_a_method_with_itself_compares_its_variants():
    recs = [with_config(make("fedavg", seed=s, final=f), lr=0.01) for s, f in enumerate((0.5, 0.6, 0.7))]
    recs += [with_config(make("fedavg", seed=s, final=f), lr=0.1) for s, f in enumerate((0.4, 0.45, 0.5))]
    found = compare("t", recs, ["fedavg"], ["fedavg"])
    assert [(c.row_a, c.row_b) for c in found] == [("fedavg (lr=0.01)", "fedavg (lr=0.1)"),
                                                   ("fedavg (lr=0.1)", "fedavg (lr=0.01)")]
