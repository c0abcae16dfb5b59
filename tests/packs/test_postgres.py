"""The postgres pack against the real PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres).

Each test makes the condition a finding looks for (many connections, a long query, a
blocked lock), checks the probe sees it and the runbook flags it, and cleans up.
"""

from __future__ import annotations

import re
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from sonde.packs.base import OutOfTime
from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.postgres import PACK
from sonde.packs.postgres import connection as postgres_connection
from sonde.packs.postgres.connection import PostgresParams, database_origin, run_queries
from sonde.packs.postgres.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Threshold, human_seconds
from tests.conftest import require

REGISTRY = PackRegistry.of([PACK])
DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
START_HINT = "PostgreSQL must run on 127.0.0.1:5432: pg_ctlcluster --skip-systemctl-redirect 15 main start"
WAIT_S = 15
POLL_S = 0.1


def connect(autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(DSN, autocommit=autocommit)


@pytest.fixture(autouse=True)
def postgres_runs() -> None:
    try:
        connect().close()
    except psycopg.OperationalError:
        require(False, START_HINT)


async def run(name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ProbeContext())).result


async def run_showing_values(name: str, **params: Any) -> dict[str, Any]:
    """``name`` run with packs.postgres.show_values true in the agent config."""
    ctx = ProbeContext()
    ctx.settings.packs["postgres"] = {"show_values": True}
    return (await execute_probe(REGISTRY, name, params, ctx)).result


async def wait_for(
    name: str, params: dict[str, Any], seen: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Run the probe until ``seen(result)``: the condition is made by another connection."""
    with trio.fail_after(WAIT_S):
        while True:
            result = await run(name, **params)
            if seen(result):
                return result
            await trio.sleep(POLL_S)


def execute(connection: psycopg.Connection[Any], sql: str, *args: Any) -> None:
    connection.execute(sql, args or None)  # type: ignore[arg-type]


def cancel_backend(pid: int) -> None:
    with connect() as admin:
        execute(admin, "SELECT pg_cancel_backend(%s)", pid)


async def test_databases_sizes() -> None:
    found = await run("postgres.databases.sizes")
    by_name = {db["name"]: db for db in found["databases"]}
    assert by_name["postgres"]["size_bytes"] > 0
    assert "template0" not in by_name
    sizes = [db["size_bytes"] for db in found["databases"]]
    assert sizes == sorted(sizes, reverse=True)
    with_templates = await run("postgres.databases.sizes", include_templates=True)
    assert "template1" in {db["name"] for db in with_templates["databases"]}


@pytest.fixture
async def extra_databases() -> AsyncIterator[list[str]]:
    """Two fresh databases (copies of template1), dropped afterwards."""
    names = [f"sonde_size_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    admin = await trio.to_thread.run_sync(connect)
    try:
        for name in names:
            await trio.to_thread.run_sync(lambda name=name: execute(admin, f"CREATE DATABASE {name}"))
        yield names
    finally:
        for name in names:
            await trio.to_thread.run_sync(lambda name=name: execute(admin, f"DROP DATABASE IF EXISTS {name}"))
        await trio.to_thread.run_sync(admin.close)


async def test_databases_total_covers_the_databases_not_listed(extra_databases: list[str]) -> None:
    everything = await run("postgres.databases.sizes")
    assert set(extra_databases) <= {db["name"] for db in everything["databases"]}
    assert everything["total_size_bytes"] == sum(db["size_bytes"] or 0 for db in everything["databases"])
    one = await run("postgres.databases.sizes", limit=1)
    assert (len(one["databases"]), one["truncated"]) == (1, True)
    # approx: other sessions may write in between; the one database listed is far from the total
    assert one["total_size_bytes"] == pytest.approx(everything["total_size_bytes"], rel=0.01)
    assert one["total"] == everything["total"] == len(everything["databases"]) >= 3
    with_templates = await run("postgres.databases.sizes", include_templates=True, limit=1)
    assert with_templates["total"] == everything["total"] + 2  # template0, template1
    assert with_templates["total_size_bytes"] > one["total_size_bytes"]


@pytest.fixture
async def extra_connections() -> AsyncIterator[list[psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []
    yield opened
    for connection in opened:
        await trio.to_thread.run_sync(connection.close)


WINDOW_TRIES = 5  # readings around five new connections, until no other client came or went between


async def test_connection_usage_finding(extra_connections: list[psycopg.Connection[Any]]) -> None:
    # Other clients of this server (the end-to-end tests' agents, on another pytest worker) may
    # come or go between the two readings: such a window is tried again.
    for _ in range(WINDOW_TRIES):
        before = await run("postgres.connections.usage")
        opened = [await trio.to_thread.run_sync(connect) for _ in range(5)]
        extra_connections.extend(opened)
        after = await run("postgres.connections.usage")
        if after["total"] == before["total"] + 5:
            break
    assert after["total"] == before["total"] + 5, "other clients came or went in every window"
    # a threshold between today's use and today's use + 5 connections, of the slots for ordinary clients
    warn_at = (before["total"] + 3) * 100 / before["client_limit"]
    runbook = build_runbook(
        {**THRESHOLDS, "connection_usage_percent": Threshold(warning=warn_at, critical=100, unit="%")}
    )
    assert runbook.evaluate({"postgres.connections.usage": before}) == []
    assert after["by_state"].get("idle", 0) >= 5
    assert any(u["name"] == "postgres" for u in after["by_user"])
    [finding] = runbook.evaluate({"postgres.connections.usage": after})
    assert finding.severity == "warning"
    assert finding.title.startswith("PostgreSQL uses")
    assert "of the connection slots for ordinary clients" in finding.title
    assert f"max_connections {after['max_connections']} less" in finding.detail


async def test_connection_usage_leaves_out_the_probe(
    extra_connections: list[psycopg.Connection[Any]],
) -> None:
    # Sonde's sessions beside it (a runbook runs its probes at once) are counted apart. Another
    # client (an end-to-end test's agent) may come or go between the readings: tried again.
    for _ in range(WINDOW_TRIES):
        found = await run("postgres.connections.usage")
        for _ in range(2):
            extra_connections.append(
                await trio.to_thread.run_sync(
                    lambda: psycopg.connect(DSN, autocommit=True, application_name="sonde")
                )
            )
        beside = await run("postgres.connections.usage")
        if beside["total"] == found["total"] and beside["sonde_sessions"] == found["sonde_sessions"] + 2:
            break
    assert found["total"] == sum(found["by_state"].values())
    assert found["usage_percent"] == round(found["total"] * 100 / found["client_limit"], 1)
    reserved = found["superuser_reserved"] + (found["reserved_connections"] or 0)
    assert found["client_limit"] == found["max_connections"] - reserved
    assert beside["sonde_sessions"] == found["sonde_sessions"] + 2
    assert beside["total"] == found["total"]
    # one reading: every breakdown adds up to the same total
    for counted in (beside["by_database"], beside["by_user"]):
        assert sum(entry["connections"] for entry in counted) == beside["total"]


async def test_long_running_query_finding() -> None:
    sleeper = await trio.to_thread.run_sync(connect)
    sleeper_pid = sleeper.info.backend_pid

    def sleep_until_cancelled() -> None:
        with pytest.raises(psycopg.errors.QueryCanceled):
            execute(sleeper, "SELECT pg_sleep(30)")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, sleep_until_cancelled)
            found = await wait_for(
                "postgres.queries.long_running",
                {"min_duration_s": 1},
                lambda r: any(q["pid"] == sleeper_pid for q in r["queries"]),
            )
            [query] = [q for q in found["queries"] if q["pid"] == sleeper_pid]
            assert query["query"] == "SELECT pg_sleep(?)"  # its values not shown
            shown = await run_showing_values("postgres.queries.long_running", min_duration_s=1)
            assert [q["query"] for q in shown["queries"] if q["pid"] == sleeper_pid] == [
                "SELECT pg_sleep(30)"
            ]
            assert query["duration_s"] >= 1
            assert query["state"] == "active"
            runbook = build_runbook(
                {**THRESHOLDS, "long_query_s": Threshold(warning=1, critical=600, unit=" s")}
            )
            # other tests' sessions on this server may be long-running too, each kind its own finding
            [finding] = [
                f
                for f in runbook.evaluate({"postgres.queries.long_running": found})
                if f"PID {sleeper_pid}" in f.detail
            ]
            assert finding.severity == "warning"
            assert re.match(
                r"A PostgreSQL query has been running for |\d+ PostgreSQL queries have been running for over 1 s",
                finding.title,
            )
            assert f"PID {sleeper_pid}" in finding.detail
            await trio.to_thread.run_sync(cancel_backend, sleeper_pid)
    finally:
        await trio.to_thread.run_sync(sleeper.close)


@pytest.fixture
async def locked_table() -> AsyncIterator[str]:
    table = f"sonde_lock_test_{uuid.uuid4().hex[:12]}"
    admin = await trio.to_thread.run_sync(connect)
    await trio.to_thread.run_sync(lambda: execute(admin, f"CREATE TABLE {table} (id int PRIMARY KEY, n int)"))
    await trio.to_thread.run_sync(lambda: execute(admin, f"INSERT INTO {table} VALUES (1, 0)"))
    try:
        yield table
    finally:
        await trio.to_thread.run_sync(lambda: execute(admin, f"DROP TABLE IF EXISTS {table}"))
        await trio.to_thread.run_sync(admin.close)


async def test_blocked_query_finding(locked_table: str) -> None:
    holder = await trio.to_thread.run_sync(connect, False)
    waiter = await trio.to_thread.run_sync(connect)
    holder_pid, waiter_pid = holder.info.backend_pid, waiter.info.backend_pid
    try:
        await trio.to_thread.run_sync(
            lambda: execute(holder, f"SELECT * FROM {locked_table} WHERE id = 1 FOR UPDATE")
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                trio.to_thread.run_sync,
                lambda: execute(waiter, f"UPDATE {locked_table} SET n = n + 1 WHERE id = 1"),
            )
            found = await wait_for(
                "postgres.locks.blocked", {}, lambda r: any(b["pid"] == waiter_pid for b in r["blocked"])
            )
            [blocked] = [b for b in found["blocked"] if b["pid"] == waiter_pid]
            assert blocked["blocking_pids"] == [holder_pid]
            assert blocked["wait_event_type"] == "Lock"
            assert blocked["query"].startswith("UPDATE sonde_lock_test_")
            [blocker] = [b for b in found["blockers"] if b["pid"] == holder_pid]
            assert blocker["state"] == "idle in transaction"
            assert any(not lock["granted"] for lock in found["lock_counts"])
            [finding] = RUNBOOK.evaluate({"postgres.locks.blocked": found})
            count = len(found["blocked"])
            longest = human_seconds(
                max(b["waiting_s"] for b in found["blocked"] if b["waiting_s"] is not None)
            )
            assert finding.title == (
                f"1 PostgreSQL session is blocked by a lock for {longest}"
                if count == 1
                else f"{count} PostgreSQL sessions are blocked by locks, the longest for {longest}"
            )
            assert str(holder_pid) in finding.detail
            await trio.to_thread.run_sync(holder.rollback)  # the waiter's UPDATE now goes through
    finally:
        await trio.to_thread.run_sync(holder.close)
        await trio.to_thread.run_sync(waiter.close)
    assert (await run("postgres.locks.blocked"))["blocked"] == []


async def test_replication_status_of_a_lone_primary() -> None:
    found = await run("postgres.replication.status")
    assert (found["role"], found["standby"]) == ("primary", None)
    assert RUNBOOK.evaluate({"postgres.replication.status": found}) == []


async def test_replication_of_a_lone_primary_without_pg_monitor(
    role_without_connect: tuple[str, str],
) -> None:
    # with no replica at all, the note said "0 of the 0 listed cannot be checked for lag"
    role, _ = role_without_connect
    found = await run("postgres.replication.status", user=role)
    assert (found["role"], found["replicas"], found["sees_all_sessions"]) == ("primary", [], False)
    assert "0 of the 0" not in found["visibility"]
    assert "none streams from it now" in found["visibility"]
    assert RUNBOOK.evaluate({"postgres.replication.status": found}) == []


def test_replication_findings_on_readings() -> None:
    primary = {
        "role": "primary",
        "replicas": [
            {
                "application_name": "replica1",
                "client": "10.0.0.2",
                "state": "streaming",
                "sync_state": "async",
                "replay_lag_bytes": 2 * 1024**3,
                "write_lag_s": 1.0,
                "flush_lag_s": 1.0,
                "replay_lag_s": 45.0,
            }
        ],
        "slots": [
            {"name": "old_replica", "type": "physical", "active": False, "retained_wal_bytes": 100 * 1024**2}
        ],
        "standby": None,
    }
    titles = {(f.severity, f.title) for f in RUNBOOK.evaluate({"postgres.replication.status": primary})}
    assert titles == {
        ("warning", "Replica replica1 lags 45 s behind"),
        ("critical", "Replica replica1 lags 2.0 GiB of WAL behind"),
        ("warning", "Inactive replication slot old_replica retains 100.0 MiB of WAL"),
    }
    # a replica's application_name is the replica's own setting: braces in it are text (before: KeyError)
    braced = {**primary, "replicas": [{**primary["replicas"][0], "application_name": "db{1}"}], "slots": []}
    titles = {f.title for f in RUNBOOK.evaluate({"postgres.replication.status": braced})}
    assert "Replica db{1} lags 45 s behind" in titles
    standby = {
        "role": "standby",
        "replicas": [],
        "slots": [],
        "standby": {
            "receive_lsn": "0/5000000",
            "replay_lsn": "0/4000000",
            "replay_delay_s": 600.0,
            "receiver_status": "streaming",
        },
    }
    [finding] = RUNBOOK.evaluate({"postgres.replication.status": standby})
    assert (finding.severity, finding.title) == ("critical", "This standby replays 600 s behind its primary")


async def test_cache_hit_ratio() -> None:
    found = await run("postgres.cache.hit_ratio")
    assert found["hits"] + found["reads"] > 0
    assert 0 <= found["hit_percent"] <= 100
    assert "postgres" in {db["name"] for db in found["databases"]}
    one = await run("postgres.cache.hit_ratio", limit=1)
    assert (len(one["databases"]), one["truncated"]) == (1, True)
    assert one["hits"] >= found["hits"]  # totals still cover every database
    cold = {**found, "hits": 85_000, "reads": 15_000, "hit_percent": 85.0}
    cold |= {"counted_s": 3 * 86400.0, "counted_from": "server start"}
    [finding] = RUNBOOK.evaluate({"postgres.cache.hit_ratio": cold})
    assert (finding.severity, finding.title) == (
        "warning",
        "PostgreSQL buffer cache hit ratio is only 85% over the last 3.0 days",
    )
    assert finding.detail.startswith("Counted since the server started 3.0 days ago")
    assert "consider raising it" in finding.detail
    few = {**cold, "hits": 85, "reads": 15}
    assert RUNBOOK.evaluate({"postgres.cache.hit_ratio": few}) == []


async def test_cache_hit_ratio_has_a_time_base() -> None:
    # never reset, stats_reset_at and since_reset_s read null and the ratio had no time base: it
    # blamed shared_buffers ("consider raising it") over minutes as over months
    found = await run("postgres.cache.hit_ratio", limit=1000)
    assert found["server_started_at"] is not None
    assert found["since_server_start_s"] > 0
    for database in found["databases"]:
        if database["stats_reset_at"] is None:  # never reset: counted since the server started
            assert database["counted_s"] == pytest.approx(found["since_server_start_s"], abs=1)
        else:
            assert database["counted_s"] == pytest.approx(database["since_reset_s"], abs=1)
    assert found["counted_s"] == max(db["counted_s"] for db in found["databases"])
    assert found["counted_from"] in ("statistics reset", "server start")
    just_started = {**found, "hits": 85_000, "reads": 15_000, "hit_percent": 85.0}
    just_started |= {"counted_s": 600.0, "counted_from": "server start"}
    [finding] = RUNBOOK.evaluate({"postgres.cache.hit_ratio": just_started})
    assert (finding.severity, finding.title) == (
        "info",
        "PostgreSQL buffer cache hit ratio is only 85% over the last 10.0 minutes",
    )
    assert finding.detail.startswith("Counted since the server started 10.0 minutes ago")
    assert "says little about shared_buffers yet" in finding.detail
    assert "consider raising" not in finding.detail
    reset = {**just_started, "counted_s": 7200.0, "counted_from": "statistics reset"}
    [finding] = RUNBOOK.evaluate({"postgres.cache.hit_ratio": reset})
    assert (finding.severity, finding.title) == (
        "warning",
        "PostgreSQL buffer cache hit ratio is only 85% over the last 2.0 hours",
    )
    assert finding.detail.startswith("Counted since the statistics were reset 2.0 hours ago")


async def test_a_server_nothing_listens_for_is_down() -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run("postgres.connections.usage", port=1)
    assert caught.value.code == "service_down"
    assert "PostgreSQL is not accepting connections at 127.0.0.1:1" in caught.value.message


async def test_a_silent_listener_is_said_to_answer_not_as_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    # "PostgreSQL is not available at 127.0.0.1:6379: connection timeout expired", after 6 s
    monkeypatch.setattr(postgres_connection, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # never accepts: the connection waits in the backlog, and no answer comes
        port = silent.getsockname()[1]
        with trio.fail_after(10), pytest.raises(ProbeExecutionError) as caught:
            await run("postgres.connections.usage", port=port)
    assert caught.value.code == "unavailable"
    assert caught.value.message.startswith(
        f"PostgreSQL is not available at 127.0.0.1:{port}: nothing answered as PostgreSQL there within 1 s "
        "of the connection (connection timeout expired; is PostgreSQL listening on that port?)"
    )


async def test_a_listener_that_is_not_postgres_is_said_so() -> None:
    # a server of another kind answers libpq's first message with what no PostgreSQL sends
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]

        def answer_once() -> None:
            connection, _ = other.accept()
            with connection:
                connection.recv(64)
                connection.sendall(b"-ERR unknown command\r\n")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, answer_once)
            with trio.fail_after(10), pytest.raises(ProbeExecutionError) as caught:
                await run("postgres.connections.usage", port=port)
    assert caught.value.code == "unavailable"
    message = caught.value.message
    assert message.startswith(
        f"PostgreSQL is not available at 127.0.0.1:{port}: something answered there, but not as PostgreSQL ("
    )
    assert message.endswith("; is PostgreSQL listening on that port?)")


async def test_unknown_user_is_a_refused_login() -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run("postgres.connections.usage", user="no_such_role_sonde")
    assert caught.value.code == "permission_denied"
    message = caught.value.message
    assert "did not accept the login of user 'no_such_role_sonde'" in message
    assert 'role "no_such_role_sonde" does not exist' in message
    assert "packs.postgres.user" in message
    assert "pg_monitor" not in message


@pytest.fixture
async def role_without_connect() -> AsyncIterator[tuple[str, str]]:
    """A login role and a database it may not connect to, both dropped afterwards."""
    suffix = uuid.uuid4().hex[:12]
    role, database = f"sonde_role_{suffix}", f"sonde_noconnect_{suffix}"
    admin = await trio.to_thread.run_sync(connect)
    try:
        for sql in (
            f"CREATE ROLE {role} LOGIN",
            f"CREATE DATABASE {database}",
            f"REVOKE CONNECT ON DATABASE {database} FROM PUBLIC",
        ):
            await trio.to_thread.run_sync(lambda sql=sql: execute(admin, sql))
        yield role, database
    finally:
        for sql in (f"DROP DATABASE IF EXISTS {database}", f"DROP ROLE IF EXISTS {role}"):
            await trio.to_thread.run_sync(lambda sql=sql: execute(admin, sql))
        await trio.to_thread.run_sync(admin.close)


async def test_database_without_connect_is_a_missing_privilege(role_without_connect: tuple[str, str]) -> None:
    role, database = role_without_connect
    with pytest.raises(ProbeExecutionError) as caught:
        await run("postgres.connections.usage", user=role, database=database)
    assert caught.value.code == "permission_denied"
    assert f'permission denied for database "{database}"' in caught.value.message
    assert "CONNECT on that database" in caught.value.message
    assert "did not accept the login" not in caught.value.message


async def test_password_comes_from_agent_config_only() -> None:
    ctx = ProbeContext()
    ctx.settings.packs["postgres"] = {"port": 5432, "password": "ignored-with-trust-auth"}
    found = await execute_probe(REGISTRY, "postgres.connections.usage", {}, ctx)
    assert found.result["max_connections"] > 0


@pytest.mark.parametrize("named_by", ["param", "setting"])
async def test_missing_database_names_where_it_was_set(named_by: str) -> None:
    name = f"sonde_missing_{uuid.uuid4().hex[:12]}"
    ctx = ProbeContext()
    params: dict[str, Any] = {}
    if named_by == "param":
        params["database"] = name
    else:
        ctx.settings.packs["postgres"] = {"database": name}
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, "postgres.connections.usage", params, ctx)
    assert caught.value.code == "refused"  # a setting to fix, not a server that is down
    message = caught.value.message
    assert f"PostgreSQL at 127.0.0.1:5432 has no database '{name}', named by" in message
    assert f'database "{name}" does not exist' in message  # the server's own words
    assert ("the probe's database param" in message) == (named_by == "param")
    assert ("packs.postgres.database" in message) == (named_by == "setting")
    assert "not available" not in message
    assert "did not accept the login" not in message


def test_database_origin_follows_the_endpoint_order() -> None:
    ctx = ProbeContext()
    assert "default database" in database_origin(ctx, PostgresParams())
    ctx.settings.packs["postgres"] = {"database": "app"}
    assert "packs.postgres.database" in database_origin(ctx, PostgresParams())
    assert database_origin(ctx, PostgresParams(database="other")) == "the probe's database param"


# Sonde's own sessions, long transactions, and sizes this user may not read


def connect_as_sonde(database: str = "postgres") -> psycopg.Connection[Any]:
    """A session named as Sonde's probes name theirs (application 'sonde')."""
    return psycopg.connect(
        f"host=127.0.0.1 port=5432 user=postgres dbname={database} connect_timeout=3",
        autocommit=True,
        application_name="sonde",
    )


async def test_a_long_transaction_of_short_statements_is_long_running() -> None:
    # A transaction open for long running only short statements was invisible: the probe
    # went by when the statement started, not the transaction.
    session = await trio.to_thread.run_sync(connect, False)
    pid = session.info.backend_pid
    try:
        await trio.to_thread.run_sync(lambda: execute(session, "SELECT 1"))  # the transaction begins
        with trio.fail_after(WAIT_S):
            while True:
                await trio.to_thread.run_sync(lambda: execute(session, "SELECT 1"))  # a fresh statement
                found = await run("postgres.queries.long_running", min_duration_s=1)
                # listed, and the transaction clearly older than its statement (a slow machine
                # may take a while between the statement and the reading)
                if any(
                    q["pid"] == pid and q["transaction_s"] - q["duration_s"] >= 1.5 for q in found["queries"]
                ):
                    break
                await trio.sleep(POLL_S)
        [query] = [q for q in found["queries"] if q["pid"] == pid]
        assert query["transaction_s"] >= 1
        assert query["duration_s"] <= query["transaction_s"] - 1.5  # the transaction is what is long
        assert (query["state"], query["query"]) == ("idle in transaction", "SELECT ?")
        ages = [max(q["transaction_s"] or 0, q["duration_s"] or 0) for q in found["queries"]]
        assert ages == sorted(ages, reverse=True)  # longest first, by the same age
        runbook = build_runbook({**THRESHOLDS, "long_query_s": Threshold(warning=1, critical=600, unit=" s")})
        [finding] = runbook.evaluate({"postgres.queries.long_running": {**found, "queries": [query]}})
        assert finding.severity == "warning"
        assert finding.title.startswith("A PostgreSQL transaction has been open for")
        assert f"PID {pid}" in finding.detail
        assert "its current or last statement started" in finding.detail
    finally:
        await trio.to_thread.run_sync(session.close)


@pytest.fixture
async def throwaway_database() -> AsyncIterator[str]:
    """A fresh database no one else uses, dropped afterwards (with any sessions left on it)."""
    name = f"sonde_db_{uuid.uuid4().hex[:12]}"
    admin = await trio.to_thread.run_sync(connect)
    try:
        await trio.to_thread.run_sync(lambda: execute(admin, f"CREATE DATABASE {name}"))
        yield name
    finally:
        await trio.to_thread.run_sync(lambda: execute(admin, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await trio.to_thread.run_sync(admin.close)


async def test_cache_hit_ratio_says_since_when(throwaway_database: str) -> None:
    """A ratio since the statistics were reset is read against when that was."""

    def reset() -> None:
        with psycopg.connect(DSN.replace("dbname=postgres", f"dbname={throwaway_database}")) as fresh:
            execute(fresh, "SELECT pg_stat_reset()")

    await trio.to_thread.run_sync(reset)
    found = await run("postgres.cache.hit_ratio", limit=1000)
    [database] = [db for db in found["databases"] if db["name"] == throwaway_database]
    assert database["stats_reset_at"] is not None
    assert 0 <= database["since_reset_s"] < 60
    assert database["counted_s"] == pytest.approx(database["since_reset_s"], abs=1)


async def test_database_connections_leave_out_sonde(
    throwaway_database: str, extra_connections: list[psycopg.Connection[Any]]
) -> None:
    # Sonde's own sessions were counted as the database's connections (6 on a server with no clients)
    for _ in range(2):
        extra_connections.append(await trio.to_thread.run_sync(connect_as_sonde, throwaway_database))
    extra_connections.append(
        await trio.to_thread.run_sync(
            lambda: psycopg.connect(DSN.replace("dbname=postgres", f"dbname={throwaway_database}"))
        )
    )
    found = await run("postgres.databases.sizes")
    [database] = [db for db in found["databases"] if db["name"] == throwaway_database]
    assert (database["connections"], database["sonde_sessions"]) == (1, 2)
    [postgres] = [db for db in found["databases"] if db["name"] == "postgres"]
    assert postgres["sonde_sessions"] >= 1  # the probe's own session


async def test_lock_counts_leave_out_sonde(
    locked_table: str, extra_connections: list[psycopg.Connection[Any]]
) -> None:
    # Sonde's own locks (its session's AccessShareLock and the like) were in the lock counts
    def row_share_lock(connection: psycopg.Connection[Any]) -> None:
        execute(connection, "BEGIN")
        execute(connection, f"LOCK TABLE {locked_table} IN ROW SHARE MODE")

    sonde = await trio.to_thread.run_sync(connect_as_sonde)
    other = await trio.to_thread.run_sync(connect)
    extra_connections += [sonde, other]
    for connection in (sonde, other):
        await trio.to_thread.run_sync(row_share_lock, connection)
    found = await run("postgres.locks.blocked")
    counted = {(lock["mode"], lock["granted"]): lock["count"] for lock in found["lock_counts"]}
    assert counted.get(("RowShareLock", True)) == 1  # the other session's, not the one named 'sonde'
    for connection in (sonde, other):
        await trio.to_thread.run_sync(lambda connection=connection: execute(connection, "ROLLBACK"))


async def test_total_size_says_what_it_left_out(role_without_connect: tuple[str, str]) -> None:
    # A database this user may not size used to count as 0 in the total, silently
    role, database = role_without_connect
    everything = await run("postgres.databases.sizes")
    assert everything["left_out_of_total"] == 0  # the superuser sizes every database
    limited = await run("postgres.databases.sizes", user=role)
    [hidden] = [db for db in limited["databases"] if db["name"] == database]
    assert hidden["size_bytes"] is None
    unsized = [db for db in limited["databases"] if db["size_bytes"] is None]
    assert limited["left_out_of_total"] == len(unsized) >= 1
    assert limited["total_size_bytes"] == sum(db["size_bytes"] or 0 for db in limited["databases"])
    assert limited["total_size_bytes"] < everything["total_size_bytes"]


async def test_a_statement_past_its_time_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement past the session's statement_timeout (10 s at most, inside a probe's 15-20 s) is
    a timeout saying the server stopped it, not "PostgreSQL is not available"."""
    monkeypatch.setattr(postgres_connection, "STATEMENT_TIMEOUT_MS", 500)
    with trio.fail_after(5), pytest.raises(OutOfTime, match="stopped a statement at the probe's time limit"):
        await run_queries(ProbeContext(), PostgresParams(), ("SELECT pg_sleep(3)", ()))


async def test_pg_monitor_sizes_a_database_it_may_not_connect_to(
    role_without_connect: tuple[str, str],
) -> None:
    """pg_read_all_stats (in pg_monitor) may size every database, as PostgreSQL's pg_database_size
    allows: its size is not left out as one the login may not see."""
    role, database = role_without_connect
    admin = await trio.to_thread.run_sync(connect)
    try:
        await trio.to_thread.run_sync(lambda: execute(admin, f"GRANT pg_monitor TO {role}"))
    finally:
        await trio.to_thread.run_sync(admin.close)
    monitor = await run("postgres.databases.sizes", user=role)
    [closed] = [db for db in monitor["databases"] if db["name"] == database]
    assert (closed["size_bytes"] or 0) > 0
    assert monitor["left_out_of_total"] == 0


# What a login without pg_monitor sees, Sonde's sessions in the long-running list, client addresses


def connect_as(role: str, database: str, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A session of ``role`` (trust auth: no password) on ``database``."""
    return psycopg.connect(
        f"host=127.0.0.1 port=5432 user={role} dbname={database} connect_timeout=3", autocommit=autocommit
    )


@pytest.fixture
async def strangers() -> AsyncIterator[tuple[str, str, str]]:
    """A login role without pg_monitor, another role, and a database for the other's sessions.

    All three are dropped afterwards, with any session left on the database.
    """
    suffix = uuid.uuid4().hex[:12]
    login, other, database = (
        f"sonde_test_{suffix}_login",
        f"sonde_test_{suffix}_other",
        f"sonde_test_{suffix}",
    )
    admin = await trio.to_thread.run_sync(connect)
    try:
        for sql in (
            f"CREATE ROLE {login} LOGIN",
            f"CREATE ROLE {other} LOGIN",
            f"CREATE DATABASE {database}",
        ):
            await trio.to_thread.run_sync(lambda sql=sql: execute(admin, sql))
        yield login, other, database
    finally:
        for sql in (
            f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
            f"DROP ROLE IF EXISTS {other}",
            f"DROP ROLE IF EXISTS {login}",
        ):
            await trio.to_thread.run_sync(lambda sql=sql: execute(admin, sql))
        await trio.to_thread.run_sync(admin.close)


async def test_a_login_without_pg_monitor_counts_other_users_sessions(
    strangers: tuple[str, str, str], extra_connections: list[psycopg.Connection[Any]]
) -> None:
    # To a login without pg_monitor, other users' sessions have a NULL backend_type and state:
    # the client filter dropped them, so the total read 1 with 8 clients connected, silently.
    login, other, database = strangers
    for _ in range(3):
        extra_connections.append(await trio.to_thread.run_sync(connect_as, other, database))
    with trio.fail_after(WAIT_S):
        while True:  # the superuser's total before and after agree: no client came or went meanwhile
            before = await run("postgres.connections.usage")
            limited = await run("postgres.connections.usage", user=login)
            after = await run("postgres.connections.usage")
            if before["total"] == after["total"]:
                break
            await trio.sleep(POLL_S)
    # every client session counted, and no background process (checkpointer, launcher, ...)
    assert limited["total"] == before["total"]
    assert {u["name"]: u["connections"] for u in limited["by_user"]}[other] == 3
    assert {d["name"]: d["connections"] for d in limited["by_database"]}[database] == 3
    assert limited["by_state"]["hidden"] == limited["hidden_sessions"] >= 3
    assert limited["sees_all_sessions"] is False
    assert "pg_monitor" in limited["visibility"]
    assert f"{limited['hidden_sessions']} " in limited["visibility"]
    assert (before["sees_all_sessions"], before["hidden_sessions"], before["visibility"]) == (True, 0, None)
    assert "hidden" not in before["by_state"]
    low = build_runbook(
        {**THRESHOLDS, "connection_usage_percent": Threshold(warning=0.01, critical=100, unit="%")}
    )
    [finding] = low.evaluate({"postgres.connections.usage": limited})
    assert f" {limited['visibility']}" in finding.detail
    sizes = await run("postgres.databases.sizes", user=login)
    [listed] = [db for db in sizes["databases"] if db["name"] == database]
    assert listed["connections"] == 3
    assert sizes["hidden_sessions"] >= 3
    assert (sizes["sees_all_sessions"], "pg_monitor" in sizes["visibility"]) == (False, True)


async def test_long_running_says_how_many_sessions_it_could_not_judge(
    strangers: tuple[str, str, str], extra_connections: list[psycopg.Connection[Any]]
) -> None:
    # A login without pg_monitor cannot see when other users' statements started: their
    # long queries were left out, and the answer did not say so.
    login, other, database = strangers
    sleeper = await trio.to_thread.run_sync(connect_as, other, database)
    idle = await trio.to_thread.run_sync(connect_as, other, database)
    extra_connections += [sleeper, idle]
    sleeper_pid = sleeper.info.backend_pid

    def sleep_until_cancelled() -> None:
        with pytest.raises(psycopg.errors.QueryCanceled):
            execute(sleeper, "SELECT pg_sleep(30)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, sleep_until_cancelled)
        full = await wait_for(
            "postgres.queries.long_running",
            {"min_duration_s": 1},
            lambda r: any(q["pid"] == sleeper_pid for q in r["queries"]),
        )
        limited = await run("postgres.queries.long_running", user=login, min_duration_s=1)
        await trio.to_thread.run_sync(cancel_backend, sleeper_pid)
    assert (full["unjudged_sessions"], full["sees_all_sessions"], full["visibility"]) == (0, True, None)
    assert sleeper_pid not in {q["pid"] for q in limited["queries"]}
    assert limited["unjudged_sessions"] >= 2  # the sleeper and the idle one: either might be long
    assert limited["sees_all_sessions"] is False
    assert f"{limited['unjudged_sessions']} " in limited["visibility"]
    assert "pg_monitor" in limited["visibility"]
    [finding] = [
        f for f in RUNBOOK.evaluate({"postgres.queries.long_running": limited}) if f.severity == "info"
    ]
    assert (
        finding.title
        == f"{limited['unjudged_sessions']} PostgreSQL sessions could not be checked for long queries"
    )
    assert "pg_monitor" in finding.detail
    assert [
        f for f in RUNBOOK.evaluate({"postgres.queries.long_running": full}) if f.severity == "info"
    ] == []


async def test_long_running_leaves_out_sonde_and_no_duration_is_negative(
    extra_connections: list[psycopg.Connection[Any]],
) -> None:
    # With min_duration_s 0 the list held Sonde's sibling sessions, one at duration_s -0.000179:
    # its statement started after the probe's own transaction had begun (now()).
    siblings = [await trio.to_thread.run_sync(connect_as_sonde) for _ in range(2)]
    busy = await trio.to_thread.run_sync(connect, False)
    extra_connections += [*siblings, busy]
    for sibling in siblings:
        await trio.to_thread.run_sync(lambda sibling=sibling: execute(sibling, "BEGIN"))
        await trio.to_thread.run_sync(lambda sibling=sibling: execute(sibling, "SELECT 1"))
    sibling_pids = {sibling.info.backend_pid for sibling in siblings}
    stop = threading.Event()

    def short_statements() -> None:  # a transaction whose statements start all the time
        while not stop.is_set():
            execute(busy, "SELECT 1")

    readings = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, short_statements)
        try:
            for _ in range(40):
                readings.append(await run("postgres.queries.long_running", min_duration_s=0))
        finally:
            stop.set()
    listed = [q for reading in readings for q in reading["queries"]]
    assert busy.info.backend_pid in {q["pid"] for q in listed}
    assert sibling_pids.isdisjoint(q["pid"] for q in listed)
    assert [q for q in listed if (q["duration_s"] or 0) < 0 or (q["transaction_s"] or 0) < 0] == []


async def test_client_address_is_a_plain_address(extra_connections: list[psycopg.Connection[Any]]) -> None:
    # client_addr::text kept the netmask: "127.0.0.1/32"
    tcp = await trio.to_thread.run_sync(connect, False)
    unix = await trio.to_thread.run_sync(
        lambda: psycopg.connect("host=/var/run/postgresql port=5432 user=postgres dbname=postgres")
    )
    extra_connections += [tcp, unix]
    for connection in (tcp, unix):
        await trio.to_thread.run_sync(lambda connection=connection: execute(connection, "SELECT 1"))
    found = await run("postgres.queries.long_running", min_duration_s=0)
    clients = {q["pid"]: q["client"] for q in found["queries"]}
    assert clients[tcp.info.backend_pid] == "127.0.0.1"
    assert clients[unix.info.backend_pid] is None  # a unix socket has no address
