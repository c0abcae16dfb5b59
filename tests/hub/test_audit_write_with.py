"""`AuditQueue.write_with` (`Hub.write_audited`): a change and its audit entry in one transaction.

Before, an admin change (a key created, an agent removed) was committed at once and its entry
queued, committed up to `LINGER_S` later: a crash in between kept the change and lost the entry
(tests/e2e/test_admin_audit_atomic.py kills a real hub there). Now both are one store op, after
the entries waiting in the queue, so the chain keeps their order and their times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from sqlite_utils import Database

from sonde.hub.audit import AuditEntry, audit_entry, verify_audit
from sonde.hub.audit_query import query_audit
from sonde.hub.audit_queue import AuditQueue, UnwritableEntry
from sonde.hub.db import get_meta, set_meta
from sonde.hub.store import Store, StoreCommitFailed, open_store
from tests.hub.test_audit_queue import entry, limit_growth


def mark(key: str) -> Callable[[Database], str]:
    """A change: one meta row written (a stand-in for a key created, an agent removed)."""

    def change(db: Database) -> str:
        set_meta(db, key, "made")
        return key

    return change


def entry_for(key: str) -> AuditEntry:
    return audit_entry("key:admin", "rest.change", key, "ok", detail={"key": key})


async def rows_oldest_first(store: Store) -> list[dict[str, object]]:
    return list(reversed(await store.read(query_audit, limit=1000)))


async def test_the_change_and_its_entry_commit_together_after_the_entries_waiting(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)  # no flusher: the entries wait until a write takes them
        for i in range(3):
            await queue.append(entry(i))
        made = await queue.write_with(mark("first"), entry_for)
        assert made == "first"
        rows = await rows_oldest_first(store)  # nothing flushed: the one write took them all
        assert [row["action"] for row in rows] == ["mcp.probe"] * 3 + ["rest.change"]
        assert rows[-1]["target"] == "first"
        assert await store.read(get_meta, "first") == "made"
        times = [row["ts"] for row in rows]
        assert times == sorted(times)  # the chain is in the order of time too
        assert (await store.read(verify_audit)).ok


async def test_a_change_that_raises_leaves_nothing_and_the_entries_waiting_are_written(
    tmp_path: Path,
) -> None:
    def refused(db: Database) -> str:
        set_meta(db, "half", "made")
        raise LookupError("no such key")

    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        await queue.append(entry(0))
        with pytest.raises(LookupError, match="no such key"):
            await queue.write_with(refused, entry_for)
        assert await store.read(get_meta, "half") is None
        assert [row["action"] for row in await rows_oldest_first(store)] == ["mcp.probe"]
        assert (await store.read(verify_audit)).ok


async def test_an_entry_that_cannot_be_encoded_undoes_its_change(tmp_path: Path) -> None:
    def unencodable(key: str) -> AuditEntry:
        return AuditEntry(
            actor="key:admin", action="rest.change", target=key, outcome="ok", detail={"x": math.nan}
        )

    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        with pytest.raises(UnwritableEntry, match=r"rest\.change"):
            await queue.write_with(mark("nan"), unencodable)
        assert await store.read(get_meta, "nan") is None
        assert await store.read(query_audit) == []


async def test_no_entry_records_nothing_but_the_change(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        assert await queue.write_with(mark("quiet"), lambda _: None) == "quiet"
        assert await store.read(get_meta, "quiet") == "made"
        assert await store.read(query_audit) == []


async def test_a_write_the_database_refuses_changes_nothing_and_the_entries_waiting_stay(
    tmp_path: Path,
) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        await limit_growth(store, None)  # "database or disk is full"
        with pytest.raises(StoreCommitFailed, match="full"):  # the change's own statement fails
            await queue.write_with(mark("big" * 2000), entry_for)
        await queue.append(entry(0))
        for i in range(1, 200):
            await queue.append(entry(i))
        with pytest.raises(StoreCommitFailed, match="full") as failed:
            await queue.write_with(mark("full"), entry_for)
        assert not failed.value.locked  # a REST caller is told the disk, an agent's link says why
        assert await store.read(get_meta, "full") is None
        await limit_growth(store, 1_000_000)
        await queue.flush()  # what waited is written: nothing lost
        rows = await rows_oldest_first(store)
    assert [row["detail"]["i"] for row in rows] == list(range(200))  # type: ignore[index]
    assert queue.failure is None


async def test_an_entry_queued_while_the_write_runs_comes_after_it_in_time_too(tmp_path: Path) -> None:
    """The change's entry is timed when its write begins: one appended meanwhile is later on the
    chain and later in time (an audit prune cuts at the first row past its cutoff)."""
    started = trio.Event()

    def slow(db: Database) -> str:
        trio.from_thread.run_sync(started.set)
        trio.from_thread.run(trio.sleep, 0.05)
        set_meta(db, "slow", "made")
        return "slow"

    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.write_with, slow, entry_for)
            await started.wait()
            await queue.append(entry(1))
        await queue.flush()
        rows = await rows_oldest_first(store)
    assert [row["action"] for row in rows] == ["rest.change", "mcp.probe"]
    assert rows[0]["ts"] <= rows[1]["ts"]  # type: ignore[operator]
