"""The package version (its own module: code that records it imports nothing else)."""

__version__ = "0.1.0"
