"""`sonde packs list`: the installed packs, whether each applies here, and their probes.

Text is an aligned table of packs followed by each pack's probes; ``--json``
prints one JSON document:

    {"ok": true, "apiVersion": "1.0.0", "command": "packs list",
     "packs": [{"name", "version", "description", "detected", "reason",
                "groupsNeeded": [...], "probes": [{"name", "description"}]}]}
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sonde.agent.manifest import pack_detection
from sonde.packs.base import Pack
from sonde.packs.registry import load_packs
from sonde.protocol.serve_lines import API_VERSION

PACK_COLUMNS = ("PACK", "VERSION", "DETECTED", "GROUPS", "REASON")


@dataclass(frozen=True)
class ProbeLine:
    name: str
    summary: str


@dataclass(frozen=True)
class PackReport:
    """What `sonde packs list` says about one pack."""

    name: str
    version: str
    description: str
    detected: bool
    reason: str
    groups_needed: tuple[str, ...]
    probes: tuple[ProbeLine, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "detected": self.detected,
            "reason": self.reason,
            "groupsNeeded": list(self.groups_needed),
            "probes": [{"name": p.name, "description": p.summary} for p in self.probes],
        }


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def report_pack(pack: Pack) -> PackReport:
    """Detection, groups and probe summaries of ``pack``."""
    detection = pack_detection(pack)
    probes = tuple(
        ProbeLine(name, first_line(spec.description)) for name, spec in sorted(pack.probes.items())
    )
    return PackReport(
        name=pack.name,
        version=pack.version,
        description=pack.description,
        detected=detection.detected,
        reason=detection.reason,
        groups_needed=tuple(sorted(pack.groups_needed())),
        probes=probes,
    )


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """``rows`` as lines with every column but the last padded to its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)] + [row[-1]]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def render_text(reports: Sequence[PackReport]) -> str:
    """The human-readable table."""
    if not reports:
        return "No packs installed (no entry points in the 'sonde.packs' group)."
    table = [PACK_COLUMNS] + [
        (r.name, r.version, "yes" if r.detected else "no", ",".join(r.groups_needed) or "-", r.reason)
        for r in reports
    ]
    lines = aligned(table)
    for report in reports:
        count = len(report.probes)
        lines += ["", f"{report.name}: {count} probe{'' if count == 1 else 's'}"]
        if report.probes:
            lines += aligned([(p.name, p.summary) for p in report.probes], indent="  ")
    return "\n".join(lines)


def render_json(reports: Sequence[PackReport]) -> str:
    """The JSON document (one line)."""
    document = {
        "ok": True,
        "apiVersion": API_VERSION,
        "command": "packs list",
        "packs": [report.to_json() for report in reports],
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def print_packs(as_json: bool) -> int:
    """Print every installed pack (JSON with ``as_json``); returns the exit code 0."""
    reports = [report_pack(pack) for pack in load_packs().packs.values()]
    sys.stdout.write((render_json(reports) if as_json else render_text(reports)) + "\n")
    sys.stdout.flush()
    return 0
