"""Space and inodes of the real filesystems.

The mount table lists many kernel pseudo filesystems (proc, cgroup, tmpfs, ...);
the pure `real_filesystems` drops them and the duplicates a bind or repeated
mount produces, so what remains is storage a person would call a disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import psutil
from pydantic import Field

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

# overlay is kept on purpose: it is the root filesystem of most containers.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "devpts",
        "devtmpfs",
        "tmpfs",
        "cgroup",
        "cgroup2",
        "securityfs",
        "pstore",
        "bpf",
        "tracefs",
        "debugfs",
        "configfs",
        "fusectl",
        "mqueue",
        "hugetlbfs",
        "autofs",
        "binfmt_misc",
        "nsfs",
        "squashfs",
        "ramfs",
        "rpc_pipefs",
        "efivarfs",
    }
)


class Partition(Protocol):
    """One mount table row, as ``psutil.disk_partitions`` gives it."""

    @property
    def device(self) -> str: ...
    @property
    def mountpoint(self) -> str: ...
    @property
    def fstype(self) -> str: ...


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str


class FilesystemUsage(Result):
    device: str
    mountpoint: str
    fstype: str
    total_bytes: int = Field(description="Size of the filesystem: used + free + reserved.")
    used_bytes: int = Field(description="Bytes in use.")
    free_bytes: int = Field(
        description="Bytes an unprivileged user can still write (df's Avail): the reserved blocks left out."
    )
    reserved_bytes: int = Field(
        description="Free bytes that only root (or the filesystem's reserved user or group) may use: "
        "ext4 reserves 5% by default. Not in `free_bytes`."
    )
    percent_used: float = Field(
        description="used / (used + free), as df's Use% (so 100 when unprivileged users can write no more)."
    )
    inodes_total: int | None
    inodes_used: int | None
    inodes_percent_used: float | None


class UnreadableMount(Result):
    mountpoint: str
    reason: str


class DiskUsage(Result):
    filesystems: list[FilesystemUsage]
    unreadable: list[UnreadableMount]


def real_filesystems(partitions: Iterable[Partition]) -> list[Mount]:
    """The mounts of ``partitions`` that are not pseudo filesystems, first of each device+mountpoint."""
    seen: set[tuple[str, str]] = set()
    mounts: list[Mount] = []
    for part in partitions:
        key = (part.device, part.mountpoint)
        if part.fstype in PSEUDO_FILESYSTEMS or key in seen:
            continue
        seen.add(key)
        mounts.append(Mount(part.device, part.mountpoint, part.fstype))
    return mounts


def _inodes(stats: os.statvfs_result) -> tuple[int | None, int | None, float | None]:
    if stats.f_files <= 0:  # btrfs, vfat and others have no fixed inode table
        return None, None, None
    used = stats.f_files - stats.f_ffree
    return stats.f_files, used, round(used * 100 / stats.f_files, 1)


def _usage(mount: Mount) -> FilesystemUsage:
    stats = os.statvfs(mount.mountpoint)
    # blocks: f_bfree are free to root, f_bavail to everybody; the difference is reserved
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    free = stats.f_bavail * stats.f_frsize
    inodes_total, inodes_used, inodes_percent = _inodes(stats)
    return FilesystemUsage(
        device=mount.device,
        mountpoint=mount.mountpoint,
        fstype=mount.fstype,
        total_bytes=stats.f_blocks * stats.f_frsize,
        used_bytes=used,
        free_bytes=free,
        reserved_bytes=max(0, stats.f_bfree - stats.f_bavail) * stats.f_frsize,
        percent_used=round(used * 100 / (used + free), 1) if used + free else 0.0,
        inodes_total=inodes_total,
        inodes_used=inodes_used,
        inodes_percent_used=inodes_percent,
    )


def _read_disk_usage() -> DiskUsage:
    filesystems: list[FilesystemUsage] = []
    unreadable: list[UnreadableMount] = []
    for mount in real_filesystems(psutil.disk_partitions(all=True)):
        try:
            filesystems.append(_usage(mount))
        except OSError as exc:  # permission, stale NFS handle, unmounted meanwhile
            unreadable.append(UnreadableMount(mountpoint=mount.mountpoint, reason=exc.strerror or str(exc)))
    return DiskUsage(filesystems=filesystems, unreadable=unreadable)


@PACK.probe(
    "system.disk.usage",
    """Space and inode use of every real mounted filesystem (pseudo filesystems such as proc,
    tmpfs and cgroup left out; overlay kept): device, mount point, type, total and used bytes,
    free bytes (what unprivileged users can still write) and reserved bytes (free to root
    only; total = used + free + reserved), percent used as df shows it, and inodes total/used/percent where the filesystem has an inode
    table. Mounts that could not be read are listed with the reason. Use it for 'disk full',
    'no space left on device' or failing writes.""",
    timeout_s=15,
)
async def disk_usage(ctx: ProbeContext, params: NoParams) -> DiskUsage:
    return await ctx.in_thread(_read_disk_usage)
