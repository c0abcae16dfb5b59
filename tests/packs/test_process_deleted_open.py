"""`system.process.info` counts the files a process holds open after they were deleted.

psutil's open files leave them out: a process holding 15,000 deleted files showed
`open_files_count` 2 beside `num_fds` 15,005. Here this test process holds a few.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK, process_info

REGISTRY = PackRegistry.of([PACK])
HELD = 20


async def info() -> dict[str, Any]:
    return (await execute_probe(REGISTRY, "system.process.info", {"pid": os.getpid()}, ProbeContext())).result


@pytest.fixture
def deleted_held(tmp_path: Path) -> Iterator[None]:
    """`HELD` files this process keeps open after deleting them."""
    with ExitStack() as stack:
        for number in range(HELD):
            path = tmp_path / f"rotated-{number}.log"
            stack.enter_context(path.open("wb"))
            path.unlink()
        yield


async def test_deleted_files_held_open_are_counted(tmp_path: Path) -> None:
    before = await info()
    with ExitStack() as stack:
        stack.enter_context((tmp_path / "kept.log").open("wb"))  # open, not deleted: not counted
        for number in range(HELD):
            path = tmp_path / f"rotated-{number}.log"
            stack.enter_context(path.open("wb"))
            path.unlink()
        during = await info()
    assert during["deleted_open_files_count"] - before["deleted_open_files_count"] == HELD
    assert during["open_files_count"] - before["open_files_count"] == 1  # psutil's: the kept one only
    assert during["num_fds"] - before["num_fds"] >= HELD + 1
    assert during["deleted_open_files_complete"] is True


async def test_the_count_is_bounded(monkeypatch: pytest.MonkeyPatch, deleted_held: None) -> None:
    monkeypatch.setattr(process_info, "FDS_LOOKED_MAX", 3)
    held = await info()
    assert held["deleted_open_files_count"] <= 3
    assert held["deleted_open_files_complete"] is False
