"""A run from its spec to its state: the spec and its checks, the federation, the round loop, the server."""
