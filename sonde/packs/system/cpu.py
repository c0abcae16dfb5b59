"""CPU load and utilisation.

Utilisation is measured from two samples of the kernel's CPU time counters taken
``interval_s`` apart, with `trio.sleep` in between: the wait is cancellable and no
state is shared with other callers (unlike ``psutil.cpu_percent(interval=None)``).
An interval of 0 gives the average since boot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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


class CpuUsage(Result):
    load_1m: float
    load_5m: float
    load_15m: float
    load_per_cpu: float | None
    percent: float
    per_cpu_percent: list[float]
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


def _sample() -> tuple[CpuTimes, list[CpuTimes]]:
    total: CpuTimes = psutil.cpu_times()._asdict()
    per_cpu: list[CpuTimes] = [times._asdict() for times in psutil.cpu_times(percpu=True)]
    return total, per_cpu


async def _measure(interval_s: float) -> tuple[float, list[float]]:
    total_before: CpuTimes | None = None
    per_cpu_before: list[CpuTimes] | None = None
    if interval_s > 0:
        total_before, per_cpu_before = _sample()
        await trio.sleep(interval_s)
    total_after, per_cpu_after = _sample()
    befores: list[CpuTimes | None] = [*per_cpu_before] if per_cpu_before else [None] * len(per_cpu_after)
    pairs = zip(befores, per_cpu_after, strict=False)  # a CPU may go offline between samples
    return busy_percent(total_before, total_after), [busy_percent(b, a) for b, a in pairs]


@PACK.probe(
    "system.cpu.usage",
    """CPU load and utilisation: load averages over 1, 5 and 15 minutes, the 1-minute load
    per logical CPU (above 1.0 means more runnable tasks than CPUs), total and per-CPU
    percent busy measured over `interval_s` seconds (0 = average since boot), and the
    logical and physical CPU counts. Use it when a machine is slow or a service lags.""",
    timeout_s=10,
)
async def cpu_usage(ctx: ProbeContext, params: CpuUsageParams) -> CpuUsage:
    percent, per_cpu = await _measure(params.interval_s)
    load_1m, load_5m, load_15m = os.getloadavg()
    logical = psutil.cpu_count(logical=True)
    return CpuUsage(
        load_1m=round(load_1m, 2),
        load_5m=round(load_5m, 2),
        load_15m=round(load_15m, 2),
        load_per_cpu=round(load_1m / logical, 2) if logical else None,
        percent=percent,
        per_cpu_percent=per_cpu,
        logical_count=logical,
        physical_count=psutil.cpu_count(logical=False),
        interval_s=params.interval_s,
    )
