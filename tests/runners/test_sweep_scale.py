"""A big sweep's ``--dry-run`` answers in seconds: each distinct configuration is validated
and timed once (not once per seed), and the listing is capped with a total. Counted, not
timed: the number of validations and estimates, and the lines printed."""

import pytest
import yaml

from fedbench.errors import UserError
from fedbench.runners.cli.cli import main
from fedbench.runners.cli.sweeping import LIST_LIMIT
from fedbench.runners.core import config as core_config, spec as core_spec
from fedbench.runners.core.spec import build_spec
from fedbench.runners.core.sweep import load_sweep

SEEDS = 150
METHODS, SETTINGS = ["fedavg", "fedra"], ["iid", "dir(0.5)"]


def _preset(tmp_path, seeds=tuple(range(SEEDS))):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"task": "tiny_text", "methods": METHODS, "settings": SETTINGS,
                                    "seeds": list(seeds), "run": {"rounds": 2, "clients": 4},
                                    "out": str(tmp_path / "r")}))
    return path


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_with_seed_gives_build_specs_run_id():
    """The run id a sweep derives per seed is the one ``fedbench run`` builds (the default seed 0
    included: a field at its default is not hashed)."""
    for method in ("fedavg", "fedra", "fed_hello"):
        base = build_spec(method, "tiny_text", {"seed": 3, "setting": "dir(0.5)", "roc": "1:1:1"})
        for seed in (0, 1, 3, 12345):
            full = build_spec(method, "tiny_text", {"seed": seed, "setting": "dir(0.5)", "roc": "1:1:1"})
            derived = base.with_seed(seed)
            assert derived == full and derived.run_id == full.run_id
            assert derived.record_path() == full.record_path()


def test_each_configuration_is_validated_once(tmp_path, monkeypatch):
    builds = _count(monkeypatch, core_spec, "build_spec")
    runs = load_sweep(_preset(tmp_path))
    assert len(runs) == len(METHODS) * len(SETTINGS) * SEEDS
    assert len(builds) == len(METHODS) * len(SETTINGS)  # not once per seed
    assert len({r.spec.run_id for r in runs}) == len(runs)
    assert [r.spec.run.seed for r in runs[:3]] == [0, 1, 2]


def test_a_bad_seed_in_a_big_preset_is_still_refused(tmp_path):
    with pytest.raises(UserError, match=r"run fedavg, iid, seed -1: .*seed.*>= 0"):
        load_sweep(_preset(tmp_path, seeds=(0, 1, -1)))


def test_big_dry_run_validates_times_and_lists_each_configuration_once(tmp_path, monkeypatch, capsys):
    from fedbench.leaderboard import sweep_cost

    checks = _count(monkeypatch, core_config, "check_run")  # the early (torch-free) pass
    builds = _count(monkeypatch, core_spec, "build_spec")
    estimates = _count(monkeypatch, sweep_cost, "run_estimate")
    assert main(["sweep", str(_preset(tmp_path)), "--no-progress", "--dry-run"]) == 0
    out = capsys.readouterr().out
    n, configs = len(METHODS) * len(SETTINGS) * SEEDS, len(METHODS) * len(SETTINGS)
    assert len(estimates) == configs
    assert len(builds) == configs
    assert len(checks) <= 2 * configs  # the early pass and build_spec's own, per configuration
    assert out.count(": to run") == LIST_LIMIT
    assert f"... {n - LIST_LIMIT} more runs to do not listed" in out
    assert f"sweep: {n} runs to do, est." in out
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
