"""Memory probes: RAM, swap, and the processes the kernel's OOM killer killed.

/proc/vmstat's ``oom_kill`` counts OOM kills since boot (every one: the whole
machine's and each memory cgroup's) but not when. Only when it is not 0, and has moved
since the last reading (`KillsRead`), does the probe read the kernel log (``dmesg --level=emerg,alert,crit,err``: the "Killed
process" lines are errors) for the last kills, each with how long ago it was,
measured on the kernel's own clock (seconds since boot, as dmesg stamps them) so
no wall clock or other machine's clock enters the sum.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
from pydantic import Field

from sonde.packs.base import NoParams, ProbeUnavailable, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.kernel import KernelMessage, Level, read_kernel_log

VMSTAT = Path("/proc/vmstat")
OOM_LEVELS: tuple[Level, ...] = ("emerg", "alert", "crit", "err")
OOM_KILLS_LISTED = 10
# "Out of memory: Killed process 77 (java) total-vm:..." (the whole machine),
# "Memory cgroup out of memory: Killed process 6104 (python3) ..." (a cgroup's limit);
# before Linux 5.0: "... Kill process 78 (old) score 900 or sacrifice child".
OOM_KILL_LINE = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory)(?: \([^)]*\))?: "
    r"Kill(?:ed)? process (?P<pid>\d+) \((?P<process>.*?)\)(?= |$)"
)


class OomKill(Result):
    pid: int
    process: str = Field(description="The killed process's name (its comm, at most 15 characters).")
    memory_cgroup: bool = Field(
        description="True when a memory cgroup's limit ran out (a container's or a service's "
        "MemoryMax=), false when the whole machine's memory did."
    )
    seconds_since_boot: float
    seconds_ago: float = Field(description="How long before this reading, on the kernel's clock.")
    time: str | None = Field(description="ISO 8601 UTC, from the boot time and the kernel's timestamp.")


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
    oom_kills_since_boot: int | None = Field(
        description="/proc/vmstat oom_kill: processes the OOM killer killed since boot, for the whole "
        "machine or a memory cgroup; null where the kernel does not count them (before Linux 4.13)."
    )
    oom_kills: list[OomKill] | None = Field(
        description=f"The last OOM kills in the kernel log (at most {OOM_KILLS_LISTED}, newest last); "
        "empty when oom_kills_since_boot is 0 or when the kills' lines have left the kernel log "
        "(oom_kills_note says so), null when the kernel log could not be read."
    )
    oom_kills_unreadable: str | None = Field(
        description="Why the kernel log could not be read (dmesg needs CAP_SYSLOG where "
        "kernel.dmesg_restrict=1), else null."
    )
    oom_kills_note: str | None = Field(
        default=None,
        description="Set when kills were counted since boot but none is in the kernel log any more.",
    )


def oom_kill_count(vmstat: str) -> int | None:
    """The ``oom_kill`` counter of /proc/vmstat's text, None when it has none."""
    for line in vmstat.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return None


def oom_kills_in(
    messages: list[KernelMessage], now_since_boot_s: float, limit: int = OOM_KILLS_LISTED
) -> list[OomKill]:
    """The last ``limit`` OOM kills in ``messages``, newest last, timed against ``now_since_boot_s``."""
    kills = []
    for message in messages:
        match = OOM_KILL_LINE.search(message.message)
        if match is None:
            continue
        kills.append(
            OomKill(
                pid=int(match["pid"]),
                process=match["process"],
                memory_cgroup=match["scope"].startswith("Memory cgroup"),
                seconds_since_boot=message.seconds_since_boot,
                seconds_ago=round(max(0.0, now_since_boot_s - message.seconds_since_boot), 1),
                time=message.time,
            )
        )
    return kills[-limit:]


def _oom_kill_counter() -> int | None:
    try:
        return oom_kill_count(VMSTAT.read_text())
    except FileNotFoundError:  # no /proc mounted
        return None


class KillsRead:
    """The last reading of the kernel log's OOM kills, and the ``oom_kill`` count it was made at:
    the log is read again (a dmesg run) only when the count has moved, not on every memory
    reading of a machine that had a kill once (the benchmarks read memory 50 times a second)."""

    def __init__(self) -> None:
        self.count: int | None = None
        self.kills: list[OomKill] | None = None
        self.unreadable: str | None = None

    async def recent(
        self, ctx: ProbeContext, since_boot: int | None
    ) -> tuple[list[OomKill] | None, str | None]:
        if since_boot == 0:
            return [], None
        # dmesg stamps messages with the kernel's clock, which like CLOCK_MONOTONIC stops in suspend
        now = time.clock_gettime(time.CLOCK_MONOTONIC)
        if since_boot is None or since_boot != self.count:
            try:
                log = await read_kernel_log(ctx, OOM_LEVELS)
            except (PermissionError, ProbeUnavailable) as exc:
                self.kills, self.unreadable = None, str(exc)
            else:
                self.kills, self.unreadable = oom_kills_in(log.messages, now), None
            self.count = since_boot
        if self.kills is None:
            return None, self.unreadable
        return [kill.model_copy(update={"seconds_ago": _ago(now, kill)}) for kill in self.kills], None


def _ago(now_since_boot_s: float, kill: OomKill) -> float:
    return round(max(0.0, now_since_boot_s - kill.seconds_since_boot), 1)


@PACK.probe(
    "system.memory.usage",
    f"""RAM and swap of the machine in bytes, with percent used and percent available; and
    the OOM killer: how many processes it killed since boot (/proc/vmstat oom_kill) and,
    when that is not 0, the last {OOM_KILLS_LISTED} kills in the kernel log, each with pid, process name,
    whether a memory cgroup's limit or the whole machine ran out, and how many seconds ago
    (reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict=1; without it the
    kills are null and oom_kills_unreadable says why). Use it when a machine is slow,
    swapping or killing processes (OOM).""",
    timeout_s=10,
)
async def memory_usage(ctx: ProbeContext, params: NoParams) -> MemoryUsage:
    ram = psutil.virtual_memory()
    swap = psutil.swap_memory()
    since_boot = _oom_kill_counter()
    kills, unreadable = await ctx.remembered.get("system.memory.oom_kills", KillsRead).recent(ctx, since_boot)
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
        oom_kills_since_boot=since_boot,
        oom_kills=kills,
        oom_kills_unreadable=unreadable,
        oom_kills_note=kills_gone_note(since_boot, kills),
    )


def kills_gone_note(since_boot: int | None, kills: list[OomKill] | None) -> str | None:
    """What an empty list of kills means when the kernel counted some: their lines are gone."""
    if not since_boot or kills != []:
        return None
    return (
        f"{since_boot} OOM kill(s) counted since boot, but none is in the kernel log any more: newer "
        "messages have pushed them out of its ring buffer (see /var/log/kern.log or the journal, "
        "`journalctl -k`, where they are kept)"
    )
