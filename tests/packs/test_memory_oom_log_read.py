"""system.memory.usage reads the kernel log for OOM kills only when /proc/vmstat's count moved.

Before, every reading on a machine that had one OOM kill since boot ran dmesg: about 50 times a
second under the benchmarks' agent load, where a reading is otherwise two /proc reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from sonde.packs.system import memory
from sonde.packs.system.kernel import KernelLog, KernelMessage

KILLED = KernelMessage(
    level="err",
    facility="kern",
    seconds_since_boot=1.0,
    time=None,
    message="Memory cgroup out of memory: Killed process 6104 (python3) total-vm:1kB",
)


async def test_the_log_is_read_again_only_when_the_count_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[Any, ...]] = []

    async def read_kernel_log(ctx: Any, levels: tuple[Any, ...] = ()) -> KernelLog:
        reads.append(levels)
        return KernelLog([KILLED] * len(reads), "json", False)

    monkeypatch.setattr(memory, "read_kernel_log", read_kernel_log)
    seen = memory.KillsRead()
    first, _ = await seen.recent(None, 1)  # type: ignore[arg-type]
    again, _ = await seen.recent(None, 1)  # type: ignore[arg-type]
    assert len(reads) == 1
    assert first is not None
    assert again is not None
    assert [k.pid for k in again] == [6104]
    assert again[0].seconds_ago >= first[0].seconds_ago  # timed anew, on the kernel's clock
    moved, _ = await seen.recent(None, 2)  # type: ignore[arg-type]
    assert len(reads) == 2
    assert moved is not None
    assert len(moved) == 2
    assert await seen.recent(None, 0) == ([], None)  # none since boot: nothing to read
    assert len(reads) == 2


async def test_a_log_it_may_not_read_is_not_tried_again_at_the_same_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries: list[int] = []

    async def read_kernel_log(ctx: Any, levels: tuple[Any, ...] = ()) -> KernelLog:
        tries.append(1)
        raise PermissionError("dmesg: read kernel buffer failed: Operation not permitted")

    monkeypatch.setattr(memory, "read_kernel_log", read_kernel_log)
    seen = memory.KillsRead()
    for _ in range(3):
        kills, why = await seen.recent(None, 5)  # type: ignore[arg-type]
        assert kills is None
        assert why is not None
        assert "not permitted" in why
    assert len(tries) == 1
