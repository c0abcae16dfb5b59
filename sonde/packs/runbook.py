"""Runbooks: which probes answer "is something wrong with X", and how readings become findings.

A runbook belongs to a pack and names a category (``system``, ``postgres``,
...). Each step runs one probe and hands its reading (the result dict) to
an evaluator that returns findings. Evaluators compare readings against the
pack's threshold table, so thresholds are data that tests can pin down.

Runbooks are pure: the hub runs the probes on agents and calls
`Runbook.evaluate` with what came back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Threshold:
    """Warn at ``warning``, escalate at ``critical``; ``above`` says which way is bad."""

    warning: float
    critical: float
    above: bool = True
    unit: str = ""

    def severity(self, value: float | None) -> Severity | None:
        if value is None:
            return None
        if self.above:
            if value >= self.critical:
                return "critical"
            return "warning" if value >= self.warning else None
        if value <= self.critical:
            return "critical"
        return "warning" if value <= self.warning else None


@dataclass(frozen=True)
class Finding:
    severity: Severity
    title: str
    detail: str
    probe: str

    def sort_key(self) -> tuple[int, str]:
        return SEVERITY_ORDER[self.severity], self.title


Reading = Mapping[str, Any]
Evaluator = Callable[[Reading], list[Finding]]


@dataclass(frozen=True)
class RunbookStep:
    probe: str
    evaluate: Evaluator
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Runbook:
    category: str
    description: str
    steps: tuple[RunbookStep, ...]

    @property
    def probes(self) -> list[str]:
        return [step.probe for step in self.steps]

    def evaluate(self, readings: Mapping[str, Reading]) -> list[Finding]:
        """Findings from the readings that came back (missing probes are skipped)."""
        found: list[Finding] = []
        for step in self.steps:
            reading = readings.get(step.probe)
            if reading is not None:
                found.extend(step.evaluate(reading))
        return sorted(found, key=Finding.sort_key)


def check(threshold: Threshold, value: float | None, probe: str, title: str, detail: str) -> list[Finding]:
    """One finding when ``value`` crosses ``threshold``: ``{value}`` in ``title`` and ``detail``
    is replaced by it, and nothing else is read in them, so a name they quote (a replica's
    application_name, a mount point, a process) may hold braces."""
    severity = threshold.severity(value)
    if severity is None:
        return []
    shown = f"{value:g}{threshold.unit}" if isinstance(value, int | float) else str(value)
    return [Finding(severity, title.replace("{value}", shown), detail.replace("{value}", shown), probe)]
