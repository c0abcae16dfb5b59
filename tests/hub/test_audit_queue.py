"""The audit queue: many entries ride one store op, in order, and a bad entry loses only itself."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from sqlite_utils import Database

from sonde.hub.audit import AuditEntry, verify_audit
from sonde.hub.audit_budget import SUPPRESSED_ACTION, UnauthenticatedBudget
from sonde.hub.audit_query import query_audit
from sonde.hub.audit_queue import GAP_ACTION, AuditQueue
from sonde.hub.store import Store, open_store


@asynccontextmanager
async def flushing(
    store: Store, linger_s: float = 0.05, budget: UnauthenticatedBudget | None = None
) -> AsyncIterator[AuditQueue]:
    """An audit queue with its flusher running, as the hub runs it; stopped (queuing the rest) at exit."""
    queue = AuditQueue(store, linger_s=linger_s, budget=budget)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        yield queue
        nursery.cancel_scope.cancel()


async def count_rows(store: Store) -> int:
    count: int = await store.read(lambda db: db.execute("SELECT count(*) FROM audit").fetchone()[0])
    return count


def entry(i: int, **detail: object) -> AuditEntry:
    return AuditEntry(
        actor="key:k1", action="mcp.probe", target="web-1", outcome="ok", detail={"i": i, **detail}
    )


async def test_entries_from_many_tasks_share_store_ops_and_keep_their_order(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store, flushing(store) as queue:
        order: list[int] = []

        async def append(i: int) -> None:
            order.append(i)
            await queue.append(entry(i))

        async with trio.open_nursery() as nursery:
            for i in range(2000):
                nursery.start_soon(append, i)
    async with open_store(tmp_path / "hub.db") as store:
        details = await store.read(
            lambda db: [r[0] for r in db.execute("SELECT detail FROM audit ORDER BY seq")]
        )
        verification = await store.read(verify_audit)
    assert verification.ok, verification
    assert verification.rows == 2000
    assert [json.loads(d)["i"] for d in details] == order  # the chain holds them as they were appended


async def test_a_burst_is_written_in_a_few_store_ops(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store, flushing(store) as queue:
        for i in range(1000):
            await queue.append(entry(i))
        # the flusher's linger, then its write: milliseconds here, not always on a loaded machine
        # (a fixed 0.2 s wait read 0 rows there, the write still running)
        with trio.fail_after(10):
            while await count_rows(store) < 1000:  # noqa: ASYNC110 (committed by the flusher: no event)
                await trio.sleep(0.01)
        await wait_until(lambda: store.statistics().queued_ops == 0 and store.statistics().ops > 0)
        stats = store.statistics()
        assert await count_rows(store) == 1000
    assert stats.ops < 50, stats  # one op per flush, not one per entry


async def test_sequential_entries_linger_into_one_store_op(tmp_path: Path) -> None:
    """One call at a time (a probe every few ms) still shares a flush: the linger collects them."""
    # a linger far longer than the ten calls take (50 ms, more on a loaded machine: with 0.2 s
    # they could outlast it), and the write awaited by its outcome, not for a fixed time
    async with open_store(tmp_path / "hub.db") as store, flushing(store, linger_s=1.0) as queue:
        for i in range(10):
            await queue.append(entry(i))
            await trio.sleep(0.005)  # the writer is idle between calls
        assert await count_rows(store) == 0  # still lingering
        # the op's end, not its rows: readers see the rows before the writer task counts the op
        await wait_until(lambda: store.statistics().ops > 0)
        assert await count_rows(store) == 10
        assert store.statistics().ops == 1


async def test_flush_commits_at_once_and_a_stopped_flusher_queues_the_rest(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        async with flushing(store, linger_s=60) as queue:
            await queue.append(entry(1))
            await queue.flush()  # what an audit reader does first
            assert await count_rows(store) == 1
            await queue.append(entry(2))
            await queue.append(entry(3))
        # the flusher stopped long before its linger ran out: the rest is queued, then committed
    async with open_store(tmp_path / "hub.db") as store:
        assert await count_rows(store) == 3


async def test_an_unwritable_entry_is_logged_and_loses_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_store(tmp_path / "hub.db") as store, flushing(store) as queue:
        await queue.append(entry(1))
        await queue.append(entry(2, bad=float("nan")))
        await queue.append(entry(3))
    async with open_store(tmp_path / "hub.db") as store:
        rows = await store.read(query_audit)
        verification = await store.read(verify_audit)
    assert verification.ok
    assert sorted(row["detail"]["i"] for row in rows) == [1, 3]
    assert any(
        "audit entry key:k1 mcp.probe not written" in r.message
        for r in caplog.records
        if r.levelno == logging.ERROR
    )


async def test_past_the_bound_the_caller_waits_for_the_flush(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store, max_pending=5)
        for i in range(4):
            await queue.append(entry(i))
        await queue.append(entry(4))  # the fifth waits until everything so far is committed
        count = await count_rows(store)
    assert count == 5


async def limit_growth(store: Store, pages: int | None) -> None:
    """Let the database grow no further (SQLite then fails writes: "database or disk is full")."""

    def set_limit(db: Database) -> None:
        current = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {current if pages is None else pages}")

    await store.write(set_limit)


async def wait_until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not condition():  # noqa: ASYNC110 (the queue's state, moved by its flusher)
            await trio.sleep(0.01)


async def test_a_database_locked_by_another_process_is_named_as_the_cause(tmp_path: Path) -> None:
    """Not "free disk space": the refusal says another process holds the lock, and calls come back."""
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store, retry_s=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run)
            other = sqlite3.connect(tmp_path / "hub.db", isolation_level=None)
            other.execute("BEGIN EXCLUSIVE")  # a backup, an sqlite3 shell mid-transaction
            try:
                await queue.append(entry(0))
                with trio.fail_after(30):  # the store waits out its busy timeout first
                    await wait_until(lambda: queue.failure is not None)
                refusal = queue.refusal()
                assert refusal is not None
                assert "database is locked" in refusal
                assert "Another process holds the write lock of the hub's sonde.db" in refusal
                assert "free disk space" not in refusal
            finally:
                other.execute("ROLLBACK")
                other.close()
            await wait_until(lambda: queue.failure is None)
            nursery.cancel_scope.cancel()
        assert await count_rows(store) == 1  # written once the lock was let go


async def test_a_failing_write_keeps_the_entries_and_writes_them_once_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store, retry_s=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run)
            await queue.append(entry(0))
            await queue.flush()
            await limit_growth(store, None)
            for i in range(1, 301):
                await queue.append(entry(i))
            await wait_until(lambda: queue.failure is not None)
            refusal = queue.refusal()
            assert refusal is not None
            assert "database or disk is full" in refusal
            assert await count_rows(store) == 1
            await limit_growth(store, 1_000_000)
            await wait_until(lambda: queue.failure is None)
            assert queue.refusal() is None
            nursery.cancel_scope.cancel()
        rows = await store.read(query_audit, limit=1000)
        verification = await store.read(verify_audit)
    assert verification.ok
    assert sorted(row["detail"]["i"] for row in rows) == list(range(301))  # nothing lost
    messages = [r.message for r in caplog.records if r.name == "sonde.hub.audit_queue"]
    assert sum("cannot write the audit log" in m for m in messages) == 1  # once, not per retry
    assert any("written again" in m and "0 lost" in m for m in messages)


async def test_past_the_bound_while_failing_entries_are_counted_and_the_gap_is_recorded(
    tmp_path: Path,
) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store, max_pending=50, retry_s=0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run)
            await limit_growth(store, None)
            for i in range(40):
                await queue.append(entry(i))
            await wait_until(lambda: queue.failure is not None)
            for i in range(40, 80):
                await queue.append(entry(i))  # 10 more are kept, 30 are only counted
            await limit_growth(store, 1_000_000)
            await wait_until(lambda: queue.failure is None)
            nursery.cancel_scope.cancel()
        rows = await store.read(query_audit, limit=1000)
        verification = await store.read(verify_audit)
    assert verification.ok
    kept = [row for row in rows if row["action"] == "mcp.probe"]
    assert sorted(row["detail"]["i"] for row in kept) == list(range(50))
    [gap] = [row for row in rows if row["action"] == GAP_ACTION]
    assert gap["detail"]["lost"] == 30
    assert "database or disk is full" in gap["detail"]["reason"]


# --- the budget of entries no credential vouches for -------------------------------------


def refused_login(i: int) -> AuditEntry:
    return AuditEntry(
        actor="anonymous", action="rest.auth", target="/api/v1/agents", outcome="denied", detail={"i": i}
    )


async def rows_by_action(store: Store) -> dict[str, list[dict[str, object]]]:
    rows = await store.read(query_audit, limit=1000)
    found: dict[str, list[dict[str, object]]] = {}
    for row in reversed(rows):  # oldest first
        found.setdefault(row["action"], []).append(row)
    return found


async def test_entries_nobody_vouches_for_past_the_budget_are_counted_in_one_summary(tmp_path: Path) -> None:
    budget = UnauthenticatedBudget(burst=5, per_s=0.001, summary_every_s=3600)
    async with open_store(tmp_path / "hub.db") as store:
        queue = AuditQueue(store, linger_s=0.01, budget=budget)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run)
            for i in range(50):
                await queue.append_unauthenticated(refused_login(i))
                await queue.append(entry(i))  # a caller with a key: never counted against the budget
            await queue.flush()
            kept = await rows_by_action(store)
            assert [row["detail"]["i"] for row in kept["rest.auth"]] == [0, 1, 2, 3, 4]
            assert len(kept["mcp.probe"]) == 50
            assert SUPPRESSED_ACTION not in kept  # not due yet: at most one summary an hour here
            nursery.cancel_scope.cancel()  # the hub stops: what was counted goes on the chain
        after = await rows_by_action(store)
        (summary,) = after[SUPPRESSED_ACTION]
        assert summary["detail"]["suppressed"] == {"rest.auth": 45}
        assert summary["detail"]["since"] == pytest.approx(refused_login(5).ts, abs=60)
        assert (await store.read(verify_audit)).ok


async def test_a_summary_goes_on_the_chain_when_due_without_another_entry(tmp_path: Path) -> None:
    budget = UnauthenticatedBudget(burst=1, per_s=0.001, summary_every_s=0.3)
    async with open_store(tmp_path / "hub.db") as store, flushing(store, 0.01, budget) as queue:
        for i in range(4):
            await queue.append_unauthenticated(refused_login(i))
        for _ in range(100):  # the flusher wakes for the summary by itself
            if SUPPRESSED_ACTION in await rows_by_action(store):
                break
            await trio.sleep(0.05)
        found = await rows_by_action(store)
        assert [row["detail"]["i"] for row in found["rest.auth"]] == [0]
        assert [row["detail"]["suppressed"] for row in found[SUPPRESSED_ACTION]] == [{"rest.auth": 3}]
