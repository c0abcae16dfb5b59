"""Sonde: read-only, structured probes of a fleet of machines for AI assistants."""

__version__ = "0.1.0"
