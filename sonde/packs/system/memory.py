"""Memory probes."""

from __future__ import annotations

import psutil

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK


class MemoryUsage(Result):
    total_bytes: int
    available_bytes: int
    used_bytes: int
    free_bytes: int
    percent_used: float
    available_percent: float
    swap_total_bytes: int
    swap_used_bytes: int
    swap_free_bytes: int
    swap_percent_used: float


@PACK.probe(
    "system.memory.usage",
    """RAM and swap of the machine in bytes, with percent used and percent available.
    Use it when a machine is slow, swapping or killing processes (OOM).""",
    timeout_s=5,
)
async def memory_usage(ctx: ProbeContext, params: NoParams) -> MemoryUsage:
    ram = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return MemoryUsage(
        total_bytes=ram.total,
        available_bytes=ram.available,
        used_bytes=ram.used,
        free_bytes=ram.free,
        percent_used=ram.percent,
        available_percent=round(ram.available * 100 / ram.total, 2) if ram.total else 0.0,
        swap_total_bytes=swap.total,
        swap_used_bytes=swap.used,
        swap_free_bytes=swap.free,
        swap_percent_used=swap.percent,
    )
