"""systemd units: the list (type/state filters), the failed ones, and one unit's status.

``systemctl list-units --output=json`` prints ``[{"unit", "load", "active", "sub",
"description"}, ...]``; a systemctl too old for JSON there prints its plain table
instead (``--plain --no-legend``), which `parse_unit_list` also reads.
``systemctl show`` prints ``Key=Value`` lines; unset numbers read ``[not set]`` or
2^64-1, both null here. Times come from the ``...Monotonic`` properties (µs since
boot) so no time-zone text has to be parsed.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import psutil
from pydantic import Field

from sonde.packs.base import Params, ProbeUnavailable, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system.info import iso_utc
from sonde.packs.systemd import PACK, require_systemd
from sonde.protocol.names import worded

UNIT_PATTERN = worded(
    r"^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]{0,254}$",
    "a unit name such as nginx.service: 1 to 255 letters, digits, ':', '_', '.', '@', '\\' or '-', "
    "not starting with '-'",
)
UINT64_MAX = 2**64 - 1
STATE_MARKS = "\u25cf*\u00d7 "  # the dot, star and cross systemctl puts before units in bad states
UnitName = Annotated[
    str, Field(pattern=UNIT_PATTERN, strict=True, description="Unit name, e.g. nginx.service.")
]
UnitType = Literal[
    "service",
    "socket",
    "timer",
    "mount",
    "target",
    "path",
    "slice",
    "scope",
    "automount",
    "swap",
    "device",
    "all",
]
UnitState = Literal[
    "all", "active", "inactive", "failed", "activating", "deactivating", "running", "exited", "dead"
]
SHOW_PROPERTIES = (
    "Id",
    "Description",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "FragmentPath",
    "Result",
    "MainPID",
    "ExecMainStatus",
    "NRestarts",
    "Restart",
    "MemoryCurrent",
    "TasksCurrent",
    "CPUUsageNSec",
    "ActiveEnterTimestampMonotonic",
    "InactiveEnterTimestampMonotonic",
    "StateChangeTimestampMonotonic",
)


class UnitsParams(Params):
    type: UnitType = "service"
    state: UnitState = "all"
    limit: int = Field(default=200, ge=1, le=2000, strict=True, description="At most this many units.")


class Unit(Result):
    unit: str
    load: str
    active: str
    sub: str
    description: str


class Units(Result):
    total: int
    counts_by_active: dict[str, int]
    units: list[Unit]
    truncated: bool


def parse_unit_list(text: str) -> list[Unit]:
    """``systemctl list-units`` output, JSON or the plain table."""
    if text.lstrip().startswith("["):
        return [
            Unit(
                unit=row.get("unit", ""),
                load=row.get("load", ""),
                active=row.get("active", ""),
                sub=row.get("sub", ""),
                description=row.get("description", ""),
            )
            for row in json.loads(text)
        ]
    units = []
    for line in text.splitlines():
        fields = line.lstrip(STATE_MARKS).split(None, 4)
        if len(fields) >= 4:
            units.append(
                Unit(
                    unit=fields[0],
                    load=fields[1],
                    active=fields[2],
                    sub=fields[3],
                    description=(fields[4:] or [""])[0],
                )
            )
    return units


def _units(found: list[Unit], limit: int) -> Units:
    counts: dict[str, int] = {}
    for unit in found:
        counts[unit.active] = counts.get(unit.active, 0) + 1
    return Units(
        total=len(found),
        counts_by_active=dict(sorted(counts.items())),
        units=found[:limit],
        truncated=len(found) > limit,
    )


async def list_units(ctx: ProbeContext, unit_type: UnitType, state: UnitState) -> list[Unit]:
    require_systemd()
    argv = ["systemctl", "list-units", "--all", "--no-pager", "--plain", "--no-legend", "--output=json"]
    if unit_type != "all":
        argv.append(f"--type={unit_type}")
    if state != "all":
        argv.append(f"--state={state}")
    output = await ctx.run(argv)
    if output.returncode != 0:
        raise ProbeUnavailable(f"systemctl list-units failed: {output.stderr.strip()[:300]}")
    return parse_unit_list(output.stdout)


@PACK.probe(
    "systemd.units.list",
    """systemd units of one `type` (default service) in one `state` (default all): unit name,
    load state, active state, sub state and description, with counts per active state.
    Use it for 'which services run here' or 'is anything inactive that should run'.""",
    timeout_s=15,
)
async def units_list(ctx: ProbeContext, params: UnitsParams) -> Units:
    return _units(await list_units(ctx, params.type, params.state), params.limit)


class FailedParams(Params):
    limit: int = Field(default=100, ge=1, le=1000, strict=True, description="At most this many units.")


@PACK.probe(
    "systemd.units.failed",
    """Units of any type in the failed state: name, load/active/sub state and description.
    Empty when all is well. Follow up with systemd.unit.status and systemd.journal.query.""",
    timeout_s=15,
)
async def units_failed(ctx: ProbeContext, params: FailedParams) -> Units:
    return _units(await list_units(ctx, "all", "failed"), params.limit)


class StatusParams(Params):
    unit: UnitName


class UnitStatus(Result):
    unit: str
    description: str | None
    load_state: str | None
    active_state: str | None
    sub_state: str | None
    unit_file_state: str | None
    fragment_path: str | None
    result: str | None
    main_pid: int | None
    exec_main_status: int | None
    restarts: int | None
    restart_policy: str | None
    memory_bytes: int | None
    tasks: int | None
    cpu_seconds: float | None
    active_since: str | None
    inactive_since: str | None
    state_changed: str | None


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` ``Key=Value`` lines as a dict (the first ``=`` splits)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value
    return fields


def _number(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    number = int(value)
    return None if number == UINT64_MAX else number


def _since(value: str | None, boot_time: float) -> str | None:
    micros = _number(value)
    return iso_utc(boot_time + micros / 1e6) if micros else None


def unit_status(fields: dict[str, str], boot_time: float) -> UnitStatus:
    """A `UnitStatus` from `parse_show` output; ``boot_time`` anchors the monotonic stamps."""
    cpu_ns = _number(fields.get("CPUUsageNSec"))
    main_pid = _number(fields.get("MainPID"))
    return UnitStatus(
        unit=fields.get("Id", ""),
        description=fields.get("Description") or None,
        load_state=fields.get("LoadState") or None,
        active_state=fields.get("ActiveState") or None,
        sub_state=fields.get("SubState") or None,
        unit_file_state=fields.get("UnitFileState") or None,
        fragment_path=fields.get("FragmentPath") or None,
        result=fields.get("Result") or None,
        main_pid=main_pid or None,
        exec_main_status=_number(fields.get("ExecMainStatus")),
        restarts=_number(fields.get("NRestarts")),
        restart_policy=fields.get("Restart") or None,
        memory_bytes=_number(fields.get("MemoryCurrent")),
        tasks=_number(fields.get("TasksCurrent")),
        cpu_seconds=round(cpu_ns / 1e9, 3) if cpu_ns is not None else None,
        active_since=_since(fields.get("ActiveEnterTimestampMonotonic"), boot_time),
        inactive_since=_since(fields.get("InactiveEnterTimestampMonotonic"), boot_time),
        state_changed=_since(fields.get("StateChangeTimestampMonotonic"), boot_time),
    )


@PACK.probe(
    "systemd.unit.status",
    """One unit's status: load/active/sub state, unit file state (enabled/disabled), unit
    file path, last result, main PID, exit status, restart count and policy, current memory
    in bytes, tasks, CPU seconds used, and since when it is active/inactive (ISO 8601 UTC).
    A unit that does not exist comes back with load_state 'not-found'.""",
    timeout_s=10,
)
async def unit_status_probe(ctx: ProbeContext, params: StatusParams) -> UnitStatus:
    require_systemd()
    argv = ["systemctl", "show", "--no-pager", "--property=" + ",".join(SHOW_PROPERTIES), "--", params.unit]
    output = await ctx.run(argv)
    if output.returncode != 0:
        raise ProbeUnavailable(f"systemctl show failed: {output.stderr.strip()[:300]}")
    return unit_status(parse_show(output.stdout), psutil.boot_time())
