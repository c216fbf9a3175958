"""fedbench: benchmark suite for heterogeneous federated parameter-efficient fine-tuning.

Import names live under ``fedbench.*``: ``fedbench.methods``, ``fedbench.tasks``,
``fedbench.runners`` and ``fedbench.leaderboard`` map to the top-level folders of the
repository (``[tool.setuptools] package-dir`` in ``pyproject.toml``); this folder holds the small shared core (registries,
typed configs, the record schema, errors) and the Python API::

    import fedbench
    rec = fedbench.run("fed_hello", "tiny_text", roc="6:3:1", rounds=3)
    recs = fedbench.sweep("benchmarks/tiny_sweep.yaml")

``fedbench.run``, ``fedbench.sweep`` and ``fedbench.Callback`` are imported on first use,
so ``import fedbench`` stays light.
"""

from fedbench.version import __version__

__all__ = ["Callback", "run", "sweep", "__version__"]


def __getattr__(name: str):
    if name in ("run", "sweep"):
        from fedbench import api

        return getattr(api, name)
    if name == "Callback":
        from fedbench.runners.outputs.callbacks import Callback

        return Callback
    raise AttributeError(f"module 'fedbench' has no attribute {name!r}")
