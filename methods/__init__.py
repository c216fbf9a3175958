"""Federated PEFT methods. Each file registers its methods with ``METHODS.register``."""

from fedbench.registry import Registry, import_submodules

METHODS: Registry = Registry("method", group="fedbench.methods", base="fedbench.methods.base:Method")

import_submodules(__name__)
