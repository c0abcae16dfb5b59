"""A listing counts the entries it does not list, by kind.

`system.files.list` lists regular files only: a directory holding a FIFO, a socket and a
symlink said `total_entries: 0` and `complete: true`, as if it were empty. Now those are
counted in `other_entries`, and `system.files.directories` counts what is not a directory.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK

REGISTRY = PackRegistry.of([PACK])


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[Path]:
    """A directory with one entry of each kind a test can make: file, directory, symlink, FIFO, socket."""
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "app.log").write_text("x\n")
    (root / "old").mkdir()
    (root / "current.log").symlink_to(root / "app.log")
    os.mkfifo(root / "pipe")
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(root / "sock"))
        yield root


async def listing(root: Path, probe: str) -> dict[str, Any]:
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(root),)))
    return (await execute_probe(REGISTRY, probe, {"path": str(root)}, ctx)).result


async def test_files_list_counts_what_is_not_a_regular_file(mixed: Path) -> None:
    found = await listing(mixed, "system.files.list")
    assert [entry["name"] for entry in found["entries"]] == ["app.log"]
    assert found["total_entries"] == 1
    assert found["other_entries"] == {"directory": 1, "fifo": 1, "socket": 1, "symlink": 1}


async def test_files_directories_counts_what_is_not_a_directory(mixed: Path) -> None:
    found = await listing(mixed, "system.files.directories")
    assert [entry["name"] for entry in found["entries"]] == ["old"]
    assert found["other_entries"] == {"fifo": 1, "file": 1, "socket": 1, "symlink": 1}


async def test_a_directory_of_regular_files_has_no_others(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("a\n")
    assert (await listing(tmp_path, "system.files.list"))["other_entries"] == {}
