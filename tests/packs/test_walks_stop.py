"""A probe that walks many entries in a thread stops that thread when it gives up.

`system.files.directories` sorted by size walked up to 200,000 entries in its worker
thread and ran on to the end of the walk after its probe was cancelled (at its deadline
or by its caller); enough such threads and the agent refuses every thread-backed probe.
Here each walk is held at its first entry while its probe is cancelled, then let go: it
must stop within `STOP_CHECK_EVERY` entries, not walk the rest of a tree far bigger.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK, deleted_files, dirsize, files
from sonde.packs.system.abandon import STOP_CHECK_EVERY
from tests.packs.given_up import cancel_once_entered, wait_threads_returned

REGISTRY = PackRegistry.of([PACK])
SUBDIRECTORIES = 30
FILES_EACH = 100  # 3,000 files beneath: a dozen times what a walk may visit once told to stop
DESCRIPTORS_HELD = 1000


class HeldAtFirst:
    """Wraps a function a walk calls once per entry: counts the calls, and holds the first
    until ``release`` (so the probe can be cancelled while its thread is mid-walk)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.calls = 0
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(30)
        return self.function(*args)


def big_tree(root: Path) -> Path:
    for directory in range(SUBDIRECTORIES):
        (root / f"d{directory:02d}").mkdir()
        for number in range(FILES_EACH):
            (root / f"d{directory:02d}" / f"f{number:03d}").write_bytes(b"x")
    return root


def many_files(root: Path) -> Path:
    for number in range(SUBDIRECTORIES * FILES_EACH):
        (root / f"f{number:04d}").write_bytes(b"x")
    return root


async def cancel_while_held(ctx: ProbeContext, probe: str, params: dict[str, Any], held: HeldAtFirst) -> int:
    """Run ``probe``, cancel it while ``held`` holds its thread, let the thread go and wait for it
    to return: how many more calls it made before it did."""
    await cancel_once_entered(partial(execute_probe, REGISTRY, probe, params, ctx), held.entered)
    assert ctx.threads.stuck == 1
    calls = held.calls
    held.release.set()
    await wait_threads_returned(ctx)
    return held.calls - calls


@pytest.mark.parametrize(
    ("probe", "sort_by", "module", "per_entry", "make"),
    [
        ("system.files.directories", "size", dirsize, "disk_bytes", big_tree),  # the size walk
        ("system.files.list", "name", files, "kind_of", many_files),  # the listing's scan
    ],
)
async def test_a_listing_past_its_deadline_stops_its_thread(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    probe: str,
    sort_by: str,
    module: object,
    per_entry: str,
    make: Callable[[Path], Path],
) -> None:
    root = make(tmp_path)
    held = HeldAtFirst(getattr(module, per_entry))
    monkeypatch.setattr(module, per_entry, held)
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)))
    more = await cancel_while_held(ctx, probe, {"path": str(root), "sort_by": sort_by}, held)
    assert more <= STOP_CHECK_EVERY, more  # without the flag: the other 3,000 entries


@pytest.fixture
def descriptors(tmp_path: Path) -> Any:
    """This process holds `DESCRIPTORS_HELD` more descriptors, so a sweep of /proc has that many more to look at."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(DESCRIPTORS_HELD)]
    yield held
    for fd in held:
        os.close(fd)


async def test_a_sweep_for_deleted_open_files_past_its_deadline_stops_its_thread(
    monkeypatch: pytest.MonkeyPatch, descriptors: list[int]
) -> None:
    held = HeldAtFirst(deleted_files.deleted_file)
    monkeypatch.setattr(deleted_files, "deleted_file", held)
    more = await cancel_while_held(ProbeContext(), "system.files.deleted_open", {}, held)
    assert more <= STOP_CHECK_EVERY, more  # without the flag: every descriptor of every process
