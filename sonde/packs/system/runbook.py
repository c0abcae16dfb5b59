"""The `system` category: disks, memory, load, swap. Thresholds are the table below."""

from __future__ import annotations

from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check
from sonde.packs.system import PACK

THRESHOLDS = {
    "disk_used_percent": Threshold(warning=80, critical=90, unit="%"),
    "inodes_used_percent": Threshold(warning=80, critical=90, unit="%"),
    "memory_available_percent": Threshold(warning=10, critical=5, above=False, unit="%"),
    "swap_used_percent": Threshold(warning=50, critical=80, unit="%"),
    "load_per_cpu": Threshold(warning=2, critical=4),
}


def disk_findings(reading: Reading) -> list[Finding]:
    found: list[Finding] = []
    for fs in reading.get("filesystems", []):
        where = fs["mountpoint"]
        found += check(
            THRESHOLDS["disk_used_percent"],
            fs["percent_used"],
            "system.disk.usage",
            f"Filesystem {where} is {{value}} full",
            f"{fs['device']} ({fs['fstype']}) on {where}: {fs['free_bytes']} bytes free of {fs['total_bytes']}.",
        )
        found += check(
            THRESHOLDS["inodes_used_percent"],
            fs.get("inodes_percent_used"),
            "system.disk.usage",
            f"Filesystem {where} has used {{value}} of its inodes",
            f"{fs['device']} on {where}: files cannot be created once inodes run out.",
        )
    return found


def memory_findings(reading: Reading) -> list[Finding]:
    found = check(
        THRESHOLDS["memory_available_percent"],
        reading.get("available_percent"),
        "system.memory.usage",
        "Only {value} of memory is available",
        f"{reading.get('available_bytes')} bytes available of {reading.get('total_bytes')}; "
        "the kernel may start killing processes (OOM).",
    )
    if reading.get("swap_total_bytes"):
        found += check(
            THRESHOLDS["swap_used_percent"],
            reading.get("swap_percent_used"),
            "system.memory.usage",
            "Swap is {value} used",
            "Heavy swap use slows everything down; look at system.processes.top sorted by memory.",
        )
    return found


def load_findings(reading: Reading) -> list[Finding]:
    return check(
        THRESHOLDS["load_per_cpu"],
        reading.get("load_per_cpu"),
        "system.cpu.usage",
        "Load average is {value} per CPU",
        f"1-minute load {reading.get('load_1m')} on "
        f"{reading.get('logical_count')} CPUs; see system.processes.top for who is busy.",
    )


RUNBOOK = Runbook(
    category="system",
    description="Disk space and inodes, memory and swap, and CPU load of the machine.",
    steps=(
        RunbookStep("system.disk.usage", disk_findings),
        RunbookStep("system.memory.usage", memory_findings),
        RunbookStep("system.cpu.usage", load_findings, {"interval_s": 0.2}),
    ),
)
PACK.runbooks[RUNBOOK.category] = RUNBOOK
