"""Start-up stays cheap: registering the methods and tasks imports no peft, transformers
or timm (they are imported where a model is built or adapted)."""

import json
import subprocess
import sys

HEAVY = ("peft", "transformers", "timm", "torchvision")


def test_registries_import_no_heavy_libraries():
    code = ("import json, sys; import fedbench.methods, fedbench.tasks; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


def test_cli_list_imports_no_heavy_libraries():
    code = ("import io, contextlib, json, sys; from fedbench.runners.cli.cli import main; "
            "buf = io.StringIO(); contextlib.redirect_stdout(buf).__enter__(); main(['list', '--fields']); "
            f"sys.stderr.write(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(p.stderr.strip().splitlines()[-1]) == []


def test_list_from_cache_is_the_same_and_skips_torch(tmp_path):
    """`fedbench list` keeps its listing per exact source (hash of paths, sizes, mtimes):
    the second call prints the same without importing torch."""
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = ("import sys; from fedbench.runners.cli.cli import main; main(['list', '--fields']); "
            "sys.stderr.write('torch' if 'torch' in sys.modules else 'no torch')")

    def run(**extra):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**env, **extra})
        return p.stdout, p.stderr.strip().splitlines()[-1]

    fresh, torch_fresh = run(FEDBENCH_NO_LIST_CACHE="1")
    cold, _ = run()
    warm, torch_warm = run()
    assert fresh == cold == warm and "fedavg" in warm and "lora_r = " in warm
    assert torch_fresh == "torch" and torch_warm == "no torch"
    assert len(list((tmp_path / "fedbench").glob("list-*.json"))) == 1
