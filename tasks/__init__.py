"""Task plugins: data, partitions, model + layer map, evaluation. Each file registers its
tasks with ``TASKS.register``; the registry imports them the first time it is read."""

from fedbench.registry import Registry

TASKS: Registry = Registry("task", group="fedbench.tasks", base="fedbench.tasks.base:Task", package=__name__)
