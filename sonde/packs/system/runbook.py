"""The `system` category: disks, memory, OOM kills, load, swap. Thresholds are the table below.

Byte counts in findings read as a person reads them (`human_bytes`); the probe
results keep the exact numbers.
"""

from __future__ import annotations

from typing import Any

from sonde.packs.runbook import (
    Finding,
    Reading,
    Runbook,
    RunbookStep,
    Threshold,
    check,
    human_bytes,
    human_seconds,
)
from sonde.packs.system import PACK

THRESHOLDS = {
    "disk_used_percent": Threshold(warning=80, critical=90, unit="%"),
    "inodes_used_percent": Threshold(warning=80, critical=90, unit="%"),
    "memory_available_percent": Threshold(warning=10, critical=5, above=False, unit="%"),
    "swap_used_percent": Threshold(warning=50, critical=80, unit="%"),
    "load_per_cpu": Threshold(warning=2, critical=4),
    "oom_kills_recent": Threshold(warning=1, critical=3),
}
OOM_RECENT_S = 60 * 60  # OOM kills older than this are history, not trouble
OOM_KILLS_NAMED = 5
# filesystems read-only by nature: no finding when they are
READ_ONLY_BY_NATURE = frozenset({"iso9660", "udf", "squashfs", "erofs", "cramfs", "romfs", "tmpfs"})


def disk_findings(reading: Reading) -> list[Finding]:
    found: list[Finding] = []
    for fs in reading.get("filesystems", []):
        where, device = fs["mountpoint"], fs["device"]
        found += check(
            THRESHOLDS["disk_used_percent"],
            fs["percent_used"],
            "system.disk.usage",
            f"Filesystem {where} is {{value}} full",
            f"{device} ({fs['fstype']}) on {where}: "
            f"{human_bytes(fs['free_bytes'])} free of {human_bytes(fs['total_bytes'])}.",
        )
        found += check(
            THRESHOLDS["inodes_used_percent"],
            fs.get("inodes_percent_used"),
            "system.disk.usage",
            f"Filesystem {where} has used {{value}} of its inodes",
            f"{device} on {where}: files cannot be created once inodes run out.",
        )
        found += _read_only_findings(fs)
    return found


def _read_only_findings(fs: Reading) -> list[Finding]:
    # read-only by the mount alone (a ro bind mount) is a choice; by the filesystem it may be errors
    if fs.get("read_only_by") != "filesystem" or fs["fstype"] in READ_ONLY_BY_NATURE:
        return []
    return [
        Finding(
            "critical",
            f"Filesystem {fs['mountpoint']} is read-only",
            f"{fs['device']} ({fs['fstype']}) on {fs['mountpoint']} is mounted read-only: every write there "
            "fails (EROFS). A filesystem that was writable is remounted so by the kernel after I/O or "
            "filesystem errors (errors=remount-ro); look at system.kernel.messages.",
            "system.disk.usage",
        )
    ]


def memory_findings(reading: Reading) -> list[Finding]:
    found = check(
        THRESHOLDS["memory_available_percent"],
        reading.get("available_percent"),
        "system.memory.usage",
        "Only {value} of memory is available",
        f"{human_bytes(reading.get('available_bytes'))} available of {human_bytes(reading.get('total_bytes'))}; "
        "the kernel may start killing processes (OOM).",
    )
    found += oom_findings(reading)
    if reading.get("swap_total_bytes"):
        found += check(
            THRESHOLDS["swap_used_percent"],
            reading.get("swap_percent_used"),
            "system.memory.usage",
            "Swap is {value} used",
            "Heavy swap use slows everything down; look at system.processes.top sorted by memory.",
        )
    return found


def _kill_named(kill: dict[str, Any]) -> str:
    scope = "in a memory cgroup (its limit ran out)" if kill["memory_cgroup"] else "the machine ran out"
    when = f" ({kill['time']})" if kill.get("time") else ""
    return f"{kill['process']} (pid {kill['pid']}), {human_seconds(kill['seconds_ago'])} ago{when}, {scope}"


def oom_findings(reading: Reading) -> list[Finding]:
    """A warning for an OOM kill in the last hour, critical from 3; info when the log says not when."""
    kills = reading.get("oom_kills")
    since_boot = reading.get("oom_kills_since_boot")
    if kills is None:
        if not since_boot:
            return []
        return [
            Finding(
                "info",
                f"The OOM killer has killed {since_boot} process{'es' if since_boot > 1 else ''} since boot",
                f"When is not known: {reading.get('oom_kills_unreadable')}.",
                "system.memory.usage",
            )
        ]
    recent = [kill for kill in kills if kill["seconds_ago"] <= OOM_RECENT_S]
    named = "; ".join(_kill_named(kill) for kill in reversed(recent[-OOM_KILLS_NAMED:]))
    more = f"; and {len(recent) - OOM_KILLS_NAMED} more" if len(recent) > OOM_KILLS_NAMED else ""
    # every kill listed is recent and the kernel counted more: older ones may be recent too
    at_least = "at least " if recent and len(recent) == len(kills) < (since_boot or 0) else ""
    return check(
        THRESHOLDS["oom_kills_recent"],
        len(recent),
        "system.memory.usage",
        f"The OOM killer killed {at_least}{{value}} process{'es' if len(recent) > 1 else ''} "
        f"in the last {OOM_RECENT_S // 60} minutes",
        f"Newest first: {named}{more}. Warning for 1 or 2 kills in {OOM_RECENT_S // 60} minutes, "
        "critical from 3 (memory keeps running out); see system.processes.top sorted by memory.",
    )


def load_findings(reading: Reading) -> list[Finding]:
    return check(
        THRESHOLDS["load_per_cpu"],
        reading.get("load_per_cpu"),
        "system.cpu.usage",
        "Load average is {value} per CPU",
        f"1-minute load {reading.get('load_1m')} on "
        f"{reading.get('logical_count')} CPUs; Linux's load counts tasks waiting on disk or NFS "
        "(state D) as well as runnable ones: see system.processes.top for who is busy, and this "
        "reading's iowait and io pressure for waiting on I/O.",
    )


RUNBOOK = Runbook(
    category="system",
    description="Disk space, inodes and read-only filesystems (tmpfs included), memory, swap and "
    "recent OOM kills, and CPU load of the machine.",
    steps=(
        RunbookStep("system.disk.usage", disk_findings),
        RunbookStep("system.memory.usage", memory_findings),
        RunbookStep("system.cpu.usage", load_findings, {"interval_s": 0.2}),
    ),
)
PACK.runbooks[RUNBOOK.category] = RUNBOOK
