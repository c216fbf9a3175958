"""fedbench: benchmark suite for heterogeneous federated parameter-efficient fine-tuning.

Import names live under ``fedbench.*``: ``fedbench.methods``, ``fedbench.tasks``,
``fedbench.runners`` and ``fedbench.leaderboard`` map to the top-level folders of the
repository (see ``pyproject.toml``); this folder holds the small shared core
(registries, typed configs, errors).
"""

__version__ = "0.1.0"

# In a source checkout the subpackages are the repository's top-level folders
# (methods/, tasks/, runners/, leaderboard/). An editable install maps them through an
# import hook that sits behind the plain path finder, so when the checkout itself is on
# sys.path (running from the repo root, as pytest does) we add the root to this
# package's search path; an installed wheel has them inside fedbench/ and skips this.
import os as _os

_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(_os.path.join(_root, "methods")):
    __path__.append(_root)  # type: ignore[name-defined]
del _os, _root
