"""Directory and file listings, and a bounded file read, inside the allowed paths only.

Every path goes through ``ProbeContext.allowed_path`` (symlinks resolved, then
checked against the agent's allow-list). Directory sizes are summed with
``os.scandir`` without following symlinks, as ``du -s`` does: the blocks each
entry occupies (``st_blocks`` times 512, so a sparse file counts what it really
uses), every inode once however many hard links it has, the directory itself
included; the apparent size (the sum of ``st_size``) is kept beside it. The
walk stops after `MAX_WALK_ENTRIES` entries, so a huge tree costs a bounded
amount of time. A size the walk could not finish (that cap, or a directory
beneath the agent may not read) is a lower bound and says so:
``size_complete: false`` on its entry,
``complete: false`` on the listing, and the unread directories in ``unreadable``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.info import iso_utc
from sonde.packs.system.textfile import AbsolutePath, permission_error, read_text

MAX_WALK_ENTRIES = 200_000
UNREADABLE_MAX = 100
READ_MAX_BYTES = 1024 * 1024
SortKey = Literal["name", "size", "mtime"]
EntryKind = Literal["file", "directory", "symlink", "other"]


class ListingParams(Params):
    path: AbsolutePath
    sort_by: SortKey = "name"
    descending: bool = Field(default=False, strict=True, description="Largest/newest/last name first.")
    limit: int = Field(default=100, ge=1, le=1000, strict=True, description="Top-N entries to return.")


class Entry(Result):
    name: str
    kind: EntryKind
    size_bytes: int = Field(
        description="A file's size; a directory's disk use with sort_by=size (like `du -s`), "
        "else the size of the directory entry itself."
    )
    apparent_size_bytes: int | None = Field(
        description="With sort_by=size, a directory's apparent size (like `du -s --apparent-size`): "
        "the sum of the lengths beneath it, sparse files at full length. Null otherwise."
    )
    size_complete: bool = Field(
        description="False when part of a directory's tree could not be counted: its size is a lower bound."
    )
    mtime: str
    mode: str
    uid: int


class Listing(Result):
    path: str
    sort_by: SortKey
    total_entries: int
    entries: list[Entry]
    truncated: bool
    complete: bool = Field(
        description="False when a directory size is a lower bound: the walk hit its entry cap or "
        "met a directory it could not read."
    )
    unreadable: list[str] = Field(
        description="Entries that could not be read, and the directories beneath (relative paths) "
        "whose contents the size walk could not count."
    )


@dataclass(frozen=True)
class Stat:
    name: str
    kind: EntryKind
    size: int
    mtime: float
    mode: int
    uid: int
    apparent_size: int | None = None  # set on directories sized by a walk


@dataclass(frozen=True)
class TreeSize:
    disk_bytes: int
    apparent_bytes: int
    complete: bool


def kind_of(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "other"


def sort_entries(entries: list[Stat], sort_by: SortKey, descending: bool, limit: int) -> list[Stat]:
    """``entries`` ordered by ``sort_by`` (name breaks ties), cut to ``limit``."""
    keys: dict[str, Callable[[Stat], tuple[float | str, str]]] = {
        "name": lambda e: (e.name, e.name),
        "size": lambda e: (e.size, e.name),
        "mtime": lambda e: (e.mtime, e.name),
    }
    return sorted(entries, key=keys[sort_by], reverse=descending)[:limit]


def _entry(item: Stat, size_complete: bool) -> Entry:
    return Entry(
        name=item.name,
        kind=item.kind,
        size_bytes=item.size,
        apparent_size_bytes=item.apparent_size,
        size_complete=size_complete,
        mtime=iso_utc(item.mtime),
        mode=stat.filemode(item.mode),
        uid=item.uid,
    )


def _scan(directory: Path) -> tuple[list[Stat], list[str]]:
    found: list[Stat] = []
    unreadable: list[str] = []
    try:
        items = list(os.scandir(directory))
    except PermissionError:
        raise permission_error(directory) from None
    except NotADirectoryError:
        raise ValueError(f"{directory}: not a directory") from None
    except FileNotFoundError:
        raise ValueError(f"{directory}: no such directory") from None
    for item in items:
        try:
            info = item.stat(follow_symlinks=False)
        except OSError:  # vanished or unreadable meanwhile
            unreadable.append(item.name)
            continue
        found.append(
            Stat(item.name, kind_of(info.st_mode), info.st_size, info.st_mtime, info.st_mode, info.st_uid)
        )
    return found, unreadable


@dataclass
class SizeWalk:
    """What the size walks of one listing share: the entries they may still visit, and the
    directories (relative to the listed one) whose contents they could not count."""

    budget: int = MAX_WALK_ENTRIES
    unreadable: list[str] = field(default_factory=list)

    def could_not_read(self, path: Path, listed: Path) -> None:
        if len(self.unreadable) < UNREADABLE_MAX:
            self.unreadable.append(str(path.relative_to(listed)))


def _read_directory(directory: Path, walk: SizeWalk, listed: Path) -> list[tuple[str, os.stat_result]] | None:
    """Each entry of ``directory`` with its lstat, while the budget lasts; None (noted) if it cannot be read."""
    try:
        items = list(os.scandir(directory))
    except FileNotFoundError:  # removed meanwhile: nothing left to count
        return []
    except OSError:
        walk.could_not_read(directory, listed)
        return None
    found = []
    for item in items:
        walk.budget -= 1
        if walk.budget < 0:
            break
        try:
            found.append((item.path, item.stat(follow_symlinks=False)))
        except FileNotFoundError:
            continue
        except OSError:  # listable but not searchable (mode r without x): no entry can be stat'ed
            walk.could_not_read(directory, listed)
            return None
    return found


def disk_bytes(info: os.stat_result) -> int:
    """The bytes ``info``'s file occupies on disk (``st_blocks`` is in 512-byte units, as du counts)."""
    return info.st_blocks * 512


def tree_size(root: Path, walk: SizeWalk, listed: Path) -> TreeSize:
    """The disk use and apparent size of ``root`` and everything under it (no symlinks followed,
    each inode once), and whether that is all of it: False when the walk ran out of entries or
    met a directory it could not read (then both sizes are lower bounds)."""
    try:
        own = root.lstat()
    except FileNotFoundError:  # removed meanwhile: nothing left to count
        return TreeSize(0, 0, True)
    disk, apparent, exact = disk_bytes(own), own.st_size, True
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack and walk.budget >= 0:
        found = _read_directory(stack.pop(), walk, listed)
        exact = exact and found is not None
        for path, info in found or ():
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in seen:  # another hard link to a file already counted
                    continue
                seen.add((info.st_dev, info.st_ino))
            disk += disk_bytes(info)
            apparent += info.st_size
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(path))
    return TreeSize(disk, apparent, exact and walk.budget >= 0)


def _list(directory: Path, params: ListingParams, only: EntryKind) -> Listing:
    found, unreadable = _scan(directory)
    chosen = [item for item in found if item.kind == only]
    inexact: set[str] = set()
    if only == "directory" and params.sort_by == "size":
        walk = SizeWalk()
        sized = []
        for item in chosen:
            size = tree_size(directory / item.name, walk, directory)
            if not size.complete:
                inexact.add(item.name)
            sized.append(replace(item, size=size.disk_bytes, apparent_size=size.apparent_bytes))
        chosen = sized
        unreadable += walk.unreadable
    top = sort_entries(chosen, params.sort_by, params.descending, params.limit)
    return Listing(
        path=str(directory),
        sort_by=params.sort_by,
        total_entries=len(chosen),
        entries=[_entry(item, item.name not in inexact) for item in top],
        truncated=len(chosen) > len(top),
        complete=not inexact,
        unreadable=unreadable[:UNREADABLE_MAX],
    )


@PACK.probe(
    "system.files.list",
    """Regular files directly inside a directory (allowed paths only): name, size in bytes,
    modification time (ISO 8601 UTC), mode and owner uid, sorted by name, size or mtime
    (`descending` for largest/newest first) and cut to `limit`. Use it to find big or
    recently changed files, e.g. in /var/log.""",
    timeout_s=15,
)
async def files_list(ctx: ProbeContext, params: ListingParams) -> Listing:
    directory = ctx.allowed_path(params.path)
    return await ctx.in_thread(_list, directory, params, "file")


@PACK.probe(
    "system.files.directories",
    """Subdirectories directly inside a directory (allowed paths only), sorted by name,
    mtime or size; with sort_by=size each size is the disk space it and everything beneath
    it occupy (like `du -s`: allocated blocks, so a sparse file counts only what it really
    uses, a hard-linked file once, symlinks not followed, at most 200,000 entries walked),
    with the apparent size (sum of file lengths) beside it. A size is a lower bound,
    with `size_complete` false on its entry and `complete` false, when the walk stopped at
    that cap or met a directory the agent may not read (listed in `unreadable`). Use it to
    find what fills a disk.""",
    timeout_s=30,
)
async def files_directories(ctx: ProbeContext, params: ListingParams) -> Listing:
    directory = ctx.allowed_path(params.path)
    return await ctx.in_thread(_list, directory, params, "directory")


class ReadParams(Params):
    path: AbsolutePath
    max_bytes: int = Field(
        default=64 * 1024, ge=1, le=READ_MAX_BYTES, strict=True, description="Read at most this many bytes."
    )


class FileContent(Result):
    path: str
    size_bytes: int
    bytes_read: int
    content: str
    truncated: bool


def _read(path: Path, max_bytes: int) -> FileContent:
    read = read_text(path, max_bytes)
    return FileContent(
        path=str(path),
        size_bytes=read.size_bytes,
        bytes_read=read.bytes_read,
        content=read.text,
        truncated=read.truncated,
    )


@PACK.probe(
    "system.files.read",
    """The start of a text file (allowed paths only, symlinks resolved first), up to
    `max_bytes` (default 64 KiB, at most 1 MiB): content, file size and whether it was
    cut. Binary files, directories, devices and FIFOs are refused. Use it to read a config
    file or a small report; for logs prefer system.logs.tail.""",
    timeout_s=10,
)
async def files_read(ctx: ProbeContext, params: ReadParams) -> FileContent:
    path = ctx.allowed_path(params.path)
    return await ctx.in_thread(_read, path, params.max_bytes)
