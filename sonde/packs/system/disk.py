"""Space, inodes and read-only state of the real filesystems.

The mount table lists many kernel pseudo filesystems (proc, cgroup, ...); the
pure `real_filesystems` drops them and the duplicates a bind or repeated mount
produces, so what remains is storage a person would call a disk, plus tmpfs
(/tmp, /run, /dev/shm fill up too) except the ones without a size and those
masking kernel directories under /proc and /sys. A host with many tmpfs mounts
(one per pod on a Kubernetes node) lists at most `TMPFS_LISTED`, the fullest.

Whether a mount is read-only comes from /proc/self/mountinfo, which tells the
mount's own flag (a read-only bind mount, as containers use) from the
filesystem's (mounted or remounted ro, or by the kernel after errors).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

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
KERNEL_DIRECTORIES = ("/proc/", "/sys/")  # a tmpfs there masks a kernel directory (containers)
TMPFS_LISTED = 50
MOUNTINFO = Path("/proc/self/mountinfo")
OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
ReadOnlyBy = Literal["filesystem", "mount"]


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
    read_only: bool = Field(description="Writes under this mount point fail (EROFS).")
    read_only_by: ReadOnlyBy | None = Field(
        description="filesystem: the filesystem itself is read-only (mounted or remounted ro, or "
        "the kernel made it so after errors, errors=remount-ro); mount: only this mount is (a "
        "read-only bind mount), the filesystem stays writable elsewhere; null when writable."
    )


class UnreadableMount(Result):
    mountpoint: str
    reason: str


class DiskUsage(Result):
    filesystems: list[FilesystemUsage]
    unreadable: list[UnreadableMount]
    tmpfs_left_out: int = Field(
        description=f"tmpfs mounts not listed: past the {TMPFS_LISTED} fullest, the emptiest are left out."
    )


def _kernel_tmpfs(part: Partition) -> bool:
    return part.fstype == "tmpfs" and part.mountpoint.startswith(KERNEL_DIRECTORIES)


def real_filesystems(partitions: Iterable[Partition]) -> list[Mount]:
    """The mounts of ``partitions`` that are not pseudo filesystems, first of each device+mountpoint."""
    seen: set[tuple[str, str]] = set()
    mounts: list[Mount] = []
    for part in partitions:
        key = (part.device, part.mountpoint)
        if part.fstype in PSEUDO_FILESYSTEMS or _kernel_tmpfs(part) or key in seen:
            continue
        seen.add(key)
        mounts.append(Mount(part.device, part.mountpoint, part.fstype))
    return mounts


@dataclass(frozen=True)
class MountinfoRow:
    """One row of /proc/self/mountinfo."""

    device: int | None  # as ``st_dev``; None when the row's major:minor is not two numbers
    mount_point: str
    mount_options: list[str]  # this mount's own (a read-only bind mount's "ro")
    fstype: str
    superblock_options: list[str]  # the filesystem's, shared by every mount of it


def _device_number(major_minor: str) -> int | None:
    major, _, minor = major_minor.partition(":")
    return os.makedev(int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def mountinfo_rows(mountinfo: str) -> Iterator[MountinfoRow]:
    """The rows of /proc/self/mountinfo's text, in order; lines too short to be rows are skipped."""
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)  # after the optional fields, before fstype, source, options
        if len(fields) < separator + 4:
            continue
        yield MountinfoRow(
            device=_device_number(fields[2]),
            mount_point=OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4]),
            mount_options=fields[5].split(","),
            fstype=fields[separator + 1],
            superblock_options=fields[separator + 3].split(","),
        )


def read_only_by(mountinfo: str) -> dict[str, ReadOnlyBy | None]:
    """Per mount point of /proc/self/mountinfo's text, what makes it read-only (None: writable).

    A mount point mounted over keeps the last row: the one a path reaches.
    """
    found: dict[str, ReadOnlyBy | None] = {}
    for row in mountinfo_rows(mountinfo):
        if "ro" in row.superblock_options:
            found[row.mount_point] = "filesystem"
        else:
            found[row.mount_point] = "mount" if "ro" in row.mount_options else None
    return found


def _inodes(stats: os.statvfs_result) -> tuple[int | None, int | None, float | None]:
    if stats.f_files <= 0:  # btrfs, vfat and others have no fixed inode table
        return None, None, None
    used = stats.f_files - stats.f_ffree
    return stats.f_files, used, round(used * 100 / stats.f_files, 1)


def _usage(mount: Mount, read_only: ReadOnlyBy | None) -> FilesystemUsage:
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
        read_only=read_only is not None,
        read_only_by=read_only,
    )


def _fullest_tmpfs(filesystems: list[FilesystemUsage]) -> tuple[list[FilesystemUsage], int]:
    """``filesystems`` without the tmpfs past the `TMPFS_LISTED` fullest, and how many those were."""
    tmpfs = [fs for fs in filesystems if fs.fstype == "tmpfs"]
    if len(tmpfs) <= TMPFS_LISTED:
        return filesystems, 0
    dropped = {id(fs) for fs in sorted(tmpfs, key=lambda fs: -fs.percent_used)[TMPFS_LISTED:]}
    return [fs for fs in filesystems if id(fs) not in dropped], len(dropped)


def _read_disk_usage() -> DiskUsage:
    filesystems: list[FilesystemUsage] = []
    unreadable: list[UnreadableMount] = []
    read_only = read_only_by(MOUNTINFO.read_text())
    for mount in real_filesystems(psutil.disk_partitions(all=True)):
        try:
            usage = _usage(mount, read_only.get(mount.mountpoint))
        except OSError as exc:  # permission, stale NFS handle, unmounted meanwhile
            unreadable.append(UnreadableMount(mountpoint=mount.mountpoint, reason=exc.strerror or str(exc)))
            continue
        if usage.fstype != "tmpfs" or usage.total_bytes > 0:  # size=0: no limit, never full
            filesystems.append(usage)
    listed, left_out = _fullest_tmpfs(filesystems)
    return DiskUsage(filesystems=listed, unreadable=unreadable, tmpfs_left_out=left_out)


@PACK.probe(
    "system.disk.usage",
    f"""Space and inode use of every real mounted filesystem (pseudo filesystems such as proc
    and cgroup left out; overlay kept; tmpfs kept when it has a size and is not under /proc or
    /sys, at most the {TMPFS_LISTED} fullest): device, mount point, type, total and used bytes,
    free bytes (what unprivileged users can still write) and reserved bytes (free to root
    only; total = used + free + reserved), percent used as df shows it, inodes
    total/used/percent where the filesystem has an inode table, and whether it is read-only
    (read_only_by: the filesystem itself, or only this mount). Mounts that could not be read
    are listed with the reason. Use it for 'disk full', 'no space left on device',
    'read-only file system' or failing writes.""",
    timeout_s=15,
)
async def disk_usage(ctx: ProbeContext, params: NoParams) -> DiskUsage:
    return await ctx.in_thread(_read_disk_usage)
