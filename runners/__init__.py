"""The run core and its front door: ``cli`` (commands), ``core`` (a run from spec to state),
``executors`` (where and how clients train), ``cost`` (meters), ``budget`` (device planning),
``outputs`` (records, checkpoints, callbacks)."""
