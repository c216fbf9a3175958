"""Every bad input is one line on stderr and exit 2, before any model is built.

Each case fails in validation: ``Task.build_model`` is patched to fail loudly, so a case
that got as far as building a model would not pass.
"""

import sys

import pytest

from fedbench.runners.cli.cli import main

from smoke import SMALL_TASK_CONFIGS

RUN = ["run", "--method", "fedra", "--task", "tiny_text"]

# (argv after RUN, text the error line must contain)
BAD_RUN = {
    "lr_nan": (["--lr", "nan"], "bad value 'nan' for run.lr: must be a finite number"),
    "lr_inf": (["--lr", "inf"], "bad value 'inf' for run.lr: must be a finite number"),
    "lr_set_nan": (["--set", "lr=nan"], "bad value 'nan' for run.lr: must be a finite number"),
    "lr_set_yaml_nan": (["--set", "lr=.nan"], "bad value '.nan' for run.lr: expected a number"),
    "lr_zero": (["--lr", "0"], "bad value 0.0 for run.lr: must be a number > 0"),
    "seed_negative": (["--seed", "-1"], "bad value -1 for run.seed: must be an integer >= 0"),
    "seed_bool": (["--set", "seed=true"], "bad value 'true' for run.seed: expected an integer"),
    "momentum_negative": (["--set", "momentum=-1"], "bad value -1.0 for run.momentum: must be a number >= 0"),
    "weight_decay_negative": (["--set", "weight_decay=-5"], "bad value -5.0 for run.weight_decay: must be a number >= 0"),
    "tier_ranks_zero": (["--set", "tier_ranks=0,0"], "bad value '0,0' for run.tier_ranks: must be one or more LoRA ranks >= 1"),
    "tier_fractions_range": (["--set", "tier_fractions=0.5,1.5"], "bad value '0.5,1.5' for run.tier_fractions: must be one or more fractions in (0, 1]"),
    "max_steps_zero": (["--max-steps", "0"], "bad value 0 for run.max_steps: must be an integer >= 1"),
    "max_steps_negative": (["--max-steps", "-1"], "bad value -1 for run.max_steps: must be an integer >= 1"),
    "grad_clip_negative": (["--set", "grad_clip=-1"], "bad value -1.0 for run.grad_clip: must be a number > 0"),
    "rounds_zero": (["--rounds", "0"], "bad value 0 for run.rounds: must be an integer >= 1"),
    "capacities_empty": (["--capacities", ""], "bad value '' for run.capacities: must list at least one per-client layer budget"),
    "capacities_zero": (["--capacities", "4,0"], "bad value '4,0' for run.capacities: every layer budget must be >= 1"),
    "roc_and_capacities": (["--roc", "6:3:1", "--capacities", "4,2"], "give either --roc (run.roc) or --capacities"),
    "roc_tiers": (["--roc", "1:1"], "--roc '1:1' has 2 tiers but run.tier_fractions has 3"),
    "lora_alpha_negative": (["--set", "method.lora_alpha=-16"], "bad value -16.0 for method.lora_alpha: must be a number > 0"),
    "lora_dropout_range": (["--set", "method.lora_dropout=1.5"], "bad value 1.5 for method.lora_dropout: must be in [0, 1)"),
    "lora_r_zero": (["--set", "method.lora_r=0"], "bad value 0 for method.lora_r: must be an integer >= 1"),
    "fedra_max_redraws": (["--set", "method.max_redraws=0"], "bad value 0 for method.max_redraws: must be an integer >= 1"),
    "n_classes_one": (["--set", "task.n_classes=1"], "bad value 1 for task.n_classes: must be an integer >= 2"),
    "n_train_zero": (["--set", "task.n_train=0"], "bad value 0 for task.n_train: must be an integer >= 1"),
    "keywords_too_many": (["--set", "task.keywords=30"], "bad value 30 for task.keywords: must be an integer in 1..23"),
    "vocab_too_small": (["--set", "task.vocab_size=10"], "bad value 10 for task.vocab_size: must be > 26"),
    "model_path_tiny": (["--model", "/nonexistent"], "tiny_text takes no --model"),
    "data_dir_tiny": (["--data-dir", "/nonexistent"], "tiny_text takes no --data-dir (its data are generated)"),
    "task_list_for_int": (["--set", "task.n_train=[1,2]"], "bad value '[1,2]' for task.n_train: expected an integer"),
    "str_field_list": (["--set", "setting=[iid]"], "unknown setting '[iid]'"),
    # values that passed validation and then crashed set-up or meant something else
    "seed_beyond_64_bits": (["--seed", str(2**64)], "must fit in 64 bits"),
    "seed_10000_digits": (["--set", "seed=" + "9" * 10000], "expected an integer"),
    "threads_absurd": (["--threads", "1000000000"], "run.threads: must be an integer from 1 to 1024"),
    "device_meta": (["--device", "meta"], "run.device: must be auto, cpu, mps, cuda or cuda:N"),
    "lr_1e300": (["--lr", "1e300", "--optimizer", "sgd"], "run.lr: must be a number > 0 and <= 1e+06"),
    "tier_ranks_beyond_tiers": (["--roc", "6:3:1", "--set", "tier_ranks=1,4,16,32"], "lists 4 ranks"),
    "set_yaml_sexagesimal": (["--set", "clients=6:3:1"], "bad value '6:3:1' for run.clients: expected an integer"),
}

BAD_OTHER = {
    "tiny_vision_model": (["run", "--method", "fedavg", "--task", "tiny_vision", "--model", "/nonexistent"],
                          "bad value '/nonexistent' for task.model: tiny_vision builds its own model; choose from vit, mixer"),
    "tiny_vision_img_size": (["run", "--method", "fedavg", "--task", "tiny_vision", "--set", "task.img_size=20"],
                             "bad value 20 for task.img_size: must be a positive multiple of 8"),
    "fed_hello_lora_alpha": (["run", "--method", "fed_hello", "--task", "tiny_text", "--set", "method.lora_alpha=0"],
                             "bad value 0.0 for method.lora_alpha: must be a number > 0"),
    "hetlora_gamma": (["run", "--method", "hetlora", "--task", "tiny_text", "--set", "method.reg_gamma=2"],
                      "bad value 2.0 for method.reg_gamma: must be in (0, 1]"),
    "depthfl_group": (["run", "--method", "depthfl", "--task", "tiny_text", "--set", "method.group_size=0"],
                      "bad value 0 for method.group_size: must be an integer >= 1"),
    "data_dir_missing": (["run", "--method", "fedavg", "--task", "cifar100", "--data-dir", "/nonexistent"],
                         "bad value '/nonexistent' for task.data_dir: no such directory"),
    "model_path_missing": (["run", "--method", "fedavg", "--task", "cifar100", "--model", "./no/such/model"],
                           "bad value './no/such/model' for task.model: no such file or directory"),
}


@pytest.fixture(autouse=True)
def no_model_building(monkeypatch):
    """Validation must fail before any data are loaded or any model is built."""
    from fedbench.tasks import TASKS

    def boom(*a, **k):
        raise AssertionError("a bad input got past validation: data loaded or model built")

    for entry in TASKS.entries():
        monkeypatch.setattr(entry.obj, "build_model", boom)
        monkeypatch.setattr(entry.obj, "load", boom)


def _one_line_error(argv, expected, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("fedbench: error: "), err
    assert "Traceback" not in err
    assert expected in err, err
    return err


def test_set_values_are_parsed_by_the_fields_type(tmp_path):
    """Not YAML 1.1: ``roc=6:3:1`` stays a ratio (not the sexagesimal 21781), ``seed=010``
    is ten (not octal 8), as on the command line."""
    from fedbench.config import parse_overrides
    from fedbench.runners.core.spec import build_spec

    over = parse_overrides(["roc=6:3:1", "seed=010", "task.n_train=0300", "method.lora_r=08"])
    spec = build_spec("fedra", "tiny_text", {**over["run"], "out": str(tmp_path)}, over["method"], over["task"])
    assert spec.run.roc == "6:3:1" and spec.run.seed == 10 and spec.task_config.n_train == 300
    assert spec.method_config.lora_r == 8


@pytest.mark.parametrize("case", list(BAD_RUN))
def test_bad_run_option(case, capsys, tmp_path):
    extra, expected = BAD_RUN[case]
    _one_line_error(RUN + extra + ["--out", str(tmp_path / "res"), "--no-progress"], expected, capsys)
    assert not (tmp_path / "res").exists()  # refused before the output directory is even made


@pytest.mark.parametrize("case", list(BAD_OTHER))
def test_bad_input_other_tasks_and_methods(case, capsys, tmp_path):
    argv, expected = BAD_OTHER[case]
    _one_line_error(argv + ["--out", str(tmp_path / "res"), "--no-progress"], expected, capsys)


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_out_not_a_directory(where, capsys, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    out = f if where == "file" else f / "sub"
    expected = "is not a directory" if where == "file" else "cannot be created"
    _one_line_error(RUN + ["--out", str(out), "--no-progress"], f"output directory {out} {expected}", capsys)


ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefghijkl", "bcdefghijklm")) + "run: {rounds: 1}\n"


@pytest.mark.parametrize("text,expected", [
    ("run: {rounds: [1\n", "is not valid YAML: line 2: "),
    ("run: 5\n", "section 'run' must be a mapping of fields, got 5"),
    ("runn: {}\n", "unknown section 'runn'"),
    ("run: {rounds: 1}\nrun: {rounds: 5}\n", "duplicate key 'run'"),
    ("run: {rounds: 1, rounds: 5}\n", "duplicate key 'rounds'"),
    (ALIAS_BOMB, "more than 100 aliases"),
    (b"run: {setting: \xff}\n", "is not UTF-8 text"),
    ("[" * 100000, "is nested too deeply"),
], ids=["yaml", "section_type", "section_name", "duplicate_section", "duplicate_key", "alias_bomb", "not_utf8",
        "deep"])
def test_bad_config_file(text, expected, capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = _one_line_error(RUN + ["--config", str(cfg), "--no-progress"], expected, capsys)
    assert str(cfg) in err and len(err) < 500


def test_config_that_is_a_directory(capsys, tmp_path):
    _one_line_error(RUN + ["--config", str(tmp_path), "--no-progress"], "is a directory, not a regular file", capsys)


# ------------------------------------------------------------------------------ sweeps
SMALL = "task_config: {n_train: 160, n_test: 48}\nrun: {rounds: 1, clients: 2}\n"

BAD_PRESETS = {
    "method_typo": ("task: tiny_text\nmethods: [fedra, fedrra]\n",
                    "key 'methods': unknown method 'fedrra'; did you mean 'fedra'?"),
    "methods_string": ("task: tiny_text\nmethods: fedra\n",
                       "key 'methods' must be a list of method keys, e.g. [fedavg, fedra]; got 'fedra'"),
    "seeds_string": ("task: tiny_text\nmethods: [fedra]\nseeds: abc\n",
                     "key 'seeds' must be a list of integer seeds, e.g. [0, 1]; got 'abc'"),
    "seeds_negative": ("task: tiny_text\nmethods: [fedra]\nseeds: [0, -1]\n",
                       "key 'seeds', run fedra, iid, seed -1: bad value -1 for run.seed: must be an integer >= 0"),
    "invalid_yaml": ("task: tiny_text\nmethods: [fedra\nseeds: [0]\n", "is not valid YAML: line "),
    "unknown_key": ("task: tiny_text\nmethods: [fedra]\nmethod: {}\n", "unknown key 'method'"),
    "unknown_task": ("task: tiny_txt\nmethods: [fedra]\n", "unknown task 'tiny_txt'"),
    "task_missing": ("methods: [fedra]\n", "a preset needs `task` and a non-empty `methods` list"),
    "not_a_mapping": ("- fedra\n", "expected a mapping of keys"),
    "empty": ("", "is empty"),
    "resources_not_mappings": ("task: tiny_text\nmethods: [fedra]\nresources: [\"6:3:1\"]\n", "key 'resources' must be"),
    "resources_unknown_field": ("task: tiny_text\nmethods: [fedra]\nresources: [{rocc: \"6:3:1\"}]\n",
                                "key 'resources', run fedra, iid, seed 0: unknown config key run.rocc; did you mean run.roc?"),
    "run_value": ("task: tiny_text\nmethods: [fedavg, fedra]\nrun: {lr: .nan}\n",
                  "key 'run', run fedavg, iid, seed 0: bad value nan for run.lr: must be a finite number"),
    "run_lr_huge": ("task: tiny_text\nmethods: [fedavg]\nrun: {lr: 1.0e+300}\n", "must be a number > 0 and <= 1e+06"),
    "method_config_value": ("task: tiny_text\nmethods: [fedavg, fedra]\nmethod_config: {fedra: {lora_alpha: -1}}\n",
                            "key 'method_config.fedra', run fedra, iid, seed 0: bad value -1.0 for method.lora_alpha: must be a number > 0"),
    "method_config_other_method": ("task: tiny_text\nmethods: [fedavg]\nmethod_config: {fedra: {lora_r: 2}}\n",
                                   "key 'method_config' has an entry for 'fedra'"),
    "task_config_value": ("task: tiny_text\nmethods: [fedavg]\ntask_config: {n_classes: 1}\n",
                          "key 'task_config', run fedavg, iid, seed 0: bad value 1 for task.n_classes: must be an integer >= 2"),
    "setting_bad": ("task: tiny_text\nmethods: [fedavg]\nsettings: [iid, dirichlet]\n", "key 'settings', run fedavg, dirichlet, seed 0: unknown setting 'dirichlet'"),
    "methods_twice": ("task: tiny_text\nmethods: [fedavg, fedavg]\n", "key 'methods' lists 'fedavg' more than once"),
    "seeds_twice": ("task: tiny_text\nmethods: [fedavg]\nseeds: [0, 1, 0]\n" + SMALL,
                    "run fedavg, iid, seed 0 is the same run as fedavg, iid, seed 0"),
    "settings_one_split": ("task: tiny_text\nmethods: [fedavg]\nsettings: [iid, IID, \" iid\"]\n" + SMALL,
                           "is the same run as fedavg, iid, seed 0"),
    "variants_twice": ("task: tiny_text\nmethods: [fedavg]\nmethod_variants: [{lora_r: 4}, {lora_r: 4}]\n" + SMALL,
                       "is the same run as"),
    "seed_beyond_64_bits": (f"task: tiny_text\nmethods: [fedavg]\nseeds: [{2**64}]\n", "must fit in 64 bits"),
    "duplicate_key": ("task: tiny_text\nmethods: [fedavg]\nmethods: [fedra]\n", "duplicate key 'methods'"),
}


@pytest.mark.parametrize("case", list(BAD_PRESETS))
def test_bad_preset(case, capsys, tmp_path):
    text, expected = BAD_PRESETS[case]
    preset = tmp_path / "p.yaml"
    preset.write_text(text)
    err = _one_line_error(["sweep", str(preset), "--out", str(tmp_path / "res"), "--no-progress"], expected, capsys)
    assert str(preset) in err  # names the file
    assert not (tmp_path / "res").exists()


def test_sweep_missing_preset(capsys, tmp_path):
    _one_line_error(["sweep", str(tmp_path / "nope.yaml")], "sweep preset not found", capsys)


def test_sweep_out_under_a_file(capsys, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    preset = tmp_path / "p.yaml"
    preset.write_text(f"task: tiny_text\nmethods: [fedavg]\nout: {f / 'res'}\n")
    _one_line_error(["sweep", str(preset), "--no-progress"], f"output directory {f / 'res'} cannot be created", capsys)


def test_corrupt_record_is_a_warning_and_not_done(capsys, tmp_path):
    from fedbench.runners.core.experiment import Experiment

    out = tmp_path / "res"
    preset = tmp_path / "p.yaml"
    preset.write_text(f"task: tiny_text\nmethods: [fedavg]\nseeds: [0, 1]\n{SMALL}out: {out}\n")
    path = Experiment("fedavg", "tiny_text", {"rounds": 1, "clients": 2, "seed": 0, "out": str(out)},
                       task_config=SMALL_TASK_CONFIGS["tiny_text"]).record_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"status": "ok", ')  # a truncated record
    assert main(["sweep", str(preset), "--dry-run"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and cap.err.startswith("fedbench: warning: corrupt record ")
    assert str(path) in cap.err and "not valid JSON" in cap.err
    assert cap.out.count(": to run") == 2


def test_labels_name_everything_that_differs():
    from fedbench.runners.core.sweep import expand_sweep, run_labels

    runs = expand_sweep({"task": "tiny_text", "methods": ["fedavg", "fedra"], "seeds": [0],
                         "resources": [{"roc": "6:3:1", "lr": 0.01}, {"roc": "6:3:1", "lr": 0.1}],
                         "method_config": {"fedra": {"lora_r": 4}}})
    labels = run_labels(runs)
    assert len(set(labels)) == len(labels) == 4
    assert labels[0] == "fedavg run.lr=0.01"
    assert labels[3] == "fedra run.lr=0.1 method.lora_r=4"


@pytest.mark.parametrize("value", ["nan", "0", "-1"])
def test_sweep_cpus_per_run_must_be_positive(value, capsys, tmp_path):
    """NaN compared false with `<= 0` and reached Ray as a resource request."""
    pytest.importorskip("ray")
    preset = tmp_path / "p.yaml"
    preset.write_text("task: tiny_text\nmethods: [fedavg]\n" + SMALL)
    _one_line_error(["sweep", str(preset), "--out", str(tmp_path / "res"), "--no-progress", "--workers", "1",
                     "--cpus-per-run", value], "--cpus-per-run must be a number > 0", capsys)


def test_sweep_workers_without_ray_is_the_install_line(capsys, tmp_path, monkeypatch):
    """A parallel sweep where Ray is not installed. The run loop imported ``ray.util`` before
    asking for Ray, so a machine without it got a traceback; with Ray installed, its submodules
    already loaded hid that: they are unloaded here, so the case is the same on both."""
    for name in [n for n in sys.modules if n == "ray" or n.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray (and ray.util) raises ImportError
    preset = tmp_path / "p.yaml"
    preset.write_text("task: tiny_text\nmethods: [fedavg]\n" + SMALL)
    _one_line_error(["sweep", str(preset), "--out", str(tmp_path / "res"), "--no-progress", "--workers", "2"],
                    "pip install 'fedbench-peft[ray]'", capsys)
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))
