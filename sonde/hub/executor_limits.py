"""Bounds on the hub's fan-out work."""

FANOUT_LIMIT = 256  # probes in flight at once for one health_check or diagnose call
