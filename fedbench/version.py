"""The package version (its own module: code that records it imports nothing else)."""

__version__ = "0.2.0"
#: The suite version a run id hashes (:attr:`fedbench.runners.core.spec.RunSpec.run_id`): frozen at
#: the version run ids were introduced with, so a release renames no finished run. A change
#: that gives a method's runs other results bumps that method's ``Method.version`` instead.
RUN_ID_VERSION = "0.1.0"
