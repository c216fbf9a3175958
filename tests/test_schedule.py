"""The default run's file order: the longest files first (tests/conftest.py)."""

from pathlib import Path
from types import SimpleNamespace

from conftest import LONG_FIRST, long_first


def test_every_long_file_exists():
    """A renamed file would silently go back to its collection place."""
    tests = Path(__file__).resolve().parent
    assert all((tests / name).is_file() for name in LONG_FIRST)


def test_long_files_come_first_in_their_order_and_each_file_keeps_its_own():
    ids = ["tests/leaderboard/test_a.py::x", "tests/test_quickstart.py::p1", "tests/runners/test_ray.py::r",
           "tests/test_quickstart.py::p2", "tests/test_zz.py::z", "tests/test_learning.py::l"]
    got = [i.nodeid for i in long_first([SimpleNamespace(nodeid=n) for n in ids])]
    assert got == ["tests/test_learning.py::l", "tests/runners/test_ray.py::r", "tests/test_quickstart.py::p1",
                   "tests/test_quickstart.py::p2", "tests/leaderboard/test_a.py::x", "tests/test_zz.py::z"]
