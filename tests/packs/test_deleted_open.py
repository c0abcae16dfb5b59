"""`system.files.deleted_open`, for real: files this test deletes while it holds them open.

The classic puzzle: df says the disk is full and du finds little, because a process
still holds a deleted file (a rotated log) open. The probe runs through the executor
over this machine's /proc; this test process is the holder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import psutil
import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.deleted_files import MountRow, denied_note, mount_of, parse_mounts
from tests.packs.test_system_unprivileged import NOBODY, probe_as_nobody, unprivileged

REGISTRY = PackRegistry.of([PACK])
HELD_BYTES = 123_457


async def deleted_open(**params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, "system.files.deleted_open", params, ProbeContext())).result


def mount_point_of(path: Path) -> Path:
    """Where ``path``'s filesystem is mounted: the highest ancestor on the same device (as df finds it)."""
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, BinaryIO]]:
    """A log of `HELD_BYTES` this process keeps open for writing after deleting it, as a writer does
    when its log is rotated away under it."""
    path = tmp_path / "app.log"
    with path.open("wb") as handle:
        handle.write(b"l" * HELD_BYTES)
        handle.flush()
        path.unlink()
        yield path, handle


async def test_a_deleted_file_held_open_is_found_with_its_size_and_holder(
    tmp_path: Path, held: tuple[Path, BinaryIO]
) -> None:
    path, handle = held
    gone = tmp_path / "gone.log"  # deleted, but nobody holds it: its space is already free
    gone.write_bytes(b"g" * HELD_BYTES)
    gone.unlink()
    kept = tmp_path / "kept.log"  # held open, but not deleted: du counts it
    kept.write_bytes(b"k" * HELD_BYTES)
    again = os.dup(handle.fileno())  # a second descriptor on the same deleted file
    try:
        with kept.open("rb"):
            found = await deleted_open(limit=500)
    finally:
        os.close(again)
    ours = [entry for entry in found["files"] if entry["path"] == str(path)]
    assert sorted(entry["fd"] for entry in ours) == sorted([handle.fileno(), again])
    mount = mount_point_of(tmp_path)
    filesystem = [part.fstype for part in psutil.disk_partitions(all=True) if part.mountpoint == str(mount)]
    for entry in ours:
        assert entry["pid"] == os.getpid()
        assert entry["process_name"] == psutil.Process().name()
        assert entry["user"] == psutil.Process().username()
        assert entry["size_bytes"] == HELD_BYTES
        assert entry["disk_bytes"] == os.fstat(handle.fileno()).st_blocks * 512
        assert entry["mount_point"] == str(mount)
        assert entry["filesystem"] == filesystem[-1]
    assert not {str(gone), str(kept)} & {entry["path"] for entry in found["files"]}
    assert found["total_disk_bytes"] >= ours[0]["disk_bytes"]
    assert found["total_files"] < found["total_descriptors"]  # the two descriptors are one file
    sizes = [entry["disk_bytes"] for entry in found["files"]]
    assert sizes == sorted(sizes, reverse=True)


async def test_the_listing_is_cut_to_the_limit_and_says_so(held: tuple[Path, BinaryIO]) -> None:
    _, handle = held
    again = os.dup(handle.fileno())
    try:
        found = await deleted_open(limit=1)
    finally:
        os.close(again)
    assert len(found["files"]) == 1
    assert found["truncated"] is True
    assert found["total_descriptors"] >= 2


@unprivileged
def test_an_agent_that_may_not_see_a_process_counts_it_as_denied(held: tuple[Path, BinaryIO]) -> None:
    path, _ = held  # held by this root process: user nobody may not list its descriptors
    answer = probe_as_nobody("system.files.deleted_open")
    found = answer["result"]
    assert str(path) not in {entry["path"] for entry in found["files"]}
    assert found["processes_denied"] >= 1
    assert f"not visible to user '{NOBODY}'" in found["note"]
    assert "CAP_SYS_PTRACE" in found["note"]


MOUNTINFO = (
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n"
    "30 25 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n"
    "40 27 254:0 /srv/data /mnt/with\\040space rw,relatime shared:1 - ext4 /dev/vda rw\n"
)


def test_mounts_are_found_by_device_and_path() -> None:
    mounts = parse_mounts(MOUNTINFO)
    vda = mounts[os.makedev(254, 0)]
    assert vda == [MountRow("/", "ext4"), MountRow("/mnt/with space", "ext4")]
    assert mount_of("/mnt/with space/app.log", vda) == MountRow("/mnt/with space", "ext4")
    assert mount_of("/var/log/app.log", vda) == MountRow("/", "ext4")
    assert mount_of("/elsewhere/app.log", mounts[os.makedev(0, 23)]) == MountRow("/dev/shm", "tmpfs")
    assert mount_of("/x", []) is None


def test_the_note_says_what_was_not_seen_and_what_would_show_it() -> None:
    assert denied_note(0, False, "sonde") is None
    unprivileged_note = denied_note(3, False, "sonde")
    assert unprivileged_note is not None
    assert "3 process(es) are not visible to user 'sonde'" in unprivileged_note
    assert "CAP_SYS_PTRACE" in unprivileged_note
    privileged = denied_note(1, True, "root")
    assert privileged is not None
    assert "CAP_" not in privileged
