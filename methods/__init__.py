"""Federated PEFT methods. Each file registers its methods with ``METHODS.register``; the
registry imports them the first time it is read (importing this package imports none)."""

from fedbench.registry import Registry

METHODS: Registry = Registry("method", group="fedbench.methods", base="fedbench.methods.base:Method",
                               package=__name__)
