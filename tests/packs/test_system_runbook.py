"""The system runbook's thresholds, on recorded readings."""

from __future__ import annotations

from typing import Any

import pytest

from sonde.packs.runbook import Threshold, human_bytes
from sonde.packs.system.runbook import RUNBOOK, THRESHOLDS


def disk(
    percent: float,
    inodes: float | None = 3.0,
    mount: str = "/",
    read_only_by: str | None = None,
    fstype: str = "ext4",
) -> dict[str, Any]:
    return {
        "filesystems": [
            {
                "device": "/dev/vda",
                "mountpoint": mount,
                "fstype": fstype,
                "total_bytes": 100,
                "used_bytes": int(percent),
                "free_bytes": 100 - int(percent),
                "percent_used": percent,
                "inodes_total": 1000,
                "inodes_used": 30,
                "inodes_percent_used": inodes,
                "read_only": read_only_by is not None,
                "read_only_by": read_only_by,
            }
        ],
        "unreadable": [],
        "tmpfs_left_out": 0,
    }


def memory(
    available_percent: float,
    swap_percent: float = 0.0,
    swap_total: int = 0,
    oom_kills: list[dict[str, Any]] | None = None,
    oom_since_boot: int | None = 0,
    oom_unreadable: str | None = None,
) -> dict[str, Any]:
    return {
        "oom_kills_since_boot": oom_since_boot,
        "oom_kills": oom_kills if oom_unreadable is None else None,
        "oom_kills_unreadable": oom_unreadable,
        "total_bytes": 1000,
        "available_bytes": int(available_percent * 10),
        "used_bytes": 0,
        "free_bytes": 0,
        "percent_used": 100 - available_percent,
        "available_percent": available_percent,
        "swap_total_bytes": swap_total,
        "swap_used_bytes": 0,
        "swap_free_bytes": 0,
        "swap_percent_used": swap_percent,
    }


def cpu(load_per_cpu: float) -> dict[str, Any]:
    return {"load_1m": load_per_cpu * 2, "load_per_cpu": load_per_cpu, "logical_count": 2}


def severities(readings: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.title) for f in RUNBOOK.evaluate(readings)]


@pytest.mark.parametrize(
    ("percent", "expected"),
    [(79.9, []), (80.0, ["warning"]), (89.9, ["warning"]), (90.0, ["critical"]), (100.0, ["critical"])],
)
def test_disk_thresholds(percent: float, expected: list[str]) -> None:
    found = RUNBOOK.evaluate({"system.disk.usage": disk(percent)})
    assert [f.severity for f in found] == expected
    assert all(f.probe == "system.disk.usage" and "/" in f.title for f in found)


def test_inodes_count_too() -> None:
    found = RUNBOOK.evaluate({"system.disk.usage": disk(10, inodes=95.0, mount="/var")})
    assert [(f.severity, f.title) for f in found] == [
        ("critical", "Filesystem /var has used 95% of its inodes")
    ]


def test_memory_available_is_bad_when_low() -> None:
    assert severities({"system.memory.usage": memory(50)}) == []
    assert severities({"system.memory.usage": memory(9.5)}) == [
        ("warning", "Only 9.5% of memory is available")
    ]
    assert severities({"system.memory.usage": memory(4)}) == [("critical", "Only 4% of memory is available")]


def test_swap_only_when_there_is_swap() -> None:
    assert severities({"system.memory.usage": memory(50, swap_percent=90, swap_total=0)}) == []
    assert severities({"system.memory.usage": memory(50, swap_percent=90, swap_total=100)}) == [
        ("critical", "Swap is 90% used")
    ]


def test_load_per_cpu() -> None:
    assert severities({"system.cpu.usage": cpu(1.9)}) == []
    assert severities({"system.cpu.usage": cpu(2.5)}) == [("warning", "Load average is 2.5 per CPU")]
    assert severities({"system.cpu.usage": cpu(4.0)}) == [("critical", "Load average is 4 per CPU")]


def test_findings_sort_critical_first_and_missing_readings_are_skipped() -> None:
    found = RUNBOOK.evaluate({"system.disk.usage": disk(85), "system.memory.usage": memory(3)})
    assert [f.severity for f in found] == ["critical", "warning"]
    assert RUNBOOK.evaluate({}) == []


def test_byte_counts_read_as_a_person_reads_them() -> None:
    full = disk(99.5)
    full["filesystems"][0].update(free_bytes=304128, total_bytes=57381888)
    [finding] = RUNBOOK.evaluate({"system.disk.usage": full})
    assert finding.detail == "/dev/vda (ext4) on /: 297.0 KiB free of 54.7 MiB."
    low = memory(4)
    low.update(available_bytes=700 * 1024 * 1024, total_bytes=16 * 1024**3)
    [finding] = RUNBOOK.evaluate({"system.memory.usage": low})
    assert finding.detail.startswith("700.0 MiB available of 16.0 GiB; ")


@pytest.mark.parametrize(
    ("count", "unit"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**4, "5.0 TiB")],
)
def test_human_bytes(count: int, unit: str) -> None:
    assert human_bytes(count) == unit


def test_a_read_only_filesystem_is_critical_unless_read_only_is_its_nature() -> None:
    assert severities({"system.disk.usage": disk(10, read_only_by="filesystem", mount="/var")}) == [
        ("critical", "Filesystem /var is read-only")
    ]
    assert severities({"system.disk.usage": disk(10, read_only_by="mount", mount="/srv/config")}) == []
    for nature in ("iso9660", "tmpfs", "erofs"):
        assert severities({"system.disk.usage": disk(10, read_only_by="filesystem", fstype=nature)}) == []


def kill(pid: int, seconds_ago: float, cgroup: bool = True) -> dict[str, Any]:
    return {
        "pid": pid,
        "process": "python3",
        "memory_cgroup": cgroup,
        "seconds_since_boot": 5000.0 - seconds_ago,
        "seconds_ago": seconds_ago,
        "time": "2025-05-01T10:00:00+00:00",
    }


def test_oom_kills_of_the_last_hour() -> None:
    assert severities({"system.memory.usage": memory(50, oom_kills=[kill(1, 3601)], oom_since_boot=1)}) == []
    [one] = RUNBOOK.evaluate(
        {"system.memory.usage": memory(50, oom_kills=[kill(6104, 90)], oom_since_boot=1)}
    )
    assert (one.severity, one.title) == ("warning", "The OOM killer killed 1 process in the last 60 minutes")
    assert "python3 (pid 6104), 90 s ago (2025-05-01T10:00:00+00:00), in a memory cgroup" in one.detail
    assert (
        "(pid 6104), 2.5 minutes ago"
        in RUNBOOK.evaluate(
            {"system.memory.usage": memory(50, oom_kills=[kill(6104, 150)], oom_since_boot=1)}
        )[0].detail
    )
    several = [kill(1, 3601), kill(2, 600, cgroup=False), kill(3, 300), kill(4, 5)]
    [many] = RUNBOOK.evaluate({"system.memory.usage": memory(50, oom_kills=several, oom_since_boot=4)})
    assert (many.severity, many.title) == (
        "critical",
        "The OOM killer killed 3 processes in the last 60 minutes",
    )
    assert "python3 (pid 4), 5 s ago" in many.detail
    assert "(pid 1)" not in many.detail


def test_oom_kills_past_the_listed_ones_may_be_recent_too() -> None:
    listed = [kill(pid, 60.0 * pid) for pid in range(10, 0, -1)]
    [finding] = RUNBOOK.evaluate({"system.memory.usage": memory(50, oom_kills=listed, oom_since_boot=25)})
    assert finding.title == "The OOM killer killed at least 10 processes in the last 60 minutes"
    assert finding.detail.startswith("Newest first: python3 (pid 1), 60 s ago")
    assert "; and 5 more." in finding.detail


def test_braces_in_names_read_as_themselves() -> None:
    odd = kill(7, 10) | {"process": "a{b}{0}"}
    [finding] = RUNBOOK.evaluate({"system.memory.usage": memory(50, oom_kills=[odd], oom_since_boot=1)})
    assert "a{b}{0} (pid 7)" in finding.detail
    usb = disk(95, mount="/media/{usb}", read_only_by="filesystem")
    found = RUNBOOK.evaluate({"system.disk.usage": usb})
    assert [f.title for f in found] == [
        "Filesystem /media/{usb} is 95% full",
        "Filesystem /media/{usb} is read-only",
    ]
    assert found[0].detail == "/dev/vda (ext4) on /media/{usb}: 5 B free of 100 B."


def test_oom_kills_when_the_kernel_log_cannot_be_read() -> None:
    refused = memory(50, oom_since_boot=2, oom_unreadable="needs CAP_SYSLOG")
    [finding] = RUNBOOK.evaluate({"system.memory.usage": refused})
    assert (finding.severity, finding.title) == ("info", "The OOM killer has killed 2 processes since boot")
    assert "needs CAP_SYSLOG" in finding.detail
    assert severities({"system.memory.usage": memory(50, oom_since_boot=None, oom_unreadable="x")}) == []


def test_threshold_table_is_data() -> None:
    assert THRESHOLDS["disk_used_percent"] == Threshold(warning=80, critical=90, unit="%")
    below = Threshold(warning=10, critical=5, above=False)
    assert [below.severity(v) for v in (11, 10, 6, 5, None)] == [None, "warning", "warning", "critical", None]
