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
    total_bytes: int
    used_bytes: int
    free_bytes: int
    percent_used: float
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


def _inodes(mountpoint: str) -> tuple[int | None, int | None, float | None]:
    stats = os.statvfs(mountpoint)
    if stats.f_files <= 0:  # btrfs, vfat and others have no fixed inode table
        return None, None, None
    used = stats.f_files - stats.f_ffree
    return stats.f_files, used, round(used * 100 / stats.f_files, 1)


def _usage(mount: Mount) -> FilesystemUsage:
    space = psutil.disk_usage(mount.mountpoint)
    inodes_total, inodes_used, inodes_percent = _inodes(mount.mountpoint)
    return FilesystemUsage(
        device=mount.device,
        mountpoint=mount.mountpoint,
        fstype=mount.fstype,
        total_bytes=space.total,
        used_bytes=space.used,
        free_bytes=space.free,
        percent_used=space.percent,
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
    tmpfs and cgroup left out; overlay kept): device, mount point, type, total/used/free
    bytes, percent used, and inodes total/used/percent where the filesystem has an inode
    table. Mounts that could not be read are listed with the reason. Use it for 'disk full',
    'no space left on device' or failing writes.""",
    timeout_s=15,
)
async def disk_usage(ctx: ProbeContext, params: NoParams) -> DiskUsage:
    return await ctx.in_thread(_read_disk_usage)
