"""`sonde packs list`: the installed packs, whether each applies here, and their probes.

Text is an aligned table of packs followed by each pack's probes; ``--json``
prints one JSON document:

    {"ok": true, "apiVersion": "1.0.0", "command": "packs list",
     "packs": [{"name", "version", "description", "detected", "reason",
                "groupsNeeded": [...], "groupsMissing": [...],
                "groupsRootEquivalent": [...],
                "probes": [{"name", "description"}]}]}

``groupsMissing`` are the declared groups the current user is not in, for the
packs that apply here (detected, or named in ``enabledPacks``): the probes that
need them will be refused until the user (or the service's
``SupplementaryGroups=``) has them. ``groupsRootEquivalent`` are the needed groups
whose members are root on this machine in all but name (`ROOT_EQUIVALENT_GROUPS`):
the table says so too, as `sonde service install` does when it grants one.
"""

from __future__ import annotations

import grp
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sonde.agent.config import ConfigError, load_config
from sonde.agent.manifest import pack_detection
from sonde.packs.base import Pack
from sonde.packs.registry import load_packs
from sonde.protocol.serve_lines import API_VERSION

PACK_COLUMNS = ("PACK", "VERSION", "DETECTED", "GROUPS", "REASON")

# Groups that grant root in all but name; an operator must give them knowingly.
ROOT_EQUIVALENT_GROUPS = {
    "docker": "its members can start a privileged container that mounts / (root on this machine)",
}


def root_equivalent_warning(group: str) -> str:
    return f"group {group} is root-equivalent: {ROOT_EQUIVALENT_GROUPS[group]}; grant it knowingly"


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
    groups_missing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "detected": self.detected,
            "reason": self.reason,
            "groupsNeeded": list(self.groups_needed),
            "groupsMissing": list(self.groups_missing),
            "groupsRootEquivalent": [g for g in self.groups_needed if g in ROOT_EQUIVALENT_GROUPS],
            "probes": [{"name": p.name, "description": p.summary} for p in self.probes],
        }


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def report_pack(pack: Pack, member_of: set[str] | None = None, *, enabled: bool = False) -> PackReport:
    """Detection, groups and probe summaries of ``pack``.

    With ``member_of`` (the current user's group names), a pack that applies
    here (detected or ``enabled``) lists the groups it needs that are not among them.
    """
    detection = pack_detection(pack)
    probes = tuple(
        ProbeLine(name, first_line(spec.description)) for name, spec in sorted(pack.probes.items())
    )
    needed = tuple(sorted(pack.groups_needed()))
    applies = detection.detected or enabled
    missing = tuple(g for g in needed if g not in member_of) if member_of is not None and applies else ()
    return PackReport(
        name=pack.name,
        version=pack.version,
        description=pack.description,
        detected=detection.detected,
        reason=detection.reason,
        groups_needed=needed,
        probes=probes,
        groups_missing=missing,
    )


def current_group_names() -> set[str]:
    """The names of the groups this process runs with (effective and supplementary)."""
    names = set()
    for gid in {os.getegid(), *os.getgroups()}:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def describe_missing_group(name: str) -> str:
    try:
        grp.getgrnam(name)
    except KeyError:
        return f"needs group {name} (no such group here)"
    return f"needs group {name} (not a member)"


def enabled_pack_names() -> set[str]:
    """``enabledPacks`` from the agent config; empty when unset, or unusable (said on stderr)."""
    try:
        config = load_config()
    except ConfigError as exc:
        print(
            f"sonde packs list: {exc}; the agent would not start with it (enabledPacks not shown)",
            file=sys.stderr,
        )
        return set()
    return set(config.enabled_packs or ()) if config is not None else set()


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
        lines += [f"  {describe_missing_group(group)}" for group in report.groups_missing]
        lines += [
            f"  warning: {root_equivalent_warning(group)}"
            for group in report.groups_needed
            if group in ROOT_EQUIVALENT_GROUPS
        ]
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
    member_of = None if os.geteuid() == 0 else current_group_names()  # root reads without the groups
    enabled = enabled_pack_names()
    registry = load_packs()
    unknown = sorted(enabled - set(registry.packs))
    if unknown:
        print(
            f"sonde packs list: enabledPacks names packs not installed here: {', '.join(unknown)}",
            file=sys.stderr,
        )
    reports = [report_pack(pack, member_of, enabled=pack.name in enabled) for pack in registry.packs.values()]
    sys.stdout.write((render_json(reports) if as_json else render_text(reports)) + "\n")
    sys.stdout.flush()
    return 0
