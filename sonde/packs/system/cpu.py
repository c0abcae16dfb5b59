"""CPU load and utilisation.

Utilisation is measured from two samples of the kernel's CPU time counters taken
``interval_s`` apart, with `trio.sleep` in between: the wait is cancellable and no
state is shared with other callers (unlike ``psutil.cpu_percent(interval=None)``).
An interval of 0 gives the average since boot. The shares of user, system, iowait
and steal time come from the same two samples. Pressure (PSI) is the kernel's own
running average, read once from /proc/pressure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import psutil
import trio
from pydantic import Field, field_validator

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

# Idle time is idle plus time waiting for I/O; guest time is already counted in
# user and nice, so it is left out of the total (as psutil and top do).
IDLE_FIELDS = ("idle", "iowait")
GUEST_FIELDS = ("guest", "guest_nice")
# the named shares of the elapsed time: user includes nice (and guest), system the interrupts
SHARE_FIELDS = {
    "user_percent": ("user", "nice"),
    "system_percent": ("system", "irq", "softirq"),
    "iowait_percent": ("iowait",),
    "steal_percent": ("steal",),
}
PRESSURE_DIR = Path("/proc/pressure")
PRESSURE_RESOURCES = ("cpu", "memory", "io")
PRESSURE_SOME = re.compile(r"^some avg10=(?P<avg10>[0-9.]+) avg60=(?P<avg60>[0-9.]+)", re.MULTILINE)
CpuTimes = Mapping[str, float]


class CpuUsageParams(Params):
    interval_s: float = Field(
        default=0.5,
        ge=0.0,
        le=5.0,
        strict=True,
        description="Sampling window in seconds; 0 = average since boot.",
    )

    @field_validator("interval_s")
    @classmethod
    def _no_negative_zero(cls, value: float) -> float:
        return value + 0.0  # -0.0 passes ge=0.0, and would be echoed as "-0.0"


class PressureStall(Result):
    some_avg10: float = Field(description="Percent of the last 10 s some task waited for the resource.")
    some_avg60: float = Field(description="The same over the last 60 s.")


class Pressure(Result):
    cpu: PressureStall | None
    memory: PressureStall | None
    io: PressureStall | None


class CpuUsage(Result):
    load_1m: float
    load_5m: float
    load_15m: float
    load_per_cpu: float | None
    percent: float = Field(
        description="Percent busy: everything but idle and iowait, so steal (time a hypervisor gave "
        "to other guests) counts as busy and waiting for I/O does not."
    )
    user_percent: float = Field(description="User time, nice included.")
    system_percent: float = Field(description="Kernel time, interrupts included.")
    iowait_percent: float = Field(description="Idle with I/O outstanding: not in `percent`.")
    steal_percent: float = Field(description="Taken by the hypervisor for other guests: in `percent`.")
    per_cpu_percent: list[float]
    pressure: Pressure = Field(
        description="PSI 'some' averages from /proc/pressure; a resource is null where the kernel "
        "has no PSI (before 4.20, or booted with psi=0) or its file cannot be read."
    )
    logical_count: int | None
    physical_count: int | None
    interval_s: float


def _total_and_idle(times: CpuTimes) -> tuple[float, float]:
    total = sum(value for key, value in times.items() if key not in GUEST_FIELDS)
    idle = sum(times.get(key, 0.0) for key in IDLE_FIELDS)
    return total, idle


def busy_percent(before: CpuTimes | None, after: CpuTimes) -> float:
    """Percent of time busy between two CPU time samples (``before=None``: since boot)."""
    total_after, idle_after = _total_and_idle(after)
    total_before, idle_before = _total_and_idle(before) if before is not None else (0.0, 0.0)
    elapsed = total_after - total_before
    if elapsed <= 0:
        return 0.0
    busy = elapsed - (idle_after - idle_before)
    return round(min(100.0, max(0.0, busy * 100 / elapsed)), 1)


def time_shares(before: CpuTimes | None, after: CpuTimes) -> dict[str, float]:
    """`busy_percent` as ``percent`` plus the user, system, iowait and steal shares of the same time."""
    total_after, _ = _total_and_idle(after)
    elapsed = total_after - (_total_and_idle(before)[0] if before is not None else 0.0)
    shares = {"percent": busy_percent(before, after)}
    for name, fields in SHARE_FIELDS.items():
        spent = sum(after.get(key, 0.0) - (before or {}).get(key, 0.0) for key in fields)
        shares[name] = round(min(100.0, max(0.0, spent * 100 / elapsed)), 1) if elapsed > 0 else 0.0
    return shares


def parse_pressure(text: str) -> dict[str, float] | None:
    """The ``some`` averages of a /proc/pressure file, None when it has no such line."""
    match = PRESSURE_SOME.search(text)
    if match is None:
        return None
    return {"some_avg10": float(match["avg10"]), "some_avg60": float(match["avg60"])}


def _pressure() -> Pressure:
    found: dict[str, PressureStall | None] = {}
    for resource in PRESSURE_RESOURCES:
        try:
            averages = parse_pressure((PRESSURE_DIR / resource).read_text())
        except OSError:  # no PSI in this kernel, or (psi=0) the file refuses to be read
            averages = None
        found[resource] = PressureStall(**averages) if averages is not None else None
    return Pressure(**found)


def _sample() -> tuple[CpuTimes, list[CpuTimes]]:
    total: CpuTimes = psutil.cpu_times()._asdict()
    per_cpu: list[CpuTimes] = [times._asdict() for times in psutil.cpu_times(percpu=True)]
    return total, per_cpu


async def _measure(interval_s: float) -> tuple[dict[str, float], list[float]]:
    total_before: CpuTimes | None = None
    per_cpu_before: list[CpuTimes] | None = None
    if interval_s > 0:
        total_before, per_cpu_before = _sample()
        await trio.sleep(interval_s)
    total_after, per_cpu_after = _sample()
    befores: list[CpuTimes | None] = [*per_cpu_before] if per_cpu_before else [None] * len(per_cpu_after)
    pairs = zip(befores, per_cpu_after, strict=False)  # a CPU may go offline between samples
    return time_shares(total_before, total_after), [busy_percent(b, a) for b, a in pairs]


@PACK.probe(
    "system.cpu.usage",
    """CPU load and utilisation: load averages over 1, 5 and 15 minutes, the 1-minute load
    per logical CPU (Linux counts tasks runnable and tasks in uninterruptible sleep, state D,
    most often blocked on a disk or NFS: above 1.0 with low percent busy means waiting on I/O,
    not on CPU), total and per-CPU
    percent busy measured over `interval_s` seconds (0 = average since boot; busy counts
    steal and leaves out iowait), the user, system, iowait and steal percents of the same
    time, the logical and physical CPU counts, and pressure: the PSI 'some' avg10/avg60 of
    cpu, memory and io (each null where /proc/pressure lacks it). Use it when a machine is
    slow or a service lags; high iowait or io pressure points at the disks, high steal at
    the hypervisor.""",
    timeout_s=10,
)
async def cpu_usage(ctx: ProbeContext, params: CpuUsageParams) -> CpuUsage:
    shares, per_cpu = await _measure(params.interval_s)
    load_1m, load_5m, load_15m = os.getloadavg()
    logical = psutil.cpu_count(logical=True)
    return CpuUsage(
        load_1m=round(load_1m, 2),
        load_5m=round(load_5m, 2),
        load_15m=round(load_15m, 2),
        load_per_cpu=round(load_1m / logical, 2) if logical else None,
        **shares,
        per_cpu_percent=per_cpu,
        pressure=_pressure(),
        logical_count=logical,
        physical_count=psutil.cpu_count(logical=False),
        interval_s=params.interval_s,
    )
