"""The claims report's figure (leaderboard/plot_claims.py): which claims it draws, and that
``fedbench claims --out`` draws it beside the report and links it."""

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from fedbench.leaderboard.plot_claims import GapRow, gap_rows
from fedbench.runners.cli.cli import main

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"


def outcome(b, diff, paper, verdict, not_testable=None, measured=True):
    claim = NS(a="a", b=b, group="RoC 6:3:1", setting="iid", paper_diff=paper, not_testable=not_testable)
    return NS(claim=claim, measured=NS(diff=diff, half=1.5) if measured else None, verdict=verdict)


def test_the_figure_draws_the_measured_testable_claims_in_report_order():
    rows = gap_rows([outcome("b", -0.5, 10.0, "not reproduced at the paper's size"),
                     outcome("c", 2.0, None, "inconclusive"),
                     outcome("d", 0.0, 5.0, "not run", measured=False),
                     outcome("e", 3.0, 1.0, "not testable here", not_testable="no such data here")])
    assert rows == [GapRow("a vs b, RoC 6:3:1, iid", -0.5, 1.5, 10.0, "not reproduced at the paper's size"),
                    GapRow("a vs c, RoC 6:3:1, iid", 2.0, 1.5, None, "inconclusive")]


@pytest.mark.skipif(not (ROOT / "records" / "fashion_mnist").is_dir(), reason="no committed records")
def test_claims_out_draws_each_papers_figure_beside_the_report_and_links_it(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "board" / "claims.md"
    assert main(["claims", "fedlora", "--records", str(ROOT / "records"), "--out", str(out)]) == 0
    png = tmp_path / "board" / "claims_gaps" / "fedlora.png"
    assert png.is_file() and png.stat().st_size > 5000
    assert "![fedlora: measured A - B against the paper's](claims_gaps/fedlora.png)" in out.read_text()
    assert main(["claims", "fedlora", "--records", str(ROOT / "records")]) == 0  # printed: no figure, no link
    assert "claims_gaps" not in capsys.readouterr().out


@pytest.mark.skipif(not (ROOT / "records" / "fashion_mnist").is_dir(), reason="no committed records")
def test_without_matplotlib_the_report_is_written_without_figures_and_says_so(tmp_path, monkeypatch, caplog):
    import sys

    from fedbench.leaderboard.claims_report import write_report
    from fedbench.records import load_records

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = write_report(tmp_path / "claims.md", ROOT / "claims", load_records(ROOT / "records"), ["fedlora"])
    assert "claims_gaps" not in out.read_text() and not (tmp_path / "claims_gaps").exists()
    assert any("figures are not drawn: matplotlib is missing" in m for m in caplog.messages)
