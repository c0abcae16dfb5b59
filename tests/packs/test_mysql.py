"""The mysql pack against the real MariaDB on 127.0.0.1:3306 (root, empty password).

Tests make the conditions findings look for (many connections, slow queries, a row
lock wait, a long statement), check probe and runbook, and clean up after themselves.
"""

from __future__ import annotations

import os
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest
import trio

from sonde.packs.base import OutOfTime
from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.mysql import PACK
from sonde.packs.mysql import connection as mysql_connection
from sonde.packs.mysql.connection import MysqlParams, session, statement_limit
from sonde.packs.mysql.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.mysql.status import summarize_innodb, summarize_status
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Threshold
from tests.conftest import require

REGISTRY = PackRegistry.of([PACK])
START_HINT = "MariaDB must run on 127.0.0.1:3306: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
WAIT_S = 15
POLL_S = 0.1


def connect(database: str | None = None) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host="127.0.0.1",
        port=3306,
        user="root",
        password="",
        database=database,
        autocommit=True,
        connect_timeout=3,
    )


def execute(connection: Any, sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.fixture(autouse=True)
def mariadb_runs() -> None:
    try:
        connect().close()
    except pymysql.err.OperationalError:
        require(False, START_HINT)


@pytest.fixture
async def connections() -> AsyncIterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for connection in opened:
        await trio.to_thread.run_sync(connection.close)


async def run(name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ProbeContext())).result


async def wait_for(
    name: str, params: dict[str, Any], seen: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    with trio.fail_after(WAIT_S):
        while True:
            result = await run(name, **params)
            if seen(result):
                return result
            await trio.sleep(POLL_S)


async def test_databases_sizes(connections: list[Any]) -> None:
    name = f"sonde_test_{uuid.uuid4().hex[:10]}"
    admin = await trio.to_thread.run_sync(connect)
    connections.append(admin)
    await trio.to_thread.run_sync(execute, admin, f"CREATE DATABASE {name}")
    try:
        await trio.to_thread.run_sync(
            execute, admin, f"CREATE TABLE {name}.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB"
        )
        await trio.to_thread.run_sync(execute, admin, f"INSERT INTO {name}.t VALUES (1, REPEAT('x', 60000))")
        found = await run("mysql.databases.sizes")
        [db] = [d for d in found["databases"] if d["name"] == name]
        assert db["tables"] == 1
        assert db["size_bytes"] > 0
        assert "mysql" not in {d["name"] for d in found["databases"]}
        assert "mysql" in {
            d["name"] for d in (await run("mysql.databases.sizes", include_system=True))["databases"]
        }
    finally:
        await trio.to_thread.run_sync(execute, admin, f"DROP DATABASE {name}")


def test_databases_sizes_says_they_are_estimates() -> None:
    # the sizes are InnoDB's statistics, which lag behind writes: the description read as exact figures
    description = PACK.probes["mysql.databases.sizes"].description
    assert "InnoDB's estimates from its table statistics, which can lag behind recent writes" in description
    assert "ANALYZE TABLE" in description


@pytest.fixture
async def sized_databases() -> AsyncIterator[list[str]]:
    """Three databases of one table each, dropped afterwards."""
    names = [f"sonde_size_{uuid.uuid4().hex[:10]}" for _ in range(3)]
    admin = await trio.to_thread.run_sync(connect)
    try:
        for name in names:
            for sql in (
                f"CREATE DATABASE {name}",
                f"CREATE TABLE {name}.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB",
                f"INSERT INTO {name}.t VALUES (1, REPEAT('x', 60000))",
                # InnoDB's sizes come from its statistics, which it recalculates in the background
                # after a change: settled now, so two readings in a test read the same total
                f"ANALYZE TABLE {name}.t",
            ):
                await trio.to_thread.run_sync(execute, admin, sql)
        yield names
    finally:
        for name in names:
            await trio.to_thread.run_sync(execute, admin, f"DROP DATABASE IF EXISTS {name}")
        await trio.to_thread.run_sync(admin.close)


async def test_databases_total_covers_the_databases_not_listed(sized_databases: list[str]) -> None:
    everything = await run("mysql.databases.sizes")
    assert set(sized_databases) <= {d["name"] for d in everything["databases"]}
    assert everything["total_size_bytes"] == sum(d["size_bytes"] for d in everything["databases"])
    one = await run("mysql.databases.sizes", limit=1)
    assert (len(one["databases"]), one["truncated"]) == (1, True)
    assert one["total_size_bytes"] == everything["total_size_bytes"]
    assert one["total"] == everything["total"] == len(everything["databases"]) >= 3
    system = await run("mysql.databases.sizes", include_system=True, limit=1)
    assert system["total"] > everything["total"]  # mysql, sys and the schemas too
    assert system["total_size_bytes"] > everything["total_size_bytes"]


async def test_process_list_shows_a_long_statement(connections: list[Any]) -> None:
    sleeper = await trio.to_thread.run_sync(connect)
    connections.append(sleeper)
    thread_id = sleeper.thread_id()

    def sleep_until_killed() -> None:
        with pytest.raises(pymysql.err.OperationalError, match="interrupted"):
            execute(sleeper, "SELECT SLEEP(30)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, sleep_until_killed)
        found = await wait_for(
            "mysql.processes.list",
            {"min_time_s": 1},
            lambda r: any(t["id"] == thread_id for t in r["threads"]),
        )
        [thread] = [t for t in found["threads"] if t["id"] == thread_id]
        assert (thread["command"], thread["query"], thread["user"]) == ("Query", "SELECT SLEEP(?)", "root")
        ctx = ProbeContext()
        ctx.settings.packs["mysql"] = {"show_values": True}
        shown = (await execute_probe(REGISTRY, "mysql.processes.list", {}, ctx)).result
        assert "SELECT SLEEP(30)" in [t["query"] for t in shown["threads"]]
        assert thread["time_s"] >= 1
        killer = await trio.to_thread.run_sync(connect)
        connections.append(killer)
        await trio.to_thread.run_sync(execute, killer, f"KILL QUERY {thread_id}")


WINDOW_TRIES = 5  # readings around five new connections, until no other client came or went between


async def test_connection_usage_finding(connections: list[Any]) -> None:
    # Other clients of this server (the end-to-end tests' agents, on another pytest worker) may
    # come or go between the two readings: such a window is tried again.
    for _ in range(WINDOW_TRIES):
        before = await run("mysql.status.summary", interval_s=0)
        opened = [await trio.to_thread.run_sync(connect) for _ in range(5)]
        connections.extend(opened)
        after = await run("mysql.status.summary", interval_s=0)
        if after["threads_connected"] == before["threads_connected"] + 5:
            break
    assert after["threads_connected"] == before["threads_connected"] + 5, "other clients in every window"
    warn_at = (before["threads_connected"] + 3) * 100 / before["max_connections"]
    runbook = build_runbook(
        {**THRESHOLDS, "connection_usage_percent": Threshold(warning=warn_at, critical=100, unit="%")}
    )
    assert not [f for f in runbook.evaluate({"mysql.status.summary": before}) if "max_connections" in f.title]
    found = [f for f in runbook.evaluate({"mysql.status.summary": after}) if "max_connections" in f.title]
    assert [f.severity for f in found] == ["warning"]
    assert after["version"].startswith(("10.", "11.", "8.", "5."))


def threads_now(connection: Any) -> tuple[int, int]:
    """Threads_connected and Threads_running as ``connection`` reads them (itself included in both)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Threads_connected', 'Threads_running')")
        found = {name.lower(): int(value) for name, value in cursor.fetchall()}
    return found["threads_connected"], found["threads_running"]


def aborted_clients(connection: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Aborted_clients'")
        return int(cursor.fetchone()[1])


async def status_beside(observer: Any) -> tuple[dict[str, Any], tuple[int, int]]:
    """The probe's summary, and the threads ``observer`` counted just before and just after it (the same)."""
    with trio.fail_after(WAIT_S):
        while True:
            seen = await trio.to_thread.run_sync(threads_now, observer)
            found = await run("mysql.status.summary", interval_s=0)
            if await trio.to_thread.run_sync(threads_now, observer) == seen:  # no client came or went
                return found, seen
            await trio.sleep(POLL_S)


async def test_connection_counts_leave_out_the_probe(connections: list[Any]) -> None:
    observer = await trio.to_thread.run_sync(connect)
    connections.append(observer)
    idle, (connected, running) = await status_beside(observer)
    # the observer counts every client and itself; the probe counts them too, but not its own connection
    assert idle["threads_connected"] == connected
    assert idle["threads_running"] == running - 1  # the observer's SHOW STATUS ran; the probe's is left out
    extra = 3
    for _ in range(extra):
        connections.append(await trio.to_thread.run_sync(connect))
    busy, (connected, _) = await status_beside(observer)
    assert busy["threads_connected"] == connected == idle["threads_connected"] + extra
    assert busy["connection_usage_percent"] == round(connected * 100 / busy["max_connections"], 1)
    low = build_runbook(
        {**THRESHOLDS, "connection_usage_percent": Threshold(warning=0.01, critical=100, unit="%")}
    )
    [finding] = [f for f in low.evaluate({"mysql.status.summary": busy}) if "max_connections" in f.title]
    assert finding.title == f"MySQL uses {busy['connection_usage_percent']:g}% of max_connections"
    assert finding.detail.startswith(
        f"{connected} of {busy['max_connections']} connections, Sonde's own not counted"
    )


async def test_queries_per_second_leaves_out_the_probe() -> None:
    # Its own statements (two connections' worth) once read as ~4/s on an idle server;
    # retried only in case another client speaks during a sample.
    summary = await wait_for(
        "mysql.status.summary", {"interval_s": 0.5}, lambda r: r["queries_per_second"] == 0
    )
    assert summary["sample_s"] >= 0.5


async def test_a_cancelled_sample_closes_its_connection(connections: list[Any]) -> None:
    observer = await trio.to_thread.run_sync(connect)
    connections.append(observer)
    connected_before, _ = await trio.to_thread.run_sync(threads_now, observer)
    aborted_before = await trio.to_thread.run_sync(aborted_clients, observer)
    with trio.move_on_after(1.0) as cancelled:  # inside the 5 s sample, the connection open
        await run("mysql.status.summary", interval_s=5)
    assert cancelled.cancelled_caught
    with trio.fail_after(WAIT_S):
        while True:
            if (await trio.to_thread.run_sync(threads_now, observer))[0] <= connected_before:
                break
            await trio.sleep(POLL_S)
    # closed with a goodbye, not dropped (the server counts and logs a dropped one)
    assert await trio.to_thread.run_sync(aborted_clients, observer) == aborted_before


async def slow_queries_beside_a_sample(slow: Any, count: int, interval_s: float) -> dict[str, Any]:
    """A status sample of ``interval_s`` while ``slow`` runs ``count`` queries over long_query_time."""

    def slow_queries() -> None:
        for _ in range(count):
            execute(slow, "SELECT SLEEP(0.2)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, slow_queries)
        return await run("mysql.status.summary", interval_s=interval_s)


async def test_slow_queries_finding(connections: list[Any]) -> None:
    slow = await trio.to_thread.run_sync(connect)
    connections.append(slow)
    await trio.to_thread.run_sync(execute, slow, "SET SESSION long_query_time = 0.1")
    before = await run("mysql.status.summary", interval_s=0)
    assert before["slow_queries_in_sample"] is None  # no sample, no count
    # ten queries of 0.2 s each: most of them finish inside a 2.5 s sample
    summary = await slow_queries_beside_a_sample(slow, 10, 2.5)
    assert 1 <= summary["slow_queries_in_sample"] <= 10
    assert summary["queries_per_second"] > 0
    after = await run("mysql.status.summary", interval_s=0)
    assert after["slow_queries_total"] >= before["slow_queries_total"] + 10
    assert after["slow_queries_per_minute_since_start"] == round(
        after["slow_queries_total"] * 60 / after["uptime_s"], 2
    )
    found = [
        f for f in RUNBOOK.evaluate({"mysql.status.summary": summary}) if "finished in the last" in f.title
    ]
    expected = THRESHOLDS["slow_queries_in_sample"].severity(summary["slow_queries_in_sample"])
    assert [f.severity for f in found] == ([expected] if expected else [])
    for finding in found:
        assert finding.title == (
            f"{summary['slow_queries_in_sample']} MySQL slow queries finished in the last "
            f"{round(summary['sample_s'], 1):g} s"
        )


async def test_one_slow_query_in_the_sample_is_not_a_rate(connections: list[Any]) -> None:
    # One 0.2 s query finishing inside the runbook's 1 s sample once read as "MySQL runs
    # 59.41/min slow queries", a critical finding: a count of one scaled up to a minute.
    slow = await trio.to_thread.run_sync(connect)
    connections.append(slow)
    await trio.to_thread.run_sync(execute, slow, "SET SESSION long_query_time = 0.1")
    with trio.fail_after(WAIT_S):
        while True:  # until the query lands inside the sample, whatever the scheduling
            summary = await slow_queries_beside_a_sample(slow, 1, 1.0)
            if summary["slow_queries_in_sample"] >= 1:
                break
    assert summary["slow_queries_in_sample"] == 1  # a count, with the sample's length
    assert 1.0 <= summary["sample_s"] < 2
    assert summary["slow_queries_per_minute_since_start"] < 60
    slow_findings = [f for f in RUNBOOK.evaluate({"mysql.status.summary": summary}) if "slow" in f.title]
    # what is left is the average since start, which one query cannot make critical
    assert [f.title for f in slow_findings if "since start" not in f.title] == []


async def test_row_lock_wait_finding(connections: list[Any]) -> None:
    name = f"sonde_lock_{uuid.uuid4().hex[:10]}"
    holder, waiter = await trio.to_thread.run_sync(connect), await trio.to_thread.run_sync(connect)
    connections += [holder, waiter]
    await trio.to_thread.run_sync(execute, holder, f"CREATE DATABASE {name}")
    try:
        await trio.to_thread.run_sync(
            execute, holder, f"CREATE TABLE {name}.t (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"
        )
        await trio.to_thread.run_sync(execute, holder, f"INSERT INTO {name}.t VALUES (1, 0)")
        await trio.to_thread.run_sync(execute, holder, "BEGIN")
        await trio.to_thread.run_sync(execute, holder, f"SELECT * FROM {name}.t WHERE id = 1 FOR UPDATE")
        await trio.to_thread.run_sync(execute, waiter, "SET SESSION innodb_lock_wait_timeout = 20")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                trio.to_thread.run_sync, execute, waiter, f"UPDATE {name}.t SET n = n + 1 WHERE id = 1"
            )
            found = await wait_for("mysql.innodb.summary", {}, lambda r: r["row_lock_current_waits"] >= 1)
            [finding] = [
                f
                for f in RUNBOOK.evaluate({"mysql.innodb.summary": found})
                if f.title.endswith(("InnoDB row lock wait right now", "InnoDB row lock waits right now"))
            ]
            assert finding.severity == "warning"
            await trio.to_thread.run_sync(execute, holder, "ROLLBACK")  # the UPDATE goes through
        assert 0 <= (found["buffer_pool_hit_percent"] or 0) <= 100
        assert found["buffer_pool_size_bytes"] > 0
    finally:
        await trio.to_thread.run_sync(execute, holder, f"DROP DATABASE {name}")


def status_rows(**values: int) -> dict[str, str]:
    return {key: str(value) for key, value in values.items()}


def test_status_arithmetic() -> None:
    # read over the probe's own connection: 140 other clients, and the probe's statement running
    before = status_rows(uptime=1000, questions=10_000, slow_queries=5, threads_connected=141)
    after = status_rows(
        uptime=1002,
        questions=10_500,
        slow_queries=7,
        threads_connected=141,
        threads_running=1,
        max_used_connections=151,
        connection_errors_max_connections=3,
    )
    variables = {
        "max_connections": "151",
        "long_query_time": "2.000000",
        "slow_query_log": "ON",
        "version": "8.0.36",
    }
    summary = summarize_status(before, after, variables, 2.0)
    assert summary.queries_per_second == 250.0
    # two slow queries in the 2 s sample are a count, not 60 a minute; 7 in 1002 s since start
    assert (summary.slow_queries_in_sample, summary.slow_queries_per_minute_since_start) == (2, 0.42)
    assert (summary.threads_connected, summary.threads_running) == (140, 0)
    assert summary.connection_usage_percent == 92.7
    assert (summary.long_query_time_s, summary.slow_query_log, summary.refused_max_connections) == (
        2.0,
        True,
        3,
    )
    titles = {(f.severity, f.title) for f in RUNBOOK.evaluate({"mysql.status.summary": summary.model_dump()})}
    assert titles == {("critical", "MySQL uses 92.7% of max_connections")}
    since_start = summarize_status(after, after, variables, 0.0)
    assert since_start.queries_per_second == round(10_500 / 1002, 2)
    assert (since_start.slow_queries_in_sample, since_start.sample_s) == (None, 0)
    without_own = summarize_status(before, after, variables, 2.0, own_questions=4)
    assert without_own.queries_per_second == 248.0
    assert summarize_status(before, before, variables, 2.0, own_questions=4).queries_per_second == 0


def slow_titles(**readings: float) -> set[tuple[str, str]]:
    reading = {"slow_queries_total": 0, "sample_s": 1.002, **readings}
    return {(f.severity, f.title) for f in RUNBOOK.evaluate({"mysql.status.summary": reading})}


def test_slow_query_findings_need_more_than_one_query() -> None:
    assert slow_titles(slow_queries_in_sample=1, slow_queries_total=1, uptime_s=1) == set()
    assert slow_titles(slow_queries_in_sample=3) == {
        ("warning", "3 MySQL slow queries finished in the last 1 s")
    }
    assert slow_titles(slow_queries_in_sample=12) == {
        ("critical", "12 MySQL slow queries finished in the last 1 s")
    }
    # an average over few slow queries (a young server) says little; over many it is a finding
    assert slow_titles(slow_queries_total=9, slow_queries_per_minute_since_start=54.0) == set()
    assert slow_titles(slow_queries_total=600, slow_queries_per_minute_since_start=1.5) == {
        ("warning", "MySQL has averaged 1.5/min slow queries since start")
    }
    assert slow_titles(slow_queries_total=6000, slow_queries_per_minute_since_start=15.0) == {
        ("critical", "MySQL has averaged 15/min slow queries since start")
    }


def test_innodb_arithmetic_and_findings() -> None:
    status = status_rows(
        innodb_buffer_pool_read_requests=100_000,
        innodb_buffer_pool_reads=12_000,
        innodb_row_lock_current_waits=0,
    )
    summary = summarize_innodb(status, {"innodb_buffer_pool_size": "134217728"})
    assert summary.buffer_pool_hit_percent == 88.0
    assert summary.deadlocks is None  # MySQL has no Innodb_deadlocks status
    [finding] = RUNBOOK.evaluate({"mysql.innodb.summary": summary.model_dump()})
    assert (finding.severity, finding.title) == ("critical", "InnoDB buffer pool hit ratio is only 88%")


async def test_a_server_nothing_listens_for_is_down() -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run("mysql.status.summary", port=1, interval_s=0)
    assert caught.value.code == "service_down"
    assert "MySQL is not accepting connections at 127.0.0.1:1" in caught.value.message


async def test_the_server_stops_a_statement_the_probe_would_give_up_on(connections: list[Any]) -> None:
    """A statement past the probe's time is stopped by the server, saying so: before, the client
    gave up ("lost connection") and the statement ran on, beside the next probe's."""
    observer = await trio.to_thread.run_sync(connect)
    connections.append(observer)
    marker = f"sonde_stopped_{uuid.uuid4().hex[:8]}"
    with trio.fail_after(3):
        async with session(ProbeContext(), MysqlParams()) as opened:
            with pytest.raises(OutOfTime, match="stopped a statement at the probe's time limit"):
                await opened.run((f"SELECT SLEEP(8) AS {marker}", ()))
    with observer.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE %s",
            [f"%{marker}%"],
        )
        assert cursor.fetchone() == (0,)  # gone already, not running on for the rest of its 8 s


def test_the_statement_limit_in_each_servers_words() -> None:
    assert statement_limit("10.11.19-MariaDB-0+deb12u1", 2.5) == "SET SESSION max_statement_time = 2.500"
    assert statement_limit("8.0.36", 2.5) == "SET SESSION max_execution_time = 2500"


async def test_a_socket_directory_is_taken_as_the_host() -> None:
    """The host param's description names a socket's directory: its mysqld.sock is used."""
    require(os.geteuid() == 0, "root logs in over the socket as the OS user root (unix_socket)")
    admin = await trio.to_thread.run_sync(connect)
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT @@socket")
            (path,) = cursor.fetchone()
    finally:
        admin.close()
    for host in (path, os.path.dirname(path)):
        found = await run("mysql.innodb.summary", host=host)
        assert found["buffer_pool_size_bytes"] > 0, host


async def test_a_listener_that_never_greets_is_said_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyMySQL says "Lost connection to MySQL server during query" where no query was sent."""
    monkeypatch.setattr(mysql_connection, "READ_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # never accepts: the connection waits in the backlog, and no greeting comes
        with pytest.raises(ProbeExecutionError) as caught:
            await run("mysql.innodb.summary", port=silent.getsockname()[1])
    assert caught.value.code == "unavailable"
    assert "it sent no greeting within 1 s of the connection (is a MySQL server listening there?)" in (
        caught.value.message
    )
    assert "during query" not in caught.value.message


@pytest.fixture
async def mysql_user() -> AsyncIterator[str]:
    """A user with a password the agent config does not hold, and no privileges; dropped afterwards."""
    name = f"sonde_user_{uuid.uuid4().hex[:10]}"
    admin = await trio.to_thread.run_sync(connect)
    try:
        await trio.to_thread.run_sync(
            execute, admin, f"CREATE USER '{name}'@'%' IDENTIFIED BY 'not-in-config'"
        )
        yield name
    finally:
        await trio.to_thread.run_sync(execute, admin, f"DROP USER IF EXISTS '{name}'@'%'")
        await trio.to_thread.run_sync(admin.close)


@pytest.mark.parametrize("unknown_user", [True, False], ids=["unknown-user", "wrong-password"])
async def test_refused_login_is_not_a_missing_privilege(mysql_user: str, unknown_user: bool) -> None:
    user = "no_such_user_sonde" if unknown_user else mysql_user
    with pytest.raises(ProbeExecutionError) as caught:
        await run("mysql.status.summary", user=user, interval_s=0)
    assert caught.value.code == "permission_denied"
    message = caught.value.message
    assert f"did not accept the login of user '{user}'" in message
    assert f"Access denied for user '{user}'@'127.0.0.1'" in message  # the user and host the server refused
    assert "packs.mysql.password" in message
    assert "PROCESS" not in message


async def test_database_not_granted_is_a_missing_privilege(mysql_user: str) -> None:
    ctx = ProbeContext()
    ctx.settings.packs["mysql"] = {"user": mysql_user, "password": "not-in-config", "database": "mysql"}
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, "mysql.innodb.summary", {}, ctx)
    assert caught.value.code == "permission_denied"
    message = caught.value.message
    assert f"Access denied for user '{mysql_user}'@'%' to database 'mysql'" in message
    assert "packs.mysql.database" in message
    assert "did not accept the login" not in message


async def test_missing_database_names_its_setting() -> None:
    name = f"sonde_missing_{uuid.uuid4().hex[:10]}"
    ctx = ProbeContext()
    ctx.settings.packs["mysql"] = {"database": name}
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, "mysql.status.summary", {"interval_s": 0}, ctx)
    assert caught.value.code == "refused"  # the agent config's mistake, not a server that is down
    message = caught.value.message
    assert f"MySQL at 127.0.0.1:3306 has no database '{name}'" in message
    assert f"Unknown database '{name}'" in message  # the server's own words
    assert "packs.mysql.database" in message
    assert "not available" not in message
    ctx.settings.packs["mysql"] = {"database": "mysql"}  # one that is there
    assert (await execute_probe(REGISTRY, "mysql.status.summary", {"interval_s": 0}, ctx)).result


# What a login without PROCESS sees, and Sonde's own connections in the process list


@dataclass(frozen=True)
class Login:
    user: str
    password: str

    def connect(self) -> pymysql.connections.Connection:  # type: ignore[type-arg]
        return pymysql.connect(
            host="127.0.0.1",
            port=3306,
            user=self.user,
            password=self.password,
            autocommit=True,
            connect_timeout=3,
        )

    async def run(self, name: str, **params: Any) -> dict[str, Any]:
        """The probe, logged in as this user (its password from the agent config, as an agent has it)."""
        ctx = ProbeContext()
        ctx.settings.packs["mysql"] = {"user": self.user, "password": self.password}
        return (await execute_probe(REGISTRY, name, params, ctx)).result


@pytest.fixture
async def logins() -> AsyncIterator[tuple[Login, Login, str]]:
    """Two users without privileges (random passwords) and a role granting PROCESS; dropped afterwards."""
    suffix = uuid.uuid4().hex[:10]
    login = Login(f"sonde_test_{suffix}_login", secrets.token_urlsafe(16))
    other = Login(f"sonde_test_{suffix}_other", secrets.token_urlsafe(16))
    role = f"sonde_test_{suffix}_role"
    admin = await trio.to_thread.run_sync(connect)
    try:
        for user in (login, other):
            await trio.to_thread.run_sync(
                execute, admin, f"CREATE USER '{user.user}'@'%' IDENTIFIED BY '{user.password}'"
            )
        await trio.to_thread.run_sync(execute, admin, f"CREATE ROLE {role}")
        await trio.to_thread.run_sync(execute, admin, f"GRANT PROCESS ON *.* TO {role}")
        yield login, other, role
    finally:
        for user in (login, other):
            await trio.to_thread.run_sync(execute, admin, f"DROP USER IF EXISTS '{user.user}'@'%'")
        await trio.to_thread.run_sync(execute, admin, f"DROP ROLE IF EXISTS {role}")
        await trio.to_thread.run_sync(admin.close)


async def test_process_list_says_what_a_login_without_process_cannot_see(
    logins: tuple[Login, Login, str], connections: list[Any]
) -> None:
    # Without PROCESS the list held the login's own threads only, "truncated": false, and
    # nothing said that other users' threads were hidden.
    login, other, _ = logins
    for _ in range(3):
        connections.append(await trio.to_thread.run_sync(other.connect))
    connections.append(await trio.to_thread.run_sync(login.connect))
    limited = await login.run("mysql.processes.list", include_sleeping=True)
    assert {t["user"] for t in limited["threads"]} == {login.user}  # its own idle connection
    assert limited["sees_all_threads"] is False
    assert "PROCESS" in limited["visibility"]
    assert limited["hidden_threads"] >= 3  # the other user's, at least
    assert f"about {limited['hidden_threads']} " in limited["visibility"]
    full = await run("mysql.processes.list", include_sleeping=True)
    assert sum(t["user"] == other.user for t in full["threads"]) == 3
    assert (full["sees_all_threads"], full["hidden_threads"], full["visibility"]) == (True, None, None)


async def test_process_granted_through_a_role_sees_every_thread(
    logins: tuple[Login, Login, str], connections: list[Any]
) -> None:
    login, other, role = logins
    admin = await trio.to_thread.run_sync(connect)
    connections.append(admin)
    await trio.to_thread.run_sync(execute, admin, f"GRANT {role} TO '{login.user}'@'%'")
    await trio.to_thread.run_sync(execute, admin, f"SET DEFAULT ROLE {role} FOR '{login.user}'@'%'")
    connections.append(await trio.to_thread.run_sync(other.connect))
    found = await login.run("mysql.processes.list", include_sleeping=True)
    assert other.user in {t["user"] for t in found["threads"]}
    assert (found["sees_all_threads"], found["hidden_threads"], found["visibility"]) == (True, None, None)


async def test_process_list_leaves_out_sonde_connections(connections: list[Any]) -> None:
    # A Sonde probe running beside this one (a runbook runs its probes at once) was listed
    # as any client's query.
    plain = await trio.to_thread.run_sync(connect)
    connections.append(plain)
    plain_id = plain.thread_id()
    async with session(ProbeContext(), MysqlParams()) as sonde:
        [[row]] = await sonde.run(("SELECT CONNECTION_ID() AS id", ()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, execute, plain, "SELECT SLEEP(3)")
            nursery.start_soon(sonde.run, ("SELECT SLEEP(3)", ()))
            found = await wait_for(  # until both statements run
                "mysql.processes.list",
                {},
                lambda r: any(t["id"] == plain_id for t in r["threads"]) and r["sonde_threads"] >= 1,
            )
    assert row["id"] not in {t["id"] for t in found["threads"]}
