"""The postgres pack against PostgreSQL servers of the test's own (`tests.packs.pg_servers`).

What the shared server on 5432 cannot be made to show: a full server refusing ordinary
clients at max_connections less the reserved slots, a prepared transaction holding a
lock, failing WAL archiving, a lost replication slot, a database near transaction ID
wraparound, and a standby whose primary stopped. Each server is made in about a second
and stopped after; the standby test takes a few seconds more.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.postgres import PACK
from sonde.packs.postgres import runbook as postgres_runbook
from sonde.packs.postgres.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Finding, Threshold, human_bytes
from tests.packs.pg_servers import Server, as_owner, lone_server, primary_and_standby

REGISTRY = PackRegistry.of([PACK])
WAIT_S = 10
POLL_S = 0.1
RECORDED = Path(__file__).parent / "recorded"
# SONDE_RECORD_POSTGRES=1 writes the readings the recorded tests (test_postgres_recorded.py) replay
RECORD = os.environ.get("SONDE_RECORD_POSTGRES") == "1"
# the server all but the wraparound and standby tests share: a small limit of connections with
# reserved slots, prepared transactions, WAL archiving that always fails, 1 MiB WAL segments and
# slots allowed to hold only 1 MiB of WAL
OWN_SETTINGS = {
    "max_connections": "20",
    "superuser_reserved_connections": "3",
    "max_prepared_transactions": "2",
    "archive_mode": "on",
    "archive_command": "false",
    "max_slot_wal_keep_size": "1MB",
    "wal_keep_size": "0",
    "min_wal_size": "2MB",
    "max_wal_size": "4MB",
}


async def run(name: str, server: Server, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, server.params(**params), ProbeContext())).result


async def wait_for(
    name: str,
    server: Server,
    seen: Callable[[dict[str, Any]], bool],
    timeout_s: float = WAIT_S,
    **params: Any,
) -> dict[str, Any]:
    with trio.fail_after(timeout_s):
        while True:
            result = await run(name, server, **params)
            if seen(result):
                return result
            await trio.sleep(POLL_S)


def record(name: str, reading: dict[str, Any]) -> None:
    if RECORD:
        (RECORDED / f"postgres-{name}.json").write_text(json.dumps(reading, indent=1, sort_keys=True) + "\n")


def findings(probe: str, reading: dict[str, Any], runbook: Any = RUNBOOK) -> list[Finding]:
    return [f for f in runbook.evaluate({probe: reading}) if f.probe == probe]


@pytest.fixture(scope="module")
def own_server() -> Iterator[Server]:
    with lone_server(OWN_SETTINGS, "--wal-segsize=1") as server:
        server.sql(
            "CREATE ROLE app LOGIN", "CREATE ROLE watcher LOGIN", "CREATE TABLE t (id int PRIMARY KEY, n int)"
        )
        server.sql("INSERT INTO t VALUES (1, 0), (2, 0)", "GRANT ALL ON t TO app")
        yield server


@pytest.fixture
async def opened() -> AsyncIterator[list[psycopg.Connection[Any]]]:
    connections: list[psycopg.Connection[Any]] = []
    yield connections
    for connection in connections:
        await trio.to_thread.run_sync(connection.close)


async def test_no_slot_left_for_ordinary_clients_is_critical(
    own_server: Server, opened: list[psycopg.Connection[Any]]
) -> None:
    # 17 connections on max_connections 20 with 3 reserved for superusers: the server refused the
    # 18th non-superuser, and Sonde said 85 % and only warned that clients "will be refused"
    for _ in range(16):
        opened.append(await trio.to_thread.run_sync(own_server.connect, "app"))
    # the sessions of earlier statements (the fixture's) may take a moment to end and free their slots
    one_left = await wait_for("postgres.connections.usage", own_server, lambda r: r["total"] == 16)
    assert (one_left["max_connections"], one_left["superuser_reserved"]) == (20, 3)
    assert one_left["client_limit"] == 17  # PostgreSQL 16+: less reserved_connections too
    assert (one_left["total"], one_left["free_client_slots"], one_left["clients_refused"]) == (16, 1, False)
    assert one_left["usage_percent"] == round(16 * 100 / 17, 1)
    [warning] = findings("postgres.connections.usage", one_left)
    assert warning.severity == "critical"  # 94 %, past the 90 % threshold, but not refusing yet
    assert warning.title == "PostgreSQL uses 94.1% of the connection slots for ordinary clients"
    assert "max_connections 20 less 3 superuser_reserved_connections" in warning.detail
    assert "1 left before their logins are refused" in warning.detail
    opened.append(await trio.to_thread.run_sync(own_server.connect, "app"))  # the 17th: the last slot
    with pytest.raises(psycopg.OperationalError, match="remaining connection slots are reserved"):
        await trio.to_thread.run_sync(own_server.connect, "app")  # the server refuses the 18th
    full = await run("postgres.connections.usage", own_server)
    record("connections-refused", full)
    assert (full["total"], full["usage_percent"], full["free_client_slots"]) == (17, 100.0, 0)
    assert full["clients_refused"] is True
    [finding] = findings("postgres.connections.usage", full)
    assert finding.severity == "critical"
    assert finding.title == "PostgreSQL refuses new connections: all 17 slots for ordinary clients are taken"
    assert "17 client connections (idle 17) of the 17 (max_connections 20 less 3" in finding.detail
    assert "remaining connection slots are reserved" in finding.detail


async def test_a_transaction_left_idle_is_named_so(
    own_server: Server, opened: list[psycopg.Connection[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # BEGIN; SELECT 1; then idle 64 s read "A PostgreSQL query has been running for 64.2 s"
    monkeypatch.setattr(postgres_runbook, "LEFT_IDLE_S", 0.5)  # the 5 s it takes, made short
    idle = await trio.to_thread.run_sync(lambda: own_server.connect("app", autocommit=False))
    failed = await trio.to_thread.run_sync(lambda: own_server.connect("app", autocommit=False))
    opened += [idle, failed]
    await trio.to_thread.run_sync(lambda: idle.execute("SELECT 1"))
    await trio.to_thread.run_sync(lambda: failed.execute("SELECT n FROM t WHERE id = 1"))
    with pytest.raises(psycopg.errors.DivisionByZero):
        await trio.to_thread.run_sync(lambda: failed.execute("SELECT 1 / 0"))
    await trio.sleep(0.7)
    found = await run("postgres.queries.long_running", own_server, min_duration_s=0.5)
    record("idle-in-transaction", found)
    by_pid = {q["pid"]: q for q in found["queries"]}
    left, aborted = by_pid[idle.info.backend_pid], by_pid[failed.info.backend_pid]
    assert (left["state"], left["query"]) == ("idle in transaction", "SELECT ?")
    assert 0.7 <= left["idle_s"] <= left["transaction_s"]
    assert (aborted["state"], aborted["query"]) == ("idle in transaction (aborted)", "SELECT ? / ?")
    assert aborted["idle_s"] >= 0.7
    low = build_runbook({**THRESHOLDS, "long_query_s": Threshold(warning=0.5, critical=600, unit=" s")})
    [finding] = findings("postgres.queries.long_running", {**found, "queries": [left]}, low)
    assert finding.title.startswith("A PostgreSQL transaction has been left open and idle for ")
    assert "(open " in finding.title
    assert "running" not in finding.title
    assert f"PID {left['pid']}" in finding.detail
    assert "holds every lock" in finding.detail
    assert "keeps VACUUM from removing" in finding.detail
    [finding] = findings("postgres.queries.long_running", {**found, "queries": [aborted]}, low)
    assert finding.title.startswith("A failed PostgreSQL transaction has been left open and idle for ")
    assert "until it rolls back" in finding.detail
    for connection in (idle, failed):
        await trio.to_thread.run_sync(connection.rollback)


async def test_blockers_are_told_with_their_state_age_and_application(
    own_server: Server, opened: list[psycopg.Connection[Any]]
) -> None:
    # "Blocked PIDs [9509] wait on PIDs [9492]": who the blocker is was in the reading, not the finding
    holder = await trio.to_thread.run_sync(
        lambda: psycopg.connect(
            host="127.0.0.1", port=own_server.port, user="app", dbname="postgres", application_name="billing"
        )
    )
    waiter = await trio.to_thread.run_sync(own_server.connect, "app")
    opened += [holder, waiter]
    await trio.to_thread.run_sync(lambda: holder.execute("SELECT * FROM t WHERE id = 1 FOR UPDATE"))
    async with blocked_reading(own_server, waiter, "UPDATE t SET n = n + 1 WHERE id = 1") as found:
        await trio.to_thread.run_sync(holder.rollback)
    [blocker] = found["blockers"]
    assert (blocker["pid"], blocker["state"]) == (holder.info.backend_pid, "idle in transaction")
    assert blocker["idle_s"] >= 0
    assert found["prepared_transactions"] == []
    [finding] = findings("postgres.locks.blocked", found)
    assert f"wait on PID {holder.info.backend_pid} (idle in transaction for " in finding.detail
    assert ", transaction open " in finding.detail
    assert "user app, application 'billing')" in finding.detail


@asynccontextmanager
async def blocked_reading(
    server: Server, waiter: psycopg.Connection[Any], statement: str
) -> AsyncIterator[dict[str, Any]]:
    """``waiter`` runs ``statement`` in a thread until it is blocked; yields the first
    `postgres.locks.blocked` reading that lists it. The block must let the lock go."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, lambda: waiter.execute(statement))  # type: ignore[arg-type]
        yield await wait_for(
            "postgres.locks.blocked",
            server,
            lambda r: any(b["pid"] == waiter.info.backend_pid for b in r["blocked"]),
        )


def roll_back_prepared(server: Server) -> None:
    with server.connect() as connection:
        for [gid] in connection.execute("SELECT gid FROM pg_prepared_xacts").fetchall():
            connection.execute(f"ROLLBACK PREPARED '{gid}'")  # type: ignore[arg-type]  (the test's own gids)


async def test_a_prepared_transaction_is_named_as_the_blocker(
    own_server: Server, opened: list[psycopg.Connection[Any]]
) -> None:
    # pg_blocking_pids() gives 0 for a prepared transaction: "wait on PIDs [0]" and blockers []
    await trio.to_thread.run_sync(
        lambda: own_server.sql(
            "BEGIN", "UPDATE t SET n = 1 WHERE id = 2", "PREPARE TRANSACTION 'sonde-gid-1'"
        )
    )
    waiter = await trio.to_thread.run_sync(own_server.connect, "app")
    opened.append(waiter)
    try:
        await trio.to_thread.run_sync(lambda: waiter.execute("SET lock_timeout = '8s'"))
        async with blocked_reading(own_server, waiter, "UPDATE t SET n = 2 WHERE id = 2") as found:
            await trio.to_thread.run_sync(
                own_server.sql, "ROLLBACK PREPARED 'sonde-gid-1'"
            )  # the UPDATE goes
    finally:
        await trio.to_thread.run_sync(roll_back_prepared, own_server)  # if the test failed before
    record("blocked-by-prepared", found)
    [blocked] = [b for b in found["blocked"] if b["pid"] == waiter.info.backend_pid]
    assert blocked["blocking_pids"] == [0]
    assert found["blockers"] == []
    [prepared] = found["prepared_transactions"]
    assert (prepared["gid"], prepared["owner"], prepared["database"], prepared["blocking"]) == (
        "sonde-gid-1",
        "postgres",
        "postgres",
        True,
    )
    [finding] = findings("postgres.locks.blocked", found)
    assert "wait on prepared transaction 'sonde-gid-1' (owner postgres, database postgres, prepared at " in (
        finding.detail
    )
    assert "COMMIT PREPARED or ROLLBACK PREPARED" in finding.detail
    assert "PID 0" not in finding.detail


async def test_failing_archiving_and_a_lost_slot(own_server: Server) -> None:
    await trio.to_thread.run_sync(
        lambda: own_server.sql(
            "CREATE TABLE w (n int)", "SELECT pg_create_physical_replication_slot('gone', true)"
        )
    )
    for _ in range(6):  # six 1 MiB segments past the slot, which may hold only 1 MiB
        await trio.to_thread.run_sync(
            lambda: own_server.sql("INSERT INTO w SELECT generate_series(1, 2000)", "SELECT pg_switch_wal()")
        )
    await trio.to_thread.run_sync(lambda: own_server.sql("CHECKPOINT"))
    found = await wait_for("postgres.replication.status", own_server, lambda r: r["archiver"]["failing"])
    record("archiving-failing-slot-lost", found)
    [slot] = found["slots"]
    assert (slot["name"], slot["wal_status"]) == ("gone", "lost")
    archiver = found["archiver"]
    assert (archiver["archive_mode"], archiver["archived_count"], archiver["last_archived_at"]) == (
        "on",
        0,
        None,
    )
    assert archiver["failed_count"] >= 1
    assert archiver["last_failed_wal"]
    by_title = {f.title: f for f in findings("postgres.replication.status", found)}
    lost = by_title["Replication slot gone has lost WAL its consumer needs"]
    assert lost.severity == "critical"
    assert "wal_status 'lost'" in lost.detail
    failing = by_title["PostgreSQL's WAL archiving is failing"]
    assert failing.severity == "critical"  # never archived since the statistics were reset
    assert f"archive_command failed on {archiver['last_failed_wal']}" in failing.detail
    assert "none succeeded" in failing.detail
    await trio.to_thread.run_sync(lambda: own_server.sql("SELECT pg_drop_replication_slot('gone')"))


def zero_clog_segment(server: Server, xid: int) -> None:
    """The commit log segment holding ``xid``, zeroed: pg_resetwal -x needs it (its manual says so)."""
    segment = server.data / "pg_xact" / f"{xid // (8192 * 4 * 32):04X}"
    command = ["dd", "if=/dev/zero", f"of={segment}", "bs=8192", "count=32"]
    subprocess.run(as_owner(command), check=True, capture_output=True, timeout=10)


async def test_a_database_near_wraparound_is_critical() -> None:
    # Nothing read the age of the databases' oldest transaction IDs: pg_resetwal moves the next one
    # to 1.65e9, so every database is 1.65e9 transactions old. Autovacuum would freeze them at once,
    # even when off, past autovacuum_freeze_max_age: that is set to its highest, 2e9.
    xid = 1_650_000_000
    with lone_server({"autovacuum": "off", "autovacuum_freeze_max_age": "2000000000"}) as server:
        server.stop("fast")
        server.run("pg_resetwal", "-x", str(xid), "-D", str(server.data))
        zero_clog_segment(server, xid)
        server.start()
        found = await run("postgres.vacuum.wraparound", server)
        healthy = await run("postgres.vacuum.wraparound", server, limit=1)
    record("wraparound", found)
    oldest = found["oldest"]
    assert oldest["xid_age"] >= xid - 1_000_000
    assert oldest["multixact_age"] < 10
    assert oldest["wraparound_percent"] == round(oldest["xid_age"] * 100 / 2**31, 1) > 75
    assert {db["name"] for db in found["databases"]} == {"postgres", "template0", "template1"}
    assert (found["autovacuum"], found["autovacuum_freeze_max_age"]) == (False, 2_000_000_000)
    assert (len(healthy["databases"]), healthy["truncated"], healthy["oldest"]) == (1, True, oldest)
    off, finding = sorted(
        findings("postgres.vacuum.wraparound", found), key=lambda f: "wraparound" in f.title
    )
    assert (off.severity, off.title) == ("warning", "PostgreSQL's autovacuum is off")
    assert finding.severity == "critical"
    assert finding.title == (
        f"PostgreSQL database {oldest['name']} is {oldest['wraparound_percent']:g}% of the way to transaction "
        "ID wraparound"
    )
    assert "2 other databases are past 1,200,000,000 too" in finding.detail
    assert "autovacuum is off" in finding.detail
    assert (
        "autovacuum_freeze_max_age is 2,000,000,000: autovacuum forces no freezing vacuum" in finding.detail
    )


async def test_a_standby_whose_primary_stopped_is_not_streaming() -> None:
    # Primary stopped behind a caught-up standby: replay_delay_s 0.0, receiver_status null, no finding
    with trio.fail_after(20), primary_and_standby() as (primary, standby):
        *_, (written,) = primary.sql(
            "CREATE ROLE watcher LOGIN", "CREATE TABLE t (n int)", "SELECT pg_current_wal_lsn()"
        )
        # caught up past the role (the standby logs in as watcher below): a gap of 0 alone may
        # be a standby that has not yet received it
        streaming = await wait_for(
            "postgres.replication.status",
            standby,
            lambda r: (
                r["standby"]["receiver_status"] == "streaming"
                and r["standby"]["receive_replay_gap_bytes"] == 0
                and standby.sql(f"SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn")[0][0]
            ),
        )
        assert streaming["role"] == "standby"
        assert streaming["standby"]["receiver_running"] is True
        assert streaming["standby"]["primary_address"] == f"127.0.0.1:{primary.port}"
        assert (
            streaming["standby"]["restore_command_set"],
            streaming["standby"]["primary_conninfo_set"],
        ) == (
            False,
            True,
        )
        assert findings("postgres.replication.status", streaming) == []

        # the primary's view, and a login without pg_monitor's: the replica's lag hidden, and said so
        seen = await wait_for("postgres.replication.status", primary, lambda r: len(r["replicas"]) == 1)
        [replica] = seen["replicas"]
        assert (replica["state"], replica["hidden"], seen["hidden_replicas"]) == ("streaming", False, 0)
        hidden = await run("postgres.replication.status", primary, user="watcher")
        record("primary-replica-hidden", hidden)
        [replica] = hidden["replicas"]
        assert (replica["state"], replica["replay_lag_s"], replica["hidden"]) == (None, None, True)
        assert (hidden["sees_all_sessions"], hidden["hidden_replicas"]) == (False, 1)
        assert "pg_monitor" in hidden["visibility"]
        [info] = findings("postgres.replication.status", hidden)
        assert (info.severity, info.title) == ("info", "1 PostgreSQL replicas could not be checked for lag")
        assert "pg_monitor" in info.detail
        on_standby = await run("postgres.replication.status", standby, user="watcher")
        assert on_standby["standby"]["receiver_running"] is True
        assert (on_standby["standby"]["receiver_status"], on_standby["standby"]["primary_conninfo_set"]) == (
            None,
            None,
        )
        [info] = findings("postgres.replication.status", on_standby)
        assert (info.severity, info.title) == ("info", "This standby's WAL receiver status could not be read")

        # replay paused: WAL still comes in, is not applied, and the finding says paused
        standby.sql("SELECT pg_wal_replay_pause()")
        primary.sql("INSERT INTO t SELECT generate_series(1, 1000)")
        paused = await wait_for(
            "postgres.replication.status",
            standby,
            lambda r: r["standby"]["replay_paused"] and (r["standby"]["receive_replay_gap_bytes"] or 0) > 0,
        )
        record("standby-replay-paused", paused)
        [finding] = findings("postgres.replication.status", paused)
        assert finding.severity == "warning"
        assert finding.title.startswith("WAL replay is paused on this standby")
        assert (
            f"{human_bytes(paused['standby']['receive_replay_gap_bytes'])} received are not replayed"
            in finding.detail
        )
        assert "pg_wal_replay_resume()" in finding.detail
        standby.sql("SELECT pg_wal_replay_resume()")
        await wait_for(
            "postgres.replication.status", standby, lambda r: r["standby"]["receive_replay_gap_bytes"] == 0
        )

        # the primary stops: no WAL receiver runs, and that is critical though replay reads caught up
        primary.stop("fast")
        lost = await wait_for(
            "postgres.replication.status", standby, lambda r: not r["standby"]["receiver_running"]
        )
        record("standby-primary-lost", lost)
    assert lost["role"] == "standby"
    assert (lost["standby"]["replay_delay_s"], lost["standby"]["receiver_status"]) == (0.0, None)
    [finding] = findings("postgres.replication.status", lost)
    assert (finding.severity, finding.title) == ("critical", "This standby is not streaming from its primary")
    assert "pg_stat_wal_receiver is empty" in finding.detail
    assert "restore_command is empty" in finding.detail


async def test_a_standby_that_replays_from_the_archive_alone_is_no_alarm() -> None:
    # Log shipping by design (no primary_conninfo, a restore_command): no WAL receiver ever runs,
    # and Sonde called it critical, "not streaming from its primary".
    with trio.fail_after(30), primary_and_standby(log_shipping=True) as (primary, standby):
        primary.sql("CREATE TABLE t (n int)", "INSERT INTO t VALUES (1)", "SELECT pg_switch_wal()")
        shipped = await wait_for(
            "postgres.replication.status",
            standby,
            lambda r: r["standby"]["last_replayed_xact_s"] is not None,
            timeout_s=20,  # the archived segment is fetched on the standby's next retry (every 5 s)
        )
    assert shipped["role"] == "standby"
    standby_reading = shipped["standby"]
    assert (
        standby_reading["receiver_running"],
        standby_reading["primary_conninfo_set"],
        standby_reading["restore_command_set"],
    ) == (False, False, True)
    [finding] = findings("postgres.replication.status", shipped)
    assert (finding.severity, finding.title) == (
        "info",
        "This standby replays WAL from the archive only, not streaming",
    )
    assert "The last transaction it replayed committed" in finding.detail
    assert "its lag is not judged here" in finding.detail
