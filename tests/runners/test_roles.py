"""A config field's role alone decides its CLI flag, whether the run id hashes it and
whether the leaderboard splits rows by it (fedbench.config: result, axis, record, runtime)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import fedbench.configs
import fedbench.leaderboard.groups
import fedbench.runners.core.config
import fedbench.runners.core.spec
from fedbench.config import AXIS, RECORD, RESULT, RUNTIME, cfg_field
from fedbench.configs import RunConfig
from fedbench.leaderboard.generate import render_task
from fedbench.runners.cli.cli import build_parser, main
from fedbench.runners.core.spec import build_spec

from smoke import SMALL_TASK_CONFIGS


@dataclass(frozen=True)
class RunConfigPlus(RunConfig):
    x_result: int = cfg_field(0, "a field that changes results", role=RESULT, flag=True)
    x_axis: int = cfg_field(0, "a table axis", role=AXIS, flag=True)
    x_record: int = cfg_field(0, "changes only what the record holds", role=RECORD, flag=True)
    x_runtime: int = cfg_field(0, "how the run executes", role=RUNTIME, flag=True)


@pytest.fixture
def plus(monkeypatch):
    for mod in (fedbench.configs, fedbench.runners.core.config, fedbench.runners.core.spec, fedbench.leaderboard.groups):
        monkeypatch.setattr(mod, "RunConfig", RunConfigPlus)


def test_every_field_with_a_flag_is_a_run_option_with_its_help(plus, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    for name, text in (("--x-result", "a field that changes results"), ("--x-axis", "a table axis"),
                       ("--x-record", "changes only what the record holds"), ("--x-runtime", "how the run executes")):
        assert name in out and text in out
    args = build_parser().parse_args(["run", "--method", "fedavg", "--task", "tiny_text", "--x-runtime", "3"])
    assert getattr(args, "run.x_runtime") == "3"


def _id(**fields):
    return build_spec("fedavg", "tiny_text", {"out": "unused", **fields}).run_id


def test_a_new_field_at_its_default_changes_no_run_id(monkeypatch):
    before = _id(), _id(lr=0.02)
    for mod in (fedbench.configs, fedbench.runners.core.config, fedbench.runners.core.spec, fedbench.leaderboard.groups):
        monkeypatch.setattr(mod, "RunConfig", RunConfigPlus)
    assert (_id(), _id(lr=0.02)) == before  # four new fields at their defaults: every existing id kept
    assert _id(x_result=0) == before[0] and _id(x_result=1) != before[0]


def test_run_id_follows_the_role(plus):
    base = _id()
    assert _id(x_result=1) != base and _id(x_axis=1) != base and _id(x_record=1) != base
    assert _id(x_runtime=1) == base
    spec = build_spec("fedavg", "tiny_text", {"x_result": 1, "x_axis": 2, "x_record": 3, "x_runtime": 4})
    assert spec.variant()["x_result"] == 1 and not {"x_axis", "x_record", "x_runtime"} & set(spec.variant())
    assert {"x_result", "x_axis", "x_record"} <= set(spec.configs()["run"]) and "x_runtime" not in spec.configs()["run"]


def test_leaderboard_rows_follow_the_role(plus, tmp_path):
    task_cfg = ",".join(f"task.{k}={v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items()).split(",")
    sets = [a for kv in task_cfg for a in ("--set", kv)]
    runs = {"r0": ["--x-result", "0"], "r1": ["--x-result", "1"], "rec": ["--x-result", "0", "--x-record", "5"],
            "rt": ["--x-result", "0", "--x-runtime", "7"]}
    for name, extra in runs.items():
        assert main(["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--clients", "2",
                     "--out", str(tmp_path / name), "--no-progress", *sets, *extra]) == 0
    recs = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("*.json"))]
    text = render_task("tiny_text", recs)
    # x_result splits the row; x_record and x_runtime never do (the run x_runtime=7 is the same run as r0)
    assert "fedavg (x_result=0)" in text and "fedavg (x_result=1)" in text
    assert "x_record" not in text and "x_runtime" not in text
    assert recs[0]["run"]["run_id"] != recs[2]["run"]["run_id"]  # the x_record run is another run
    by_dir = {p.parent.parent.parent.name: json.loads(p.read_text()) for p in tmp_path.rglob("*.json")}
    assert by_dir["rt"]["run"]["run_id"] == by_dir["r0"]["run"]["run_id"]


def test_a_record_written_before_a_field_existed_reads_as_its_default(plus):
    from fedbench.leaderboard.groups import raw_variant

    from fedbench.upgrade import upgrade

    def rec(**run_config):
        return {"run": {"run_config": run_config, "method_config": {}, "task_config": {}, "method_version": 1}}

    old = rec(lr=0.01)  # written before x_result existed
    assert raw_variant(old) == raw_variant(rec(lr=0.01, x_result=0))
    assert raw_variant(old) != raw_variant(rec(lr=0.01, x_result=1))
    # a version-1 record (its variant beside its run config) reads the same way once upgraded
    v1 = {"schema_version": 1, "run": {"run_config": {"lr": 0.01}, "variant": {"lr": 0.01}, "method_config": {},
                                       "task_config": {}}}
    assert raw_variant(upgrade(v1)) == raw_variant(old)


def test_a_method_field_added_after_the_record_reads_as_its_default():
    """Fed-HeLLo's ``train_head`` (default true) came after its first records: one written
    before it and one written after at its default are one run id and one row; false is
    another row; a method the registry does not know is read as written."""
    from fedbench.leaderboard.groups import raw_variant
    from fedbench.methods import METHODS

    def rec(method="fed_hello", **method_config):
        return {"run": {"method": method, "task": "tiny_text", "run_config": {}, "method_config": method_config,
                        "task_config": {}, "method_version": 1}}

    assert METHODS.get("fed_hello").config_cls().train_head is True
    assert raw_variant(rec(lora_r=16)) == raw_variant(rec(lora_r=16, train_head=True))
    assert raw_variant(rec(lora_r=16)) != raw_variant(rec(lora_r=16, train_head=False))
    assert "method.train_head" not in raw_variant(rec("not_a_method", lora_r=16))
