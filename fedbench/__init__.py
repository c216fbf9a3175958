"""fedbench: benchmark suite for heterogeneous federated parameter-efficient fine-tuning.

Import names live under ``fedbench.*``: ``fedbench.methods``, ``fedbench.tasks``,
``fedbench.runners`` and ``fedbench.leaderboard`` map to the top-level folders of the
repository (see ``pyproject.toml``); this folder holds the small shared core
(registries, typed configs, errors).
"""

__version__ = "0.1.0"
