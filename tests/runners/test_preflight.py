"""A new user's first minutes: bad input refused before torch is imported, a task's named
profile, a line per set-up phase before the bar, ``plan``'s progress, every executor in
``run --help`` (issue 41)."""

import json
import subprocess
import sys

import pytest

from fedbench.errors import UserError
from fedbench.registry import declared_keys
from fedbench.runners.cli.cli import main
from fedbench.runners.core.spec import build_spec
from smoke import SMALL_TASK_CONFIGS


def test_declared_keys_are_the_registries_keys_and_aliases():
    from fedbench.methods import METHODS
    from fedbench.runners.executors.executor import EXECUTORS
    from fedbench.runners.executors import packed, ray_executor  # noqa: F401 - they register themselves
    from fedbench.tasks import TASKS

    for reg, package, name in ((METHODS, "fedbench.methods", "METHODS"), (TASKS, "fedbench.tasks", "TASKS"),
                               (EXECUTORS, "fedbench.runners.executors", "EXECUTORS")):
        builtin = [e for e in reg.entries() if e.obj.__module__.startswith(package)]
        assert declared_keys(package, name) == sorted([e.key for e in builtin] + [a for e in builtin for a in e.aliases])
    assert "all_large" in declared_keys("fedbench.methods", "METHODS")  # an alias
    assert declared_keys("fedbench.runners.executors", "EXECUTORS") == ["local", "packed", "ray"]


_PROBE = """
import json, sys
from fedbench.runners.cli.cli import main
code = main(sys.argv[1:])
print(json.dumps([code, "torch" in sys.modules]))
"""


@pytest.mark.parametrize("argv, expected", [
    (["--method", "fedavgg", "--task", "tiny_text"], "unknown method 'fedavgg'; did you mean 'fedavg'?"),
    (["--method", "fedavg", "--task", "ledgr"], "unknown task 'ledgr'; did you mean 'ledgar'?"),
    (["--method", "fedavg", "--task", "tiny_text", "--roc", "6:x:1"], "malformed --roc '6:x:1'"),
    (["--method", "fedavg", "--task", "tiny_text", "--set", "seed=-1"], "bad value -1 for run.seed"),
    (["--method", "fedavg", "--task", "tiny_text", "--setting", "20/"], "unknown setting '20/'"),
    (["--method", "fedavg", "--task", "tiny_text", "--executor", "pakced"], "unknown executor 'pakced'; did you mean 'packed'?"),
    (["--method", "fedavg", "--task", "tiny_text", "--set", "roundz=2"], "unknown config key run.roundz"),
])
def test_bad_input_is_refused_before_torch_is_imported(argv, expected):
    p = subprocess.run([sys.executable, "-c", _PROBE, "run", *argv], capture_output=True, text=True)
    code, torch_imported = json.loads(p.stdout.strip().splitlines()[-1])
    assert code == 2 and not torch_imported, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("fedbench: error: ") and expected in p.stderr


@pytest.mark.parametrize("preset, expected", [
    ("task: tiny_text\nmethods: [fedavg, fedavgg]\n", "key 'methods': unknown method 'fedavgg'; did you mean 'fedavg'?"),
    ("task: tiny_txt\nmethods: [fedavg]\n", "unknown task 'tiny_txt'; did you mean 'tiny_text'?"),
    ("task: tiny_text\nmethods: [fedavg]\nrun: {rounds: 0}\n", "key 'run', run fedavg, iid, seed 0: bad value 0 for "
                                                              "run.rounds"),
    ("task: tiny_text\nmethods: [fedavg]\nsettings: [iid, 20/]\n", "key 'settings', run fedavg, 20/, seed 0: "
                                                                  "unknown setting '20/'"),
    ("task: tiny_text\nmethods: fedavg\n", "key 'methods'"),
])
def test_a_bad_preset_is_refused_before_torch_is_imported(preset, expected, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(preset)
    p = subprocess.run([sys.executable, "-c", _PROBE, "sweep", str(path), "--dry-run"], capture_output=True, text=True)
    code, torch_imported = json.loads(p.stdout.strip().splitlines()[-1])
    assert code == 2 and not torch_imported, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"fedbench: error: preset {path}: ") and expected in p.stderr


def test_the_full_validation_gives_the_same_line():
    """The checks before the imports move errors earlier, they do not reword them."""
    with pytest.raises(UserError, match="unknown method 'fedavgg'; did you mean 'fedavg'"):
        build_spec("fedavgg", "tiny_text", {})


def test_a_profile_fills_the_unset_fields_and_the_run_is_the_same_by_hand():
    from fedbench.tasks import TASKS

    prof = TASKS.get("ledgar").profiles["cpu"]
    spec = build_spec("fedavg", "ledgar", {"rounds": 2}, profile="cpu")
    assert spec.run.rounds == 2  # the user's value wins
    assert spec.run.clients == prof["run"]["clients"] and spec.run.batch_size == prof["run"]["batch_size"]
    assert spec.task_config.model == "minilm-l6" and spec.task_config.seq_len == prof["task"]["seq_len"]
    by_hand = build_spec("fedavg", "ledgar", {**prof["run"], "rounds": 2}, task_config=prof["task"])
    assert by_hand.run_id == spec.run_id
    with pytest.raises(UserError, match="task 'ledgar' has no profile 'gpu' \\(its profiles: cpu\\)"):
        build_spec("fedavg", "ledgar", {}, profile="gpu")
    with pytest.raises(UserError, match="task 'tiny_text' has no profile 'cpu' \\(it declares none\\)"):
        build_spec("fedavg", "tiny_text", {}, profile="cpu")


def test_ledgar_without_data_names_the_offline_copy_and_the_profile():
    from fedbench.tasks.ledgar import _missing

    msg = str(_missing("no --data-dir given and the HF hub cannot be reached", None))
    assert "--data-dir ../shared/data/licenses" in msg and "--profile cpu" in msg and "\n" not in msg


def test_a_line_per_phase_comes_before_the_bar(tmp_path, capsys):
    argv = ["run", "--method", "fedavg", "--task", "tiny_text", "--rounds", "1", "--clients", "2", "--eval-initial",
            "--out", str(tmp_path)] + [a for k, v in SMALL_TASK_CONFIGS["tiny_text"].items()
                                      for a in ("--set", f"task.{k}={v}")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    phases = ["loading data", "building the model", "initial evaluation"]
    at = [err.index(f"fedavg/tiny_text: {p} ... ") for p in phases]
    assert at == sorted(at) and at[0] == 0  # the first output, before the model is built
    bar = err.index("fedavg/tiny_text:   0%")
    assert bar > at[-1]
    for p in phases:  # each line ends with the phase's time
        line = err[err.index(f"{p} ... "):].splitlines()[0]
        assert line.endswith(" s") and float(line.split(" ... ")[1][:-2]) >= 0


def test_plan_prints_each_method_as_it_is_done(capsys):
    assert main(["plan", "--model", "bert-base-uncased", "--methods", "fedra,hetlora", "--devices", "phone",
                 "--seq-len", "8", "--batch-size", "2"]) == 0
    got = capsys.readouterr()
    lines = [ln for ln in got.err.splitlines() if ln.startswith("fedbench plan: ")]
    assert [ln.split("] ")[0] for ln in lines] == ["fedbench plan: [1/2", "fedbench plan: [2/2"]
    assert lines[0].split("] ")[1].startswith("fedra: ") and lines[1].split("] ")[1].startswith("hetlora: ")
    assert "fedbench plan:" not in got.out  # the table alone on stdout


def test_run_help_lists_every_executor(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(registered: local, packed, ray" in text  # and any registered in this process (a test's stub)


def test_the_latency_benchmark_prints_each_ratio(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "error_latency.py"
    spec = importlib.util.spec_from_file_location("_bench_error_latency", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ratios = mod.main(["--repeats", "1"])
    out = capsys.readouterr().out
    assert set(ratios) == set(mod.BAD) and all(r > 0 for r in ratios.values())
    assert "unknown --method: " in out and "x --help (no torch)" in out and "imports torch" not in out
