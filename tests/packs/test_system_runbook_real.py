"""The system runbook over real probes on real trouble: an OOM kill, a read-only and a full filesystem.

Each test makes the trouble for real (a memory cgroup, a loop-mounted ext4, a
tmpfs) and removes it afterwards; they need root, and skip (fail under CI=true)
without it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Finding
from sonde.packs.system import PACK
from sonde.packs.system.runbook import RUNBOOK
from tests.conftest import require

REGISTRY = PackRegistry.of([PACK])
MIB = 1024 * 1024
IS_ROOT = os.geteuid() == 0


async def run(name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ProbeContext())).result


async def system_runbook() -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Every step of the system runbook run for real, and the findings of what came back."""
    readings = {step.probe: await run(step.probe, **step.params) for step in RUNBOOK.steps}
    return readings, RUNBOOK.evaluate(readings)


def run_root(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def mount_points() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


@pytest.fixture
def mount_dir() -> Iterator[Path]:
    """An empty directory to mount on; unmounted (lazily, if busy) and removed afterwards."""
    require(IS_ROOT, "mounting a filesystem needs root")
    made = Path(tempfile.mkdtemp(prefix="sonde-mnt-"))
    try:
        yield made
    finally:
        while str(made) in mount_points():  # a bind mount of / is no os.path.ismount
            subprocess.run(["umount", "-l", str(made)], check=True, timeout=30)
        made.rmdir()


# 1. an OOM kill in a memory cgroup


def memory_cgroup_root() -> tuple[Path, str] | None:
    """Where to make a memory cgroup: (directory, "v2" or "v1"), or None."""
    v2_root = v1_root = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]
        if after[0] == "cgroup2":
            v2_root = Path(fields[4])
        elif after[0] == "cgroup" and "memory" in after[2].split(","):
            v1_root = Path(fields[4])
    if v2_root is not None and "memory" in (v2_root / "cgroup.subtree_control").read_text().split():
        return v2_root, "v2"
    return (v1_root, "v1") if v1_root is not None else None


@pytest.fixture
def small_memory_cgroup() -> Iterator[Path]:
    """A fresh memory cgroup limited to 32 MiB without swap; removed afterwards."""
    require(IS_ROOT, "making a memory cgroup needs root")
    found = memory_cgroup_root()
    require(found is not None, "no cgroup v2 with the memory controller (nor a v1 memory hierarchy)")
    assert found is not None
    root, version = found
    group = root / f"sonde-oom-test-{os.getpid()}"
    group.mkdir()
    try:
        if version == "v2":
            (group / "memory.max").write_text(str(32 * MIB))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(32 * MIB))
            if (group / "memory.memsw.limit_in_bytes").exists():
                (group / "memory.memsw.limit_in_bytes").write_text(str(32 * MIB))
        yield group
    finally:
        group.rmdir()


# says its pid, joins the cgroup, then writes (so the kernel charges) 1 MiB after 1 MiB up to 512 MiB
GREEDY_CHILD = """
import os, sys
print(os.getpid(), flush=True)
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:
    procs.write("0")
held = [b"x" * (1 << 20) for _ in range(512)]
"""


async def test_an_oom_kill_in_a_memory_cgroup_is_a_finding(small_memory_cgroup: Path) -> None:
    with trio.fail_after(60):
        child = await trio.run_process(
            [sys.executable, "-c", GREEDY_CHILD, str(small_memory_cgroup)], check=False, capture_stdout=True
        )
    assert child.returncode == -9, "the OOM killer should have killed the child"
    child_pid = int(child.stdout)
    readings, found = await system_runbook()
    memory = readings["system.memory.usage"]
    assert memory["oom_kills_since_boot"] >= 1
    assert child_pid in [kill["pid"] for kill in memory["oom_kills"]]
    [oom] = [f for f in found if "OOM killer" in f.title]
    assert oom.probe == "system.memory.usage"
    assert oom.severity in ("warning", "critical")
    assert re.search(rf"\(pid {child_pid}\), [0-9.]+ (s|minutes) ago", oom.detail)
    assert "memory cgroup" in oom.detail


# 2. a filesystem remounted read-only


@pytest.fixture
def ext4_image() -> Iterator[Path]:
    require(IS_ROOT and shutil.which("mkfs.ext4") is not None, "a loop-mounted ext4 needs root and mkfs.ext4")
    fd, name = tempfile.mkstemp(prefix="sonde-ext4-", suffix=".img")
    os.close(fd)
    image = Path(name)
    try:
        with image.open("wb") as out:
            out.truncate(16 * MIB)
        run_root("mkfs.ext4", "-q", str(image))
        yield image
    finally:
        image.unlink()


async def test_a_filesystem_remounted_read_only_is_critical(ext4_image: Path, mount_dir: Path) -> None:
    run_root("mount", "-o", "loop", str(ext4_image), str(mount_dir))
    mounted = await run("system.disk.usage")
    [writable] = [fs for fs in mounted["filesystems"] if fs["mountpoint"] == str(mount_dir)]
    assert (writable["read_only"], writable["read_only_by"]) == (False, None)
    run_root("mount", "-o", "remount,ro", str(mount_dir))
    readings, found = await system_runbook()
    [listed] = [
        fs for fs in readings["system.disk.usage"]["filesystems"] if fs["mountpoint"] == str(mount_dir)
    ]
    assert (listed["read_only"], listed["read_only_by"]) == (True, "filesystem")
    [finding] = [f for f in found if str(mount_dir) in f.title]
    assert (finding.severity, finding.title) == ("critical", f"Filesystem {mount_dir} is read-only")
    assert "ext4" in finding.detail


async def test_a_read_only_bind_mount_is_listed_but_no_finding(mount_dir: Path) -> None:
    run_root("mount", "--bind", "-o", "ro", "/", str(mount_dir))
    readings, found = await system_runbook()
    [listed] = [
        fs for fs in readings["system.disk.usage"]["filesystems"] if fs["mountpoint"] == str(mount_dir)
    ]
    assert (listed["read_only"], listed["read_only_by"]) == (True, "mount")
    assert not [f for f in found if str(mount_dir) in f.title]


# 3. a full tmpfs


def fill(path: Path, up_to_bytes: int) -> None:
    with path.open("wb", buffering=0) as out:
        for _ in range(up_to_bytes // 65536):
            out.write(b"x" * 65536)


async def test_a_full_tmpfs_is_critical(mount_dir: Path) -> None:
    run_root("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_dir))
    with pytest.raises(OSError, match="No space left on device"):
        fill(mount_dir / "filler", 2 * MIB)
    readings, found = await system_runbook()
    [listed] = [
        fs for fs in readings["system.disk.usage"]["filesystems"] if fs["mountpoint"] == str(mount_dir)
    ]
    assert listed["fstype"] == "tmpfs"
    assert listed["total_bytes"] == MIB
    assert listed["percent_used"] == 100.0
    [finding] = [f for f in found if str(mount_dir) in f.title]
    assert (finding.severity, finding.title) == ("critical", f"Filesystem {mount_dir} is 100% full")
    assert finding.detail == f"tmpfs (tmpfs) on {mount_dir}: 0 B free of 1.0 MiB."


async def test_tmpfs_without_a_size_and_the_kernels_own_are_left_out() -> None:
    listed = (await run("system.disk.usage"))["filesystems"]
    tmpfs = [fs for fs in listed if fs["fstype"] == "tmpfs"]
    assert all(fs["total_bytes"] > 0 for fs in tmpfs)
    assert not [fs for fs in tmpfs if fs["mountpoint"].startswith(("/proc/", "/sys/"))]
