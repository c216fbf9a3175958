"""Federated PEFT methods. Each file registers its methods with ``METHODS.register``."""

from fedbench.registry import Registry, import_submodules

METHODS: Registry = Registry("method")

import_submodules(__name__)
