"""Task plugins: data, partitions, model + layer map, evaluation."""

from fedbench.registry import Registry, import_submodules

TASKS: Registry = Registry("task", group="fedbench.tasks", base="fedbench.tasks.base:Task")

import_submodules(__name__)
