"""Sweep presets expand to the product of their lists and skip finished runs (the runs train
nobody: ``executor: stub``, tests/stub.py)."""

import json
import pytest

from fedbench.errors import UserError
from fedbench.runners.cli.cli import main
from fedbench.runners.core.sweep import expand_sweep

from smoke import SMALL_TASK_CONFIGS


def test_expand_is_the_product():
    runs = expand_sweep({"task": "tiny_text", "methods": ["fedavg", "fedra"], "settings": ["iid", "dir(0.5)"],
                         "resources": [{"roc": "6:3:1"}, {"roc": "1:1:1"}], "seeds": [0, 1, 2],
                         "method_config": {"all": {"lora_r": 4}, "fedra": {"coverage": "redraw"}}})
    assert len(runs) == 2 * 2 * 2 * 3
    fedra = [r for r in runs if r["method"] == "fedra"][0]
    assert fedra["method_config"] == {"lora_r": 4, "coverage": "redraw"}
    assert {(r["run"]["setting"], r["run"]["roc"], r["run"]["seed"]) for r in runs if r["method"] == "fedavg"} == {
        (s, roc, seed) for s in ("iid", "dir(0.5)") for roc in ("6:3:1", "1:1:1") for seed in (0, 1, 2)}


def test_unknown_preset_key():
    with pytest.raises(UserError, match="unknown key 'method'"):
        expand_sweep({"task": "tiny_text", "methods": ["fedavg"], "method": {}})


def test_sweep_skips_finished_runs(tmp_path, capsys):
    preset = tmp_path / "p.yaml"
    task_cfg = ", ".join(f"{k}: {v}" for k, v in SMALL_TASK_CONFIGS["tiny_text"].items())
    preset.write_text(f"task: tiny_text\nmethods: [fedavg]\nseeds: [0, 1]\nrun: {{rounds: 1, clients: 2, executor: stub}}\n"
                      f"task_config: {{{task_cfg}}}\nout: {tmp_path / 'res'}\n")
    assert main(["sweep", str(preset), "--no-progress"]) == 0
    first = capsys.readouterr().out
    assert "2 runs, 0 already done, 0 failed" in first
    assert len(list((tmp_path / "res").rglob("*.json"))) == 2
    assert main(["sweep", str(preset), "--no-progress"]) == 0
    assert "2 runs, 2 already done" in capsys.readouterr().out


def test_a_sweep_loads_each_task_once(tmp_path, monkeypatch):
    """Runs of the same task in one sweep process reuse its loaded data."""
    import yaml

    from fedbench.runners.cli.cli import main
    from fedbench.tasks.tiny import TinyText

    calls = []
    load = TinyText.load
    monkeypatch.setattr(TinyText, "load", lambda self: calls.append(1) or load(self))
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg", "fed_hello_gd_uniform"],
                                      "seeds": [0], "run": {"rounds": 1, "clients": 2, "per_round": 2, "executor": "stub"},
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    assert main(["sweep", str(preset), "--no-progress"]) == 0
    assert len(calls) == 1


def test_only_runs_part_of_a_preset_with_the_same_run_ids(tmp_path, capsys):
    """``--only`` keeps the runs whose method / setting / seed / clients match, with the whole
    preset's run ids: the whole preset run afterwards skips them."""
    import yaml

    from fedbench.runners.core.sweep import load_sweep, select

    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg", "fedra"], "settings": ["iid", "2/-"],
                                      "seeds": [0, 1], "run": {"rounds": 1, "per_round": 2, "executor": "stub"},
                                      "resources": [{"clients": 2}, {"clients": 3, "rounds": 2}],
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    runs = load_sweep(preset)
    part = select(runs, ["method=fedra", "setting=iid", "seed=1,7"])
    assert [(r.spec.method, r.spec.run.setting, r.spec.run.seed) for r in part] == [("fedra", "iid", 1)] * 2
    assert part[0].spec.run_id in {r.spec.run_id for r in runs}
    three = select(runs, ["clients=3", "method=fedavg"])  # a resources entry, with its own rounds
    assert [(r.spec.run.clients, r.spec.run.rounds) for r in three] == [(3, 2)] * 4
    assert select(runs, None) == runs
    for bad, match in (["mthod=fedra"], "KEY one of method, setting, seed, clients, roc"), (["seed="], "KEY=V1,V2"), \
                      (["method=fedra", "seed=5"], "matches no run"):
        with pytest.raises(UserError, match=match):
            select(runs, bad)
    assert main(["sweep", str(preset), "--no-progress", "--only", "method=fedra", "--only", "seed=0"]) == 0
    assert "4 runs, 0 already done, 0 failed" in capsys.readouterr().out
    assert main(["sweep", str(preset), "--no-progress", "--dry-run"]) == 0
    assert capsys.readouterr().out.count("to run") == 12


def test_only_roc_picks_a_resource_ratio(tmp_path):
    """``--only roc=6:3:1`` keeps one ``resources`` entry of a preset that has two ratios (the claims
    report's commands select a paper's resource group this way)."""
    import yaml

    from fedbench.runners.core.sweep import load_sweep, select

    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg", "fedra"], "settings": ["iid"],
                                      "seeds": [0, 1], "run": {"rounds": 1, "clients": 6, "per_round": 2},
                                      "resources": [{"roc": "6:3:1"}, {"roc": "1:1:1"}],
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    runs = load_sweep(preset)
    part = select(runs, ["roc=1:1:1", "method=fedra"])
    assert [(r.spec.method, r.spec.run.roc, r.spec.run.seed) for r in part] == [("fedra", "1:1:1", 0), ("fedra", "1:1:1", 1)]
    assert len(select(runs, ["roc=6:3:1,1:1:1"])) == len(runs) == 8
    with pytest.raises(UserError, match="matches no run"):
        select(runs, ["roc=10:0:0"])


def test_only_the_cli_says_a_large_preset_is_being_checked(tmp_path, capsys, monkeypatch):
    """load_sweep is library code (fedbench.sweep calls it): it prints nothing; the CLI passes
    its stderr and says it is checking a preset of SAY_CHECKING_FROM runs or more."""
    import yaml

    from fedbench.runners.core import sweep

    monkeypatch.setattr(sweep, "SAY_CHECKING_FROM", 2)
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedavg"], "seeds": [0, 1],
                                      "run": {"rounds": 1, "clients": 2, "executor": "stub"},
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    assert len(sweep.load_sweep(preset)) == 2
    assert capsys.readouterr().err == ""
    assert main(["sweep", str(preset), "--dry-run", "--no-progress"]) == 0
    assert f"checking the 2 runs of {preset}" in capsys.readouterr().err


def test_only_a_config_field_picks_an_arm_of_method_variants(tmp_path):
    """``--only method.server_rule=authors_code`` keeps one arm of ``method_variants`` (the
    authors-rule preset's), with the whole preset's run ids; a run whose config lacks the field
    is not selected; booleans and numbers compare as JSON (``true``, ``0.5``); ``task.`` and ``run.``
    fields too; an unknown section is an error."""
    import yaml

    from fedbench.runners.core.sweep import load_sweep, select

    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["flexlora", "flora"], "settings": ["iid"],
                                      "method_variants": [{}, {"server_rule": "authors_code", "train_head": False}],
                                      "seeds": [0], "run": {"rounds": 1, "clients": 6, "per_round": 2},
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    runs = load_sweep(preset)
    both = select(runs, ["method.server_rule=authors_code", "method.train_head=false"])
    assert sorted(r.spec.method for r in both) == ["flexlora", "flora"]
    assert {r.spec.run_id for r in both} <= {r.spec.run_id for r in runs}
    assert all(r.spec.method_config.server_rule == "authors_code" and not r.spec.method_config.train_head for r in both)
    assert len(select(runs, ["method.server_rule=paper"])) == 2
    assert len(select(runs, ["task.n_train=80", "run.lr=" + json.dumps(runs[0].spec.run.lr)])) == len(runs)
    with pytest.raises(UserError, match=r"method.<field>, task.<field> or run.<field>"):
        select(runs, ["model.lr=1"])
    with pytest.raises(UserError, match="matches no run"):
        select(runs, ["method.t_rgd=3"])  # Fed-HeLLo's field: neither method has it


def test_only_keys_are_the_shared_grammars():
    """``sweep --only`` and ``compare --only`` parse one grammar (:mod:`fedbench.only`); the
    sweep maps each of its keys to a run spec's value."""
    from fedbench.only import KEYS, SECTIONS, parse
    from fedbench.runners.core.sweep import _SECTIONS, ONLY_KEYS

    assert tuple(ONLY_KEYS) == KEYS and tuple(_SECTIONS) == SECTIONS
    assert parse("method.server_rule=authors_code, paper") == ("method.server_rule", {"authors_code", "paper"}, True)
    assert parse("seed=0,1") == ("seed", {"0", "1"}, False)


def test_only_a_list_valued_field_is_written_in_brackets(tmp_path):
    """``run.tier_fractions`` is a list: ``--only run.tier_fractions=[0.5,1.0]`` keeps the resources
    entry that has it; the bare commas split it into values no run has, and the error lists the real ones."""
    import yaml

    from fedbench.runners.core.sweep import load_sweep, select

    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["fedra"], "settings": ["iid"], "seeds": [0],
                                      "run": {"rounds": 1, "clients": 6, "per_round": 2},
                                      "resources": [{"tier_fractions": [0.5, 1.0]}, {"tier_fractions": [0.25, 1.0]}],
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    runs = load_sweep(preset)
    (one,) = select(runs, ["run.tier_fractions=[0.25, 1.0]"])
    assert list(one.spec.run.tier_fractions) == [0.25, 1.0]
    assert len(select(runs, ["run.tier_fractions=[0.5,1.0],[0.25,1.0]"])) == 2
    with pytest.raises(UserError, match=r"the 2 left have run.tier_fractions \[0.25, 1.0\]; \[0.5, 1.0\]"):
        select(runs, ["run.tier_fractions=0.25,1.0"])


def test_a_progress_label_pastes_into_only(tmp_path):
    """Each ``key=value`` of a run's progress label is an ``--only`` filter that keeps that run:
    a list in brackets without spaces, a boolean as ``false`` (Python's ``False`` matched
    nothing), a run field as ``run.<field>``."""
    import yaml

    from fedbench.runners.core.sweep import load_sweep, select

    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"task": "tiny_text", "methods": ["flexlora"], "settings": ["iid"],
                                      "method_variants": [{}, {"train_head": False}], "seeds": [0],
                                      "resources": [{"roc": "6:3:1", "tier_fractions": [0.16, 0.33, 1.0]},
                                                    {"roc": "6:3:1", "tier_fractions": [0.5, 0.75, 1.0]}],
                                      "run": {"rounds": 1, "clients": 6, "per_round": 2},
                                      "task_config": {"n_train": 80, "n_test": 40}, "out": str(tmp_path / "r")}))
    runs = load_sweep(preset)
    assert sorted(r.label for r in runs) == ["flexlora run.tier_fractions=[0.16,0.33,1.0] method.train_head=false",
                                             "flexlora run.tier_fractions=[0.16,0.33,1.0] method.train_head=true",
                                             "flexlora run.tier_fractions=[0.5,0.75,1.0] method.train_head=false",
                                             "flexlora run.tier_fractions=[0.5,0.75,1.0] method.train_head=true"]
    for r in runs:
        assert select(runs, [p for p in r.label.split() if "=" in p]) == [r]
