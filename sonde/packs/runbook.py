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

from sonde.echo import as_sentence, clipped

Severity = Literal["critical", "warning", "info"]
# A probe's error codes when its server took no connection (`sonde.packs.base.ServiceRefused`):
# nothing accepts one (down), or it turns new clients away at its connection limit (full).
SERVICE_DOWN = "service_down"
SERVICE_FULL = "service_full"
MALFORMED_CHARS = 200  # of what a step said of a reading it could not read
BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
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
class Failure:
    """A step's probe that answered with an error: its code and message."""

    code: str
    message: str


def outage_findings(category: str, failures: Mapping[str, Failure]) -> list[Finding]:
    """The outage the failed steps tell of, once each: the server down, or full."""
    found: dict[str, Finding] = {}
    for probe, failure in failures.items():
        if failure.code == SERVICE_FULL:
            title = f"The {category} server refuses new connections: its connection limit is reached"
            advice = (
                "Clients are turned away now: find who holds the connections (a leak, a pool sized too big)."
            )
        elif failure.code == SERVICE_DOWN:
            title = f"The {category} server is down: it accepts no connection"
            advice = "Check whether its service runs and what its log says, or whether the agent's config names the wrong host or port."
        else:
            continue
        found.setdefault(
            failure.code, Finding("critical", title, f"{as_sentence(failure.message)} {advice}", probe)
        )
    return list(found.values())


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

    def evaluate(
        self,
        readings: Mapping[str, Reading],
        failures: Mapping[str, Failure] | None = None,
        malformed: dict[str, str] | None = None,
    ) -> list[Finding]:
        """Findings from the readings that came back (missing probes are skipped), and from the
        failures that tell of an outage (the server down or full: `outage_findings`).

        A reading its step cannot read (not of its probe's shape: an agent's bug, or a hostile
        agent's answer) raises, unless ``malformed`` is given: then it is noted there (probe ->
        what went wrong) and the other steps' findings stand."""
        found = outage_findings(self.category, failures or {})
        for step in self.steps:
            reading = readings.get(step.probe)
            if reading is None:
                continue
            try:
                found.extend(step.evaluate(reading))
            except Exception as exc:
                if malformed is None:
                    raise
                malformed[step.probe] = f"{type(exc).__name__}: {clipped(str(exc), MALFORMED_CHARS)}"
        return sorted(found, key=Finding.sort_key)


def worse(*severities: Severity | None) -> Severity | None:
    """The gravest of ``severities`` (None when none is set)."""
    return min((s for s in severities if s is not None), key=SEVERITY_ORDER.__getitem__, default=None)


def check(
    threshold: Threshold,
    value: float | None,
    probe: str,
    title: str,
    detail: str,
    *,
    title_one: str | None = None,
) -> list[Finding]:
    """One finding when ``value`` crosses ``threshold``: ``{value}`` in ``title`` (``title_one``
    for a count of one, where the title counts) and ``detail`` is replaced by it, and nothing
    else is read in them, so a name they quote (a replica's application_name, a mount point,
    a process) may hold braces."""
    severity = threshold.severity(value)
    if severity is None:
        return []
    if value == 1 and title_one is not None:
        title = title_one
    shown = shown_value(value, threshold.unit)
    return [Finding(severity, title.replace("{value}", shown), detail.replace("{value}", shown), probe)]


def human_bytes(count: int | float | None) -> str:
    """``count`` bytes as a person reads them: ``512 B``, ``297.0 KiB``, ``54.7 MiB``."""
    if count is None:
        return "?"
    if abs(count) < 1024:
        return f"{count:g} B"
    value = float(count)
    for unit in BYTE_UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == BYTE_UNITS[-1]:
            break
    return f"{value:.1f} {unit}"


def human_seconds(seconds: float | None) -> str:
    """``seconds`` as a person reads them: ``42 s``, ``5.2 minutes``, ``3.1 hours``, ``4.1 days``;
    ``?`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.1f} days"


def shown_number(value: float) -> str:
    """A figure as a finding gives it: whole numbers whole (never ``2.19588e+08``), others to a
    tenth, small ones to two significant digits."""
    if float(value).is_integer():
        return str(int(value))
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.2g}"


def shown_value(value: object, unit: str) -> str:
    """``value`` with its threshold's ``unit``; bytes in KiB/MiB/GiB."""
    if not isinstance(value, int | float):
        return str(value)
    if unit.strip() == "bytes":
        return human_bytes(value)
    return f"{shown_number(value)}{unit}"
