"""The system runbook's thresholds, on recorded readings."""

from __future__ import annotations

from typing import Any

import pytest

from sonde.packs.runbook import Threshold
from sonde.packs.system.runbook import RUNBOOK, THRESHOLDS


def disk(percent: float, inodes: float | None = 3.0, mount: str = "/") -> dict[str, Any]:
    return {
        "filesystems": [
            {
                "device": "/dev/vda",
                "mountpoint": mount,
                "fstype": "ext4",
                "total_bytes": 100,
                "used_bytes": int(percent),
                "free_bytes": 100 - int(percent),
                "percent_used": percent,
                "inodes_total": 1000,
                "inodes_used": 30,
                "inodes_percent_used": inodes,
            }
        ],
        "unreadable": [],
    }


def memory(available_percent: float, swap_percent: float = 0.0, swap_total: int = 0) -> dict[str, Any]:
    return {
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


def test_threshold_table_is_data() -> None:
    assert THRESHOLDS["disk_used_percent"] == Threshold(warning=80, critical=90, unit="%")
    below = Threshold(warning=10, critical=5, above=False)
    assert [below.severity(v) for v in (11, 10, 6, 5, None)] == [None, "warning", "warning", "critical", None]
