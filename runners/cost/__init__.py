"""Measured cost: FLOPs, memory, traffic and time of a training step."""
