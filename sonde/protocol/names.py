"""Patterns of names, and the redaction mark, on the wire: in a module of their own so that packs
can use them without importing the wire models (`sonde serve` never needs those: ~5 MiB, ~50 ms)."""

from __future__ import annotations

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
PROBE_NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){1,4}$"

REDACTED = "[REDACTED]"  # what a secret reads as in anything the agent sends (the scrubber puts it)
