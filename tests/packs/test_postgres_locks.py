"""postgres.locks.blocked for a login without pg_monitor, against the real PostgreSQL on 127.0.0.1:5432.

What such a login sees, checked on the server: all of ``pg_locks`` and
``pg_blocking_pids()``, so every blocked session and its blockers are found; of other
users' sessions in ``pg_stat_activity`` only the pid, user, database and application:
state, wait, client and times read NULL, and the query '<insufficient privilege>'.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio

from sonde.packs.postgres.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.runbook import Threshold, human_seconds
from tests.packs.test_postgres import (
    connect,
    execute,
    postgres_runs,  # noqa: F401  (autouse: no server, a skip; under CI=true, a failure)
    run,
    wait_for,
)


def connect_as(role: str, database: str, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(
        f"host=127.0.0.1 port=5432 user={role} dbname={database} connect_timeout=3", autocommit=autocommit
    )


@pytest.fixture
async def strangers() -> AsyncIterator[tuple[str, str, str]]:
    """A login role without pg_monitor, another role, and a database the other owns; dropped afterwards."""
    suffix = uuid.uuid4().hex[:12]
    login, other, database = f"sonde_lk_{suffix}_login", f"sonde_lk_{suffix}_other", f"sonde_lk_{suffix}"
    admin = await trio.to_thread.run_sync(connect)
    try:
        for sql in (
            f"CREATE ROLE {login} LOGIN",
            f"CREATE ROLE {other} LOGIN",
            f"CREATE DATABASE {database} OWNER {other}",
        ):
            await trio.to_thread.run_sync(execute, admin, sql)
        yield login, other, database
    finally:
        for sql in (
            f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
            f"DROP ROLE IF EXISTS {other}",
            f"DROP ROLE IF EXISTS {login}",
        ):
            await trio.to_thread.run_sync(execute, admin, sql)
        await trio.to_thread.run_sync(admin.close)


@pytest.fixture
async def blocked_stranger(strangers: tuple[str, str, str]) -> AsyncIterator[tuple[str, int, int]]:
    """Another user's session blocked by another of theirs: the login without pg_monitor and both pids."""
    login, other, database = strangers
    holder = await trio.to_thread.run_sync(connect_as, other, database, False)
    waiter = await trio.to_thread.run_sync(connect_as, other, database)
    try:
        await trio.to_thread.run_sync(execute, waiter, "CREATE TABLE t (id int PRIMARY KEY, n int)")
        await trio.to_thread.run_sync(execute, waiter, "INSERT INTO t VALUES (1, 0)")
        await trio.to_thread.run_sync(execute, holder, "SELECT * FROM t WHERE id = 1 FOR UPDATE")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                trio.to_thread.run_sync, execute, waiter, "UPDATE t SET n = n + 1 WHERE id = 1"
            )
            yield login, holder.info.backend_pid, waiter.info.backend_pid
            await trio.to_thread.run_sync(holder.rollback)  # the waiter's UPDATE now goes through
    finally:
        await trio.to_thread.run_sync(holder.close)
        await trio.to_thread.run_sync(waiter.close)


async def test_blocked_locks_say_what_a_login_without_pg_monitor_cannot_see(
    blocked_stranger: tuple[str, int, int],
) -> None:
    # The blocked session and its blocker were listed with state, wait and times null and
    # the query '<insufficient privilege>', and nothing said why.
    login, holder_pid, waiter_pid = blocked_stranger
    full = await wait_for(
        "postgres.locks.blocked", {}, lambda r: waiter_pid in {b["pid"] for b in r["blocked"]}
    )
    limited = await run("postgres.locks.blocked", user=login)
    [blocked] = [b for b in limited["blocked"] if b["pid"] == waiter_pid]
    assert blocked["blocking_pids"] == [holder_pid]  # pg_locks and pg_blocking_pids hide nothing
    assert (blocked["state"], blocked["wait_event_type"], blocked["duration_s"]) == (None, None, None)
    assert holder_pid in {b["pid"] for b in limited["blockers"]}
    assert (limited.get("sees_all_sessions"), limited.get("hidden_sessions", 0) >= 2) == (False, True)
    assert "pg_monitor" in limited["visibility"]
    assert f"{limited['hidden_sessions']} " in limited["visibility"]
    assert (full["sees_all_sessions"], full["hidden_sessions"], full["visibility"]) == (True, 0, None)
    [full_blocked] = [b for b in full["blocked"] if b["pid"] == waiter_pid]
    assert (full_blocked["state"], full_blocked["wait_event_type"]) == ("active", "Lock")
    [finding] = RUNBOOK.evaluate({"postgres.locks.blocked": limited})
    assert finding.detail.endswith(f". {limited['visibility']}")
    [finding] = RUNBOOK.evaluate({"postgres.locks.blocked": full})
    assert "pg_monitor" not in finding.detail


async def test_pg_monitor_shows_the_blocked_sessions_in_full(blocked_stranger: tuple[str, int, int]) -> None:
    login, _, waiter_pid = blocked_stranger
    admin = await trio.to_thread.run_sync(connect)
    try:
        await trio.to_thread.run_sync(execute, admin, f"GRANT pg_monitor TO {login}")
        found = await wait_for(
            "postgres.locks.blocked",
            {"user": login},
            lambda r: waiter_pid in {b["pid"] for b in r["blocked"]},
        )
    finally:
        await trio.to_thread.run_sync(admin.close)
    [blocked] = [b for b in found["blocked"] if b["pid"] == waiter_pid]
    assert blocked["query"] == "UPDATE t SET n = n + ? WHERE id = ?"
    assert (found["sees_all_sessions"], found["hidden_sessions"], found["visibility"]) == (True, 0, None)


async def test_a_long_wait_on_a_lock_is_critical(blocked_stranger: tuple[str, int, int]) -> None:
    # Blocked-lock findings rose with the count only (critical at 5), never with how long one waited
    login, _, waiter_pid = blocked_stranger
    found = await wait_for(
        "postgres.locks.blocked",
        {},
        lambda r: any(b["pid"] == waiter_pid and (b["waiting_s"] or 0) >= 1 for b in r["blocked"]),
    )
    [blocked] = [b for b in found["blocked"] if b["pid"] == waiter_pid]
    assert 1 <= blocked["waiting_s"] <= blocked["duration_s"] + 0.001
    one = {**found, "blocked": [blocked]}  # other tests' sessions on this server may be blocked too
    [finding] = RUNBOOK.evaluate({"postgres.locks.blocked": one})
    assert finding.severity == "warning"  # under a minute
    assert (
        finding.title
        == f"1 PostgreSQL session is blocked by a lock for {human_seconds(blocked['waiting_s'])}"
    )
    waited = build_runbook({**THRESHOLDS, "blocked_wait_s": Threshold(warning=0, critical=1, unit=" s")})
    [finding] = waited.evaluate({"postgres.locks.blocked": one})
    assert finding.severity == "critical"
    limited = await run("postgres.locks.blocked", user=login)
    [hidden] = [b for b in limited["blocked"] if b["pid"] == waiter_pid]
    assert hidden["waiting_s"] is None  # another user's session: its times are hidden
