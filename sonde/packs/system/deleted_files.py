"""Files deleted while a process still holds them open: the space ``df`` counts and ``du`` cannot find.

A file unlinked while open (a log rotated or removed under its writer) keeps its blocks
until the last descriptor on it closes. Its /proc/PID/fd/N link then reads
``/old/path (deleted)``, and ``os.stat`` through that link reaches the inode itself (nothing
is opened, nothing read) for its size, blocks and link count (0). Every process's
/proc/PID/fd is swept, at most `MAX_PROCESSES` processes and `MAX_DESCRIPTORS` descriptors,
looking at the probe's stop flag as it goes (`sonde.packs.system.abandon`). A process whose
descriptors this user may not read is counted as denied, never guessed at. Each file's mount
is found by its device number in /proc/self/mountinfo. memfd files are left out: they never
had a path and hold memory, not disk.
"""

from __future__ import annotations

import heapq
import os
import stat
import threading
from dataclasses import dataclass, field

from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.abandon import StopCheck, in_thread_until_given_up
from sonde.packs.system.dirsize import disk_bytes
from sonde.packs.system.disk import MOUNTINFO, mountinfo_rows
from sonde.packs.system.privileges import (
    agent_user,
    effective_capabilities,
    other_users_fds_grant,
    sees_every_process,
)
from sonde.packs.system.processes import PROC_ROOT, process_labels

MAX_PROCESSES = 50_000  # processes a sweep looks into
MAX_DESCRIPTORS = 200_000  # descriptors a sweep looks at, over all processes
LISTED_MAX = 500
DELETED_SUFFIX = " (deleted)"
MEMFD_PREFIX = "/memfd:"


class DeletedOpenParams(Params):
    limit: int = Field(
        default=50, ge=1, le=LISTED_MAX, strict=True, description="At most this many descriptors listed."
    )


class DeletedOpenFile(Result):
    pid: int
    process_name: str | None
    user: str | None = Field(description="The user the process runs as.")
    fd: int = Field(description="The descriptor number: /proc/PID/fd/FD.")
    path: str = Field(
        description="The path the file had when it was deleted, as the process sees the filesystem."
    )
    size_bytes: int = Field(description="The file's length.")
    disk_bytes: int = Field(
        description="The disk space it still occupies, freed when the last holder closes it."
    )
    mount_point: str | None = Field(
        description="The mount it is on (as the agent sees mounts); null if unknown."
    )
    filesystem: str | None = Field(description="That mount's filesystem type (ext4, xfs, tmpfs...).")


class DeletedOpenFiles(Result):
    files: list[DeletedOpenFile] = Field(description="Descriptors on deleted files, most disk space first.")
    total_descriptors: int = Field(description="All the descriptors on deleted files found, listed or not.")
    total_files: int = Field(description="The distinct deleted files they hold.")
    total_disk_bytes: int = Field(description="The disk space those files occupy, each file counted once.")
    truncated: bool
    complete: bool = Field(
        description=f"False when the sweep stopped at its caps ({MAX_PROCESSES:,} processes, "
        f"{MAX_DESCRIPTORS:,} descriptors): the totals are then lower bounds."
    )
    processes_scanned: int
    processes_denied: int = Field(
        description="Processes whose open files the agent may not see: what they hold is not counted."
    )
    note: str | None


@dataclass(frozen=True)
class Held:
    """One descriptor on a deleted file."""

    pid: int
    fd: int
    path: str
    size_bytes: int
    disk_bytes: int
    device: int
    inode: int


@dataclass
class Sweep:
    """What a sweep of /proc found, and how far it got."""

    check: StopCheck
    found: list[Held] = field(default_factory=list)
    processes: int = 0
    denied: int = 0
    descriptors: int = 0
    capped: bool = False


@dataclass(frozen=True)
class MountRow:
    mount_point: str
    filesystem: str


def parse_mounts(mountinfo: str) -> dict[int, list[MountRow]]:
    """Device number (as ``st_dev``) -> the mounts of /proc/self/mountinfo's text showing it, in order."""
    mounts: dict[int, list[MountRow]] = {}
    for row in mountinfo_rows(mountinfo):
        if row.device is not None:
            mounts.setdefault(row.device, []).append(MountRow(row.mount_point, row.fstype))
    return mounts


def mount_of(path: str, rows: list[MountRow]) -> MountRow | None:
    """Of the mounts of a file's device, the deepest one ``path`` lies under, else the last mounted."""
    under = [
        row for row in rows if path == row.mount_point or path.startswith(row.mount_point.rstrip("/") + "/")
    ]
    if under:
        return max(under, key=lambda row: len(row.mount_point))
    return rows[-1] if rows else None


def deleted_file(pid: int, link: str, fd: int) -> Held | None:
    """The deleted file descriptor ``link`` (/proc/PID/fd/FD) holds, or None when it holds anything
    else. Raises what ``os.readlink`` and ``os.stat`` raise (PermissionError, FileNotFoundError)."""
    target = os.readlink(link)
    if not target.endswith(DELETED_SUFFIX) or not target.startswith("/") or target.startswith(MEMFD_PREFIX):
        return None
    info = os.stat(link)  # through the link to the inode: the file is not opened
    if info.st_nlink or not stat.S_ISREG(info.st_mode):  # a live file whose path merely ends so
        return None
    path = target.removesuffix(DELETED_SUFFIX)
    return Held(pid, fd, path, info.st_size, disk_bytes(info), info.st_dev, info.st_ino)


def _sweep_process(fd_dir: str, pid: int, sweep: Sweep) -> None:
    try:
        with os.scandir(fd_dir) as descriptors:
            for descriptor in descriptors:
                sweep.check.step()
                if sweep.descriptors >= MAX_DESCRIPTORS:
                    sweep.capped = True
                    return
                sweep.descriptors += 1
                try:
                    held = deleted_file(pid, descriptor.path, int(descriptor.name))
                except (FileNotFoundError, ProcessLookupError):  # closed meanwhile
                    continue
                if held is not None:
                    sweep.found.append(held)
    except PermissionError:  # another user's process: its descriptors are not ours to see
        sweep.denied += 1
    except (FileNotFoundError, ProcessLookupError):  # it exited meanwhile
        pass


def sweep_processes(stop: threading.Event | None) -> Sweep:
    """Every descriptor on a deleted file of the processes under `PROC_ROOT`, within the caps;
    raises `Abandoned` once ``stop`` is set."""
    sweep = Sweep(StopCheck(stop))
    with os.scandir(PROC_ROOT) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            if sweep.processes >= MAX_PROCESSES:
                sweep.capped = True
                break
            sweep.processes += 1
            sweep.check.step()
            _sweep_process(os.path.join(entry.path, "fd"), int(entry.name), sweep)
            if sweep.capped:
                break
    return sweep


def denied_note(denied: int, sees_all: bool, user: str) -> str | None:
    """Why the open files of ``denied`` processes are unknown, and what would show them (None if none);
    ``sees_all``: the agent may read every process's /proc/PID/fd."""
    if not denied:
        return None
    if sees_all:
        return (
            f"the open files of {denied} process(es) were refused to the agent although it may read "
            "every process's: a security module (AppArmor, SELinux) or a container boundary keeps them"
        )
    return (
        f"the open files of {denied} process(es) are not visible to user '{user}', so deleted files "
        "they hold are not counted: a process's descriptors are in its /proc/PID/fd, "
        + other_users_fds_grant()
    )


def _listed(shown: list[Held], mounts: dict[int, list[MountRow]]) -> list[DeletedOpenFile]:
    owners = process_labels({held.pid for held in shown}, with_user=True)
    listed = []
    for held in shown:
        mount = mount_of(held.path, mounts.get(held.device, []))
        owner = owners[held.pid]
        listed.append(
            DeletedOpenFile(
                pid=held.pid,
                process_name=owner.name,
                user=owner.user,
                fd=held.fd,
                path=held.path,
                size_bytes=held.size_bytes,
                disk_bytes=held.disk_bytes,
                mount_point=mount.mount_point if mount else None,
                filesystem=mount.filesystem if mount else None,
            )
        )
    return listed


def find_deleted_open(limit: int, stop: threading.Event | None) -> DeletedOpenFiles:
    """The probe's answer: the ``limit`` biggest descriptors on deleted files, and the totals."""
    sweep = sweep_processes(stop)
    shown = heapq.nlargest(limit, sweep.found, key=lambda h: (h.disk_bytes, h.size_bytes, -h.pid, -h.fd))
    files = {(held.device, held.inode): held.disk_bytes for held in sweep.found}
    return DeletedOpenFiles(
        files=_listed(shown, parse_mounts(MOUNTINFO.read_text())),
        total_descriptors=len(sweep.found),
        total_files=len(files),
        total_disk_bytes=sum(files.values()),
        truncated=len(sweep.found) > len(shown),
        complete=not sweep.capped,
        processes_scanned=sweep.processes,
        processes_denied=sweep.denied,
        note=denied_note(sweep.denied, sees_every_process(effective_capabilities()), agent_user()),
    )


@PACK.probe(
    "system.files.deleted_open",
    """Files deleted while a process still holds them open, which keep their disk space until
    the last holder closes them: use it when a disk is full (system.disk.usage) but du (or
    system.files.directories) finds far less in it, typically a log rotated or removed while
    its writer keeps writing. For each descriptor on such a file, most disk space first, up to
    `limit`: pid, process name and user, fd number, the path the file had, its size and the
    disk space it still occupies, and the mount point and filesystem type it is on. Totals
    cover every one found (each file counted once however many descriptors hold it). Processes
    whose open files the agent may not see are counted in `processes_denied`, with a `note` on
    what would show them. The files are never opened or read. The space returns when the holder
    closes them (a restart, or a reopen of its logs).""",
    timeout_s=15,
)
async def files_deleted_open(ctx: ProbeContext, params: DeletedOpenParams) -> DeletedOpenFiles:
    return await in_thread_until_given_up(ctx, find_deleted_open, params.limit)
