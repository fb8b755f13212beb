"""Homing: a chat gateway whose background work reports back where it started."""

__version__ = "0.1.0"
