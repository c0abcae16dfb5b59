"""Directory listings inside the allowed paths only (a bounded file read: `fileread`).

Every path goes through ``ProbeContext.allowed_path`` (symlinks resolved, then
checked against the agent's allow-list), and is then opened by `open_resolved`, one
component at a time without following a symlink, so a directory swapped for one
after the check cannot lead outside. A listing streams the directory and keeps only
the top ``limit`` entries, looking at no more than `MAX_LIST_ENTRIES` (past that it
says ``complete: false``, and ``total_entries`` is a lower bound). A directory's size is
only known when the listing is sorted by size: otherwise it is null (``size_complete:
false``), never the few KiB of the directory entry itself. Those sizes are counted as
``du -s`` counts them, by a bounded walk (`sonde.packs.system.dirsize`).
A size the walk could not finish (those caps, or a directory beneath the agent may
not read) is a lower bound and says so:
``size_complete: false`` on its entry,
``complete: false`` on the listing, and the unread directories in ``unreadable``.
A listing whose probe gives up (its deadline, a cancel) stops within a few hundred
entries of the scan or the walk (`sonde.packs.system.abandon`), not at their caps.
"""

from __future__ import annotations

import heapq
import os
import stat
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.abandon import StopCheck, in_thread_until_given_up
from sonde.packs.system.dirsize import UNREADABLE_MAX, SizeWalk, tree_size
from sonde.packs.system.info import iso_utc
from sonde.packs.system.nofollow import DIRECTORY_FLAGS, open_resolved
from sonde.packs.system.textfile import AbsolutePath, permission_error

MAX_LIST_ENTRIES = 200_000  # entries one listing looks at
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
    size_bytes: int | None = Field(
        description="A file's size. A directory's disk use, itself and everything beneath it "
        "(like `du -s`), with sort_by=size only; null otherwise (not computed: ask sort_by=size), "
        "and for a directory the walk's entries ran out before."
    )
    apparent_size_bytes: int | None = Field(
        description="With sort_by=size, a directory's apparent size (like `du -s --apparent-size`): "
        "the sum of the lengths beneath it, sparse files at full length. Null otherwise."
    )
    size_complete: bool = Field(
        description="True when `size_bytes` is the whole size. False for a directory whose size "
        "is null (not computed) or a lower bound (part of its tree could not be counted)."
    )
    mtime: str | None = Field(
        description="ISO 8601 UTC; null for a time no date can say (past the year 9999, as "
        "`touch -d @300000000000` sets)."
    )
    mode: str
    uid: int


class Listing(Result):
    path: str
    sort_by: SortKey
    total_entries: int = Field(
        description="Entries of the requested kind; a lower bound when `complete` is false."
    )
    entries: list[Entry]
    other_entries: dict[str, int] = Field(
        description="Entries of the directory not of the kind listed, not in `entries` or "
        "`total_entries`, counted by kind: file, directory, symlink, fifo, socket, block_device, "
        "char_device."
    )
    truncated: bool
    complete: bool = Field(
        description="False when the directory held more than 200,000 entries (only that many "
        "were looked at), or a directory size is a lower bound: the walk hit its entry or depth "
        "cap or met a directory it could not read."
    )
    unreadable: list[str] = Field(
        description="Entries that could not be read, and the directories beneath (relative paths) "
        "whose contents the size walk could not read."
    )
    too_deep: list[str] = Field(
        description="Directories beneath (relative paths) the size walk did not enter because they "
        "lie more than 64 levels down (its depth cap, not a permission): their contents are not "
        "counted. The first 100; `too_deep_count` counts them all."
    )
    too_deep_count: int


@dataclass(frozen=True)
class Stat:
    name: str
    kind: EntryKind
    size: int
    mtime: float
    mode: int
    uid: int
    apparent_size: int | None = None  # set on directories sized by a walk: their size is then known
    size_complete: bool = True  # False when that walk could not count all of it


def kind_of(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "other"


OTHER_KINDS = (
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISREG, "file"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISBLK, "block_device"),
    (stat.S_ISCHR, "char_device"),
)


def kind_named(mode: int) -> str:
    """What an entry of ``mode`` is, in the words `Listing.other_entries` counts it by."""
    return next((name for test, name in OTHER_KINDS if test(mode)), "other")


def top_entries(entries: Iterable[Stat], sort_by: SortKey, descending: bool, limit: int) -> list[Stat]:
    """The first ``limit`` of ``entries`` ordered by ``sort_by`` (name breaks ties), as
    ``sorted(...)[:limit]`` gives them but holding only ``limit`` entries at a time."""
    # a directory the size walks did not reach has no size: after every sized entry, either way
    last = -1 if descending else 1
    keys: dict[str, Callable[[Stat], tuple[int, float | str, str]]] = {
        "name": lambda e: (0, e.name, e.name),
        "size": lambda e: (last if _unsized(e) else 0, e.size, e.name),
        "mtime": lambda e: (0, e.mtime, e.name),
    }
    pick = heapq.nlargest if descending else heapq.nsmallest
    return pick(limit, entries, key=keys[sort_by])


def _unsized(item: Stat) -> bool:
    """A directory whose size no walk counted: its st_size is only its own entry's."""
    return item.kind == "directory" and item.apparent_size is None


def _entry(item: Stat) -> Entry:
    unsized = _unsized(item)  # its st_size is no total
    return Entry(
        name=item.name,
        kind=item.kind,
        size_bytes=None if unsized else item.size,
        apparent_size_bytes=item.apparent_size,
        size_complete=item.size_complete and not unsized,
        mtime=iso_utc(item.mtime),
        mode=stat.filemode(item.mode),
        uid=item.uid,
    )


@dataclass
class Scan:
    """What streaming one directory found besides the entries it kept: how many matched,
    the names it could not stat, and whether it stopped at `MAX_LIST_ENTRIES`."""

    matched: int = 0
    capped: bool = False
    unreadable: list[str] = field(default_factory=list)
    others: Counter[str] = field(default_factory=Counter)  # entries of other kinds, by `kind_named`

    def could_not_stat(self, name: str) -> None:
        if len(self.unreadable) < UNREADABLE_MAX:
            self.unreadable.append(name)


def open_directory(directory: Path) -> int:
    """A descriptor to list ``directory`` (no symlink followed on the way: see `open_resolved`)."""
    try:
        return open_resolved(directory, DIRECTORY_FLAGS)
    except PermissionError:
        raise permission_error(directory) from None
    except NotADirectoryError:
        raise ValueError(f"{directory}: not a directory") from None
    except FileNotFoundError:
        raise ValueError(f"{directory}: no such directory") from None
    except OSError as exc:  # a name too long, a symlink loop: the caller's path, not our failure
        raise ValueError(f"{directory}: cannot open ({exc.strerror})") from None


def _scan(fd: int, only: EntryKind, scan: Scan, check: StopCheck) -> Iterator[Stat]:
    """Each entry of the directory open at ``fd`` of kind ``only``, streamed (never all held),
    until `MAX_LIST_ENTRIES` have been looked at; raises `Abandoned` once the probe gave up."""
    with os.scandir(fd) as items:
        for looked, item in enumerate(items):
            if looked >= MAX_LIST_ENTRIES:
                scan.capped = True
                return
            check.step()
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:  # vanished or unreadable meanwhile
                scan.could_not_stat(item.name)
                continue
            if kind_of(info.st_mode) == only:
                scan.matched += 1
                yield Stat(item.name, only, info.st_size, info.st_mtime, info.st_mode, info.st_uid)
            else:
                scan.others[kind_named(info.st_mode)] += 1


def _sized(fd: int, item: Stat, walk: SizeWalk) -> Stat:
    if walk.budget < 0:  # spent on the directories before it: its size is not known at all
        walk.lower_bound = True
        return replace(item, size_complete=False)  # no apparent size: unsized (`_entry`, `top_entries`)
    size = tree_size(fd, item.name, walk)
    walk.lower_bound = walk.lower_bound or not size.complete
    return replace(item, size=size.disk_bytes, apparent_size=size.apparent_bytes, size_complete=size.complete)


def _list(
    directory: Path, params: ListingParams, only: EntryKind, stop: threading.Event | None = None
) -> Listing:
    fd = open_directory(directory)
    try:
        check = StopCheck(stop)
        scan, walk = Scan(), SizeWalk(check=check)
        chosen = _scan(fd, only, scan, check)
        if only == "directory" and params.sort_by == "size":
            chosen = (_sized(fd, item, walk) for item in chosen)
        top = top_entries(chosen, params.sort_by, params.descending, params.limit)
    finally:
        os.close(fd)
    return Listing(
        path=str(directory),
        sort_by=params.sort_by,
        total_entries=scan.matched,
        entries=[_entry(item) for item in top],
        other_entries=dict(sorted(scan.others.items())),
        truncated=scan.matched > len(top) or scan.capped,
        complete=not (scan.capped or walk.lower_bound),
        unreadable=(scan.unreadable + walk.unreadable)[:UNREADABLE_MAX],
        too_deep=walk.too_deep,
        too_deep_count=walk.too_deep_count,
    )


@PACK.probe(
    "system.files.list",
    """Regular files directly inside a directory (allowed paths only): name, size in bytes,
    modification time (ISO 8601 UTC; null past the year 9999), mode and owner uid, sorted by name, size or mtime
    (`descending` for largest/newest first) and cut to `limit`. Entries of other kinds
    (directories, symlinks, FIFOs, sockets, devices) are not listed but counted by kind in
    `other_entries`. At most 200,000 entries are looked at (past that `complete` is false).
    Use it to find big or recently changed files, e.g. in /var/log.""",
    timeout_s=15,
)
async def files_list(ctx: ProbeContext, params: ListingParams) -> Listing:
    directory = ctx.allowed_path(params.path)
    return await in_thread_until_given_up(ctx, _list, directory, params, "file")


@PACK.probe(
    "system.files.directories",
    """Subdirectories directly inside a directory (allowed paths only), sorted by name,
    mtime or size; entries of other kinds are counted by kind in `other_entries`. Sizes are
    computed only with sort_by=size (else `size_bytes` is null and
    `size_complete` false); then each size is the disk space it and everything beneath
    it occupy (like `du -s`: allocated blocks, so a sparse file counts only what it really
    uses, a hard-linked file once, symlinks not followed, at most 200,000 entries walked
    and 64 levels deep),
    with the apparent size (sum of file lengths) beside it. A size is a lower bound,
    with `size_complete` false on its entry and `complete` false, when the walk stopped at
    those caps (the directories past 64 levels are listed in `too_deep`) or met a directory
    the agent may not read (listed in `unreadable`); the
    directories the walk never reached (its entries spent on those before them) have a null
    size and come after every sized one: list them one by one. Use it to find what fills a
    disk.""",
    timeout_s=30,
)
async def files_directories(ctx: ProbeContext, params: ListingParams) -> Listing:
    directory = ctx.allowed_path(params.path)
    return await in_thread_until_given_up(ctx, _list, directory, params, "directory")
