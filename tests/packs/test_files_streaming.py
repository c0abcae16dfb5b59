"""system.files.list streams a big directory: the right top entries, at the memory of `limit`.

Before, the listing held a `Stat` (and a DirEntry) for every entry of the directory
before cutting to ``limit``: some 430 MiB for 300,000 files. Now it keeps only the
top ``limit`` as it goes, so its peak stays far below what 50,000 entries cost.
"""

from __future__ import annotations

import functools
import os
import tracemalloc
from pathlib import Path

import pytest

from sonde.packs.system import dirsize, files
from sonde.packs.system.dirsize import SizeWalk, tree_size
from sonde.packs.system.files import ListingParams, SortKey, _list

FILES = 50_000
LIMIT = 10
PEAK_LIMIT_BYTES = 1024 * 1024  # holding the 50,000 entries took well over 10 MiB


@pytest.fixture(scope="module")
def big_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("big")
    for number in range(FILES):
        with (directory / f"f{number:05d}").open("wb") as file:
            file.truncate(number % 97)  # sizes that tie, so names must break ties
    _list(directory, ListingParams(path=str(directory), limit=1), "file")  # what a first call imports
    return directory


def _expected(directory: Path, sort_by: SortKey, descending: bool) -> list[str]:
    def key(name: str) -> tuple[float | str, str]:
        info = os.lstat(directory / name)
        return {"name": name, "size": info.st_size, "mtime": info.st_mtime}[sort_by], name

    return sorted(os.listdir(directory), key=key, reverse=descending)[:LIMIT]


def _peak_of_list(directory: Path, params: ListingParams) -> tuple[files.Listing, int]:
    tracemalloc.start()
    try:
        listing = _list(directory, params, "file")
        return listing, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("sort_by", "descending"), [("name", False), ("size", True), ("mtime", True)])
def test_top_entries_of_a_big_directory_in_little_memory(
    big_directory: Path, sort_by: SortKey, descending: bool
) -> None:
    params = ListingParams(path=str(big_directory), sort_by=sort_by, descending=descending, limit=LIMIT)
    listing, peak = _peak_of_list(big_directory, params)
    assert [entry.name for entry in listing.entries] == _expected(big_directory, sort_by, descending)
    assert (listing.total_entries, listing.truncated, listing.complete) == (FILES, True, True)
    assert peak < PEAK_LIMIT_BYTES


def test_a_listing_looks_at_no_more_than_its_cap(
    big_directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_LIST_ENTRIES", 1000)
    listing = _list(big_directory, ListingParams(path=str(big_directory), limit=LIMIT), "file")
    assert (listing.total_entries, listing.truncated, listing.complete) == (1000, True, False)
    assert len(listing.entries) == LIMIT


def test_the_size_walk_stops_reading_at_its_budget(big_directory: Path) -> None:
    parent = os.open(big_directory.parent, os.O_RDONLY | os.O_DIRECTORY)
    tracemalloc.start()
    try:
        size = tree_size(parent, big_directory.name, SizeWalk(budget=100))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        os.close(parent)
    assert not size.complete
    assert peak < PEAK_LIMIT_BYTES // 4


def test_the_size_walk_holds_one_descriptor_per_level_and_no_more_than_its_depth(tmp_path: Path) -> None:
    deepest = tmp_path.joinpath("top", *["d"] * (dirsize.MAX_WALK_DEPTH + 5))
    deepest.mkdir(parents=True)
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk = SizeWalk()
        size = tree_size(parent, "top", walk)
    finally:
        os.close(parent)
    assert not size.complete
    # past the depth cap: told apart from a directory it may not read
    assert walk.too_deep == ["/".join(["top", *["d"] * dirsize.MAX_WALK_DEPTH])]
    assert walk.too_deep_count == 1
    assert walk.unreadable == []


@pytest.mark.parametrize("descending", [True, False])
def test_directories_the_walk_never_reached_have_no_size_and_come_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, descending: bool
) -> None:
    """Ranked by their own entry's 4 KiB, the biggest directory could drop out of a top-N."""
    for name in ("many-a", "many-b", "many-c"):
        (tmp_path / name).mkdir()
        for number in range(100):
            (tmp_path / name / f"f{number}").touch()
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "data").write_bytes(b"x" * 1024 * 1024)
    monkeypatch.setattr(files, "SizeWalk", functools.partial(SizeWalk, budget=50))
    params = ListingParams(path=str(tmp_path), sort_by="size", descending=descending, limit=10)
    listing = _list(tmp_path, params, "directory")
    sizes = [entry.size_bytes for entry in listing.entries]
    assert len(sizes) == 4
    assert sizes[0] is not None  # the one walked first: a lower bound
    assert sizes[1:] == [None, None, None]  # the rest were never reached
    assert not any(entry.size_complete for entry in listing.entries)
    assert not listing.complete
