"""A third-party fedbench plugin, as a user's own package would be: one method
(:mod:`.methods`) and one task (:mod:`.tasks`), registered through the entry points of its
``pyproject.toml``, no edit of fedbench itself."""
