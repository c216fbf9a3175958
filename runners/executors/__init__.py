"""Where and how clients train: the one client step, the worker, and the local, packed and Ray executors."""
