"""``fedbench list`` caches its output keyed by the code and the plugins: a broken plugin is
named in its warning on every call (the cached listing replays it), and a plugin whose own
source changes (fixed, broken) makes a new listing, not the stale one. Run as processes, as
a user runs it: an installed plugin is a ``.dist-info`` on ``PYTHONPATH``."""

import os
import subprocess
import sys


def _list(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "plug"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env.pop("FEDBENCH_NO_LIST_CACHE", None)
    p = subprocess.run([sys.executable, "-m", "fedbench", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr


def test_a_broken_plugin_is_named_every_time_and_a_fixed_one_is_listed(tmp_path):
    dist = tmp_path / "plug" / "advplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: advplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedbench.methods]\nadv_method = adv_plugin:Good\n")
    module = tmp_path / "plug" / "adv_plugin.py"
    module.write_text("import sys\nsys.exit(3)\n")
    for _ in range(2):  # built, then from the cache
        out, err = _list(tmp_path)
        assert "method plugin 'adv_method' (adv_plugin:Good) could not be loaded: it called sys.exit(3)" in err
        assert "adv_method" not in out
    assert len(list((tmp_path / "cache" / "fedbench").glob("list-*.json"))) == 1
    module.write_text("from fedbench.methods.baselines import FedAvg\n\n\nclass Good(FedAvg):\n"
                      "    '''a plugin method, fixed'''\n")
    out, err = _list(tmp_path)
    assert "adv_method" in out and "could not be loaded" not in err
