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
    code = ("import io, contextlib, json, sys; from fedbench.runners.cli import main; "
            "buf = io.StringIO(); contextlib.redirect_stdout(buf).__enter__(); main(['list', '--fields']); "
            f"sys.stderr.write(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(p.stderr.strip().splitlines()[-1]) == []
