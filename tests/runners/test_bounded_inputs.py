"""Every file we parse goes through the one bounded reader (fedbench/infiles.py), and user
numbers through fedbench/numbers.py: a FIFO, a device, an over-size or over-deep file, an
absurd exponent or digit count is one line and exit 2, within seconds, never a hang."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from fedbench.errors import UserError
from fedbench.runners.cli.cli import main

RUN = ["run", "--method", "fedavg", "--task", "tiny_text"]


def _argv(kind: str, path: str, tmp_path) -> list[str]:
    claims = tmp_path / "claims"
    return {
        "config": [*RUN, "--config", path, "--out", str(tmp_path / "o")],
        "preset": ["sweep", path, "--dry-run"],
        "catalogue": ["plan", "--methods", "fedavg", "--devices", "phone", "--device-catalog", path],
        "model_config": ["plan", "--methods", "fedavg", "--model-config", path],
        "claims": ["claims", "paper", "--claims", str(claims), "--records", str(tmp_path)],
    }[kind]


def _place(kind: str, tmp_path, make) -> str:
    """The input file of ``kind`` made by ``make(path)`` (claims: paper.yaml in its folder)."""
    path = tmp_path / ("claims/paper.yaml" if kind == "claims" else f"input.{kind}")
    path.parent.mkdir(exist_ok=True)
    make(path)
    return str(path)


def _within(argv, capsys, seconds=30.0):
    """main(argv) in a thread: (exit code, stderr); fails if it runs past ``seconds``."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("code", main(argv)), daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{argv} still running after {seconds} s"
    assert time.monotonic() - t0 < seconds
    return out["code"], capsys.readouterr().err


KINDS = ["config", "preset", "catalogue", "model_config", "claims"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fifo_is_refused_not_read(kind, tmp_path, capsys):
    path = _place(kind, tmp_path, os.mkfifo)
    code, err = _within(_argv(kind, path, tmp_path), capsys)
    assert code == 2 and err.count("\n") == 1 and "a FIFO, not a regular file" in err, err


@pytest.mark.parametrize("kind", ["config", "catalogue", "model_config"])
def test_a_device_is_refused_not_read(kind, tmp_path, capsys):
    code, err = _within(_argv(kind, "/dev/zero", tmp_path), capsys)
    assert code == 2 and err.count("\n") == 1 and "/dev/zero is a device" in err, err


@pytest.mark.parametrize("kind", KINDS)
def test_an_oversize_file_is_refused_by_its_stated_limit(kind, tmp_path, capsys):
    def big(p):
        with open(p, "wb") as f:
            f.truncate(9 * 2**20)  # sparse: 9 MiB of NUL bytes, beyond every reader's limit

    code, err = _within(_argv(kind, _place(kind, tmp_path, big), tmp_path), capsys)
    assert code == 2 and err.count("\n") == 1 and "bytes, more than the" in err, err


def test_a_100000_deep_model_config_is_one_line(tmp_path, capsys):
    path = _place("model_config", tmp_path, lambda p: p.write_text("[" * 100_000 + "]" * 100_000))
    code, err = _within(_argv("model_config", path, tmp_path), capsys)
    assert code == 2 and err.count("\n") == 1 and "nested" in err, err


def test_yaml_aliases_under_the_limit_cannot_blow_up_a_message(tmp_path, capsys):
    """24 aliases, ten wide each: 10**12 leaves if anything walked or printed it whole."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 13)]
    for field in ("run: {seed: *a12}", "run: {setting: *a12}", "run: {log: *a12}", "task: *a12"):
        path = tmp_path / "bomb.yaml"
        path.write_text("\n".join(lines) + f"\n{field}\n")
        code, err = _within([*RUN, "--config", str(path), "--out", str(tmp_path / "o")], capsys, 20)
        assert code == 2 and err.count("\n") == 1 and len(err) < 400, (field, err)


@pytest.mark.parametrize("flag,value", [("--roc", "1e999999999:1"), ("--roc", "1:1e-999999999"),
                                        ("--devices", "phone:1e999999999,laptop:1"),
                                        ("--setting", "5" * 5000 + "/1.0")])
def test_absurd_numbers_are_refused_before_computing(flag, value, tmp_path, capsys):
    argv = [*RUN, flag, value, "--out", str(tmp_path / "o")]
    if flag == "--devices":
        argv = ["plan", "--methods", "fedavg", "--devices", value]
    code, err = _within(argv, capsys, 20)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


def test_exact_numbers():
    from fractions import Fraction

    from fedbench.numbers import exact_number, whole_number

    assert exact_number(" 0.6 ") == Fraction(3, 5) and exact_number("6e3") == 6000 and exact_number("1/3") == Fraction(1, 3)
    for bad in ("1e31", "1e-31", "x", "", "1/0", "9" * 41):
        with pytest.raises(ValueError):
            exact_number(bad)
    assert whole_number("20", 1, 100) == 20
    with pytest.raises(ValueError):
        whole_number("5" * 5000, 1, 100)


def test_a_json_document_within_limits_is_read(tmp_path):
    from fedbench.infiles import read_json

    (tmp_path / "c.json").write_text(json.dumps({"model_type": "bert", "a": [[1]]}))
    assert read_json(tmp_path / "c.json", "x") == {"model_type": "bert", "a": [[1]]}


@pytest.mark.parametrize("parse", ["roc", "devices", "setting"])
def test_a_malformed_value_is_shown_by_the_one_bounded_repr(parse):
    """--roc, --devices and --setting show a bad value through errors.shown (one helper, not a
    copy per parser): a long value with a control character is short and on one line."""
    from fedbench.configs import parse_roc
    from fedbench.errors import shown
    from fedbench.runners.budget.devices import load_catalog, parse_devices
    from fedbench.tasks.setting import parse_setting

    bad = "6:x\n" + "9" * 300
    value = "phone:6,lap\ntop" + "9" * 300 if parse == "devices" else bad  # devices: shares for one class only
    call = {"roc": lambda: parse_roc(value), "devices": lambda: parse_devices(value, 4, load_catalog(), 0),
            "setting": lambda: parse_setting(value)}[parse]
    with pytest.raises(UserError) as e:
        call()
    assert "\n" not in str(e.value) and f" {shown(value)}" in str(e.value)
