"""The size of a directory tree as ``du -s`` counts it, bounded in entries, depth and descriptors.

Summed with ``os.scandir`` without following symlinks: the blocks each entry occupies
(``st_blocks`` times 512, so a sparse file counts what it really uses), every inode once
however many hard links it has, the directory itself included; the apparent size (the
sum of ``st_size``) beside it. A walk stops after `MAX_WALK_ENTRIES` entries (shared by
every size of one listing), opens each directory relative to its parent's descriptor,
never by path, and holds one open per level, so it goes at most `MAX_WALK_DEPTH` deep: the
directories deeper are named apart (``too_deep``), not as unreadable, as no permission keeps
them from it. A size it could not finish is a lower bound and says so. The walk looks at its probe's
stop flag every few hundred entries (`SizeWalk.check`) and ends with `Abandoned` once the
probe has given up, instead of running on to its cap.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from sonde.packs.system.abandon import StopCheck
from sonde.packs.system.nofollow import DIRECTORY_FLAGS

MAX_WALK_ENTRIES = 200_000
MAX_WALK_DEPTH = 64  # directories a size walk holds open at once, one per level
UNREADABLE_MAX = 100


@dataclass(frozen=True)
class TreeSize:
    disk_bytes: int
    apparent_bytes: int
    complete: bool


@dataclass
class SizeWalk:
    """What the size walks of one listing share: the entries they may still visit, the
    directories (relative to the listed one) whose contents they could not count (unreadable,
    or too deep to enter: `too_deep_count` of them, the first listed), and the probe's stop flag."""

    budget: int = MAX_WALK_ENTRIES
    check: StopCheck = field(default_factory=StopCheck)
    unreadable: list[str] = field(default_factory=list)
    too_deep: list[str] = field(default_factory=list)
    too_deep_count: int = 0
    lower_bound: bool = False  # some size it gave could not count all of its tree

    def could_not_read(self, relative: str) -> None:
        if len(self.unreadable) < UNREADABLE_MAX:
            self.unreadable.append(relative)

    def did_not_enter(self, relative: str) -> None:
        """``relative`` lies past `MAX_WALK_DEPTH`: not counted."""
        self.too_deep_count += 1
        if len(self.too_deep) < UNREADABLE_MAX:
            self.too_deep.append(relative)


@dataclass
class Level:
    """One directory open on the way down a size walk, and its subdirectories still to visit."""

    fd: int
    relative: str
    subdirectories: list[str]


@dataclass
class Tally:
    disk_bytes: int
    apparent_bytes: int
    exact: bool = True
    seen: set[tuple[int, int]] = field(default_factory=set)  # (dev, inode) of files with hard links


def _read_directory(fd: int, relative: str, walk: SizeWalk, tally: Tally) -> list[str] | None:
    """Count each entry of the directory open at ``fd`` into ``tally`` while the budget lasts,
    and give its subdirectories; None (noted, nothing counted) if it cannot be read."""
    disk = apparent = 0
    seen: set[tuple[int, int]] = set()
    subdirectories = []
    try:
        with os.scandir(fd) as items:
            for item in items:
                walk.budget -= 1
                if walk.budget < 0:
                    break
                walk.check.step()
                try:
                    info = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    key = (info.st_dev, info.st_ino)
                    if key in tally.seen or key in seen:  # another hard link to a file already counted
                        continue
                    seen.add(key)
                disk += disk_bytes(info)
                apparent += info.st_size
                if stat.S_ISDIR(info.st_mode):
                    subdirectories.append(item.name)
    except OSError:  # listable but not searchable (mode r without x): no entry can be stat'ed
        walk.could_not_read(relative)
        return None
    tally.disk_bytes += disk
    tally.apparent_bytes += apparent
    tally.seen |= seen
    return subdirectories


def disk_bytes(info: os.stat_result) -> int:
    """The bytes ``info``'s file occupies on disk (``st_blocks`` is in 512-byte units, as du counts)."""
    return info.st_blocks * 512


def _enter(parent: int, name: str, relative: str, walk: SizeWalk, tally: Tally) -> Level | None:
    """Open and count subdirectory ``name`` of ``parent`` (never following a symlink swapped in
    for it); None when there is nothing to descend into."""
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
    except FileNotFoundError:  # removed meanwhile: nothing left to count
        return None
    except OSError:  # unreadable, or no longer a directory (a symlink swapped in is not followed)
        walk.could_not_read(relative)
        tally.exact = False
        return None
    try:
        subdirectories = _read_directory(fd, relative, walk, tally)
    except BaseException:
        os.close(fd)
        raise
    if subdirectories is None:
        os.close(fd)
        tally.exact = False
        return None
    return Level(fd, relative, subdirectories)


def tree_size(parent: int, name: str, walk: SizeWalk) -> TreeSize:
    """The disk use and apparent size of directory ``name`` of ``parent`` and everything under it
    (no symlinks followed, each inode once), and whether that is all of it: False when the walk
    ran out of entries or met a directory it could not read or too deep to hold open (then both
    sizes are lower bounds). Each directory is opened relative to the one above it, never by
    path, so one swapped for a symlink meanwhile is not followed. Raises `Abandoned` once the
    probe has given up (``walk.check``)."""
    try:
        own = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:  # removed meanwhile: nothing left to count
        return TreeSize(0, 0, True)
    tally = Tally(disk_bytes(own), own.st_size)
    levels: list[Level] = []
    try:
        first = _enter(parent, name, name, walk, tally)
        levels += [first] if first else []
        while levels and walk.budget >= 0:
            top = levels[-1]
            if not top.subdirectories:
                os.close(levels.pop().fd)
                continue
            child = top.subdirectories.pop()
            relative = f"{top.relative}/{child}"
            if len(levels) >= MAX_WALK_DEPTH:  # one descriptor per level held: keep them bounded
                walk.did_not_enter(relative)
                tally.exact = False
                continue
            level = _enter(top.fd, child, relative, walk, tally)
            levels += [level] if level else []
    finally:
        for level in levels:
            os.close(level.fd)
    return TreeSize(tally.disk_bytes, tally.apparent_bytes, tally.exact and walk.budget >= 0)
