"""Who blocks whom in MySQL/MariaDB, open transactions in the process list, long queries, deadlocks.

Against the real MariaDB on 127.0.0.1:3306 (root, empty password; performance_schema
off, its default), and, for who holds a metadata lock, a MariaDB of the test's own
with performance_schema on, started in /tmp on a free port and stopped after. Each
test makes its own database (unique name), holds its locks for seconds, and drops it.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.mysql.locks import ROW_WAITS_MARIADB, ROW_WAITS_MYSQL8, row_waits_query
from sonde.packs.mysql.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.mysql.visibility import global_privileges
from sonde.packs.runbook import Threshold
from tests.conftest import require
from tests.packs.test_mysql import (
    REGISTRY,
    WAIT_S,
    execute,
    mariadb_runs,  # noqa: F401  (autouse: no server, a skip; under CI=true, a failure)
    run,
)
from tests.packs.test_mysql_visibility import TRIES, Accounts, access_denied_errors
from tests.ports import free_port

POLL_S = 0.1
MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "mariadb-install-db"


def connect_to(port: int) -> Any:
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", password="", autocommit=True, connect_timeout=3
    )


@dataclass
class Scene:
    """One database with a row-locked table ``t`` and a table ``m``, and the connections around them."""

    port: int
    name: str = field(default_factory=lambda: f"sonde_lockw_{uuid.uuid4().hex[:10]}")
    opened: list[Any] = field(default_factory=list)

    async def connection(self) -> Any:
        made = await trio.to_thread.run_sync(connect_to, self.port)
        self.opened.append(made)
        return made

    async def sql(self, connection: Any, *statements: str) -> None:
        for statement in statements:
            await trio.to_thread.run_sync(execute, connection, statement)

    async def probe(self, name: str, **params: Any) -> dict[str, Any]:
        ctx = ProbeContext()
        ctx.settings.packs["mysql"] = {"port": self.port}
        return (await execute_probe(REGISTRY, name, params, ctx)).result

    async def wait_for(self, name: str, seen: Any, **params: Any) -> dict[str, Any]:
        with trio.fail_after(WAIT_S):
            while True:
                found = await self.probe(name, **params)
                if seen(found):
                    return found
                await trio.sleep(POLL_S)


@asynccontextmanager
async def scene(port: int) -> AsyncIterator[Scene]:
    made = Scene(port)
    admin = await made.connection()
    await made.sql(
        admin,
        f"CREATE DATABASE {made.name}",
        f"CREATE TABLE {made.name}.t (id INT PRIMARY KEY, n INT) ENGINE=InnoDB",
        f"INSERT INTO {made.name}.t VALUES (1, 0)",
        f"CREATE TABLE {made.name}.m (id INT PRIMARY KEY) ENGINE=InnoDB",
    )
    try:
        yield made
    finally:
        for connection in made.opened[1:]:  # their locks go with them
            await trio.to_thread.run_sync(connection.close)
        await made.sql(admin, f"DROP DATABASE IF EXISTS {made.name}")
        await trio.to_thread.run_sync(admin.close)


async def hold_row(place: Scene) -> Any:
    """A connection holding row 1 of ``t`` in an open transaction, then idle."""
    holder = await place.connection()
    await place.sql(holder, "BEGIN", f"SELECT * FROM {place.name}.t WHERE id = 1 FOR UPDATE")
    return holder


async def hold_table(place: Scene) -> Any:
    """A connection holding ``m`` by LOCK TABLES, then idle (no transaction)."""
    holder = await place.connection()
    await place.sql(holder, f"LOCK TABLES {place.name}.m WRITE")
    return holder


def waits_seen(found: dict[str, Any], row_waiter: int, table_waiter: int) -> bool:
    rows = {w["waiting"]["id"] for w in found["row_lock_waits"] if w["waiting"]}
    tables = {w["waiting"]["id"] for w in found["metadata_lock_waits"]}
    return row_waiter in rows and table_waiter in tables


async def test_lock_waits_name_the_blocking_threads() -> None:
    # A row lock held by an idle transaction and a LOCK TABLES holder were invisible: the
    # process list left both out ('Sleep'), and the runbook said only "1 InnoDB row lock
    # waits right now", with no word of the metadata lock wait.
    async with scene(3306) as place:
        row_holder, table_holder = await hold_row(place), await hold_table(place)
        row_waiter, table_waiter = await place.connection(), await place.connection()
        await place.sql(row_waiter, "SET SESSION innodb_lock_wait_timeout = 20")
        await place.sql(table_waiter, "SET SESSION lock_wait_timeout = 20")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(place.sql, row_waiter, f"UPDATE {place.name}.t SET n = n + 1 WHERE id = 1")
            nursery.start_soon(place.sql, table_waiter, f"SELECT * FROM {place.name}.m")
            found = await place.wait_for(
                "mysql.locks.waits",
                lambda r: waits_seen(r, row_waiter.thread_id(), table_waiter.thread_id()),
            )
            await place.sql(row_holder, "ROLLBACK")
            await place.sql(table_holder, "UNLOCK TABLES")
    [row_wait] = [w for w in found["row_lock_waits"] if w["waiting"]["id"] == row_waiter.thread_id()]
    blocker = row_wait["blocking"]
    assert (blocker["id"], blocker["command"], blocker["user"]) == (row_holder.thread_id(), "Sleep", "root")
    assert (blocker["transaction_state"], blocker["transaction_s"] is not None) == ("RUNNING", True)
    assert (row_wait["lock_table"], row_wait["waiting"]["transaction_state"]) == (
        f"{place.name}.t",
        "LOCK WAIT",
    )
    [table_wait] = [w for w in found["metadata_lock_waits"] if w["waiting"]["id"] == table_waiter.thread_id()]
    assert table_wait["waiting"]["state"] == "Waiting for table metadata lock"
    # performance_schema is off here (MariaDB's default): the holder cannot be told, and it says so
    assert (table_wait["holders"], found["knows_metadata_lock_holders"]) == (None, False)
    assert "performance_schema is off" in found["visibility"]
    titles = {f.title: f for f in RUNBOOK.evaluate({"mysql.locks.waits": found})}
    row_title = f"MySQL thread {row_holder.thread_id()} blocks 1 thread on row locks in {place.name}.t"
    assert row_title in titles
    assert "transaction RUNNING open for" in titles[row_title].detail
    assert f"KILL {row_holder.thread_id()}" in titles[row_title].detail
    assert "1 MySQL thread waits on a table metadata lock, holder unknown" in titles


async def test_idle_transactions_are_listed_with_their_age() -> None:
    # mysql.processes.list left an idle thread holding a transaction open out by default,
    # and with include_sleeping showed it as any idle connection.
    async with scene(3306) as place:
        holder, idle = await hold_row(place), await place.connection()
        found = await place.probe("mysql.processes.list")
        listed = {t["id"]: t for t in found["threads"]}
        assert idle.thread_id() not in listed  # idle without a transaction: left out by default
        thread = listed[holder.thread_id()]
        assert (thread["command"], thread["transaction_state"]) == ("Sleep", "RUNNING")
        assert thread["transaction_s"] >= 0
        everything = await place.probe("mysql.processes.list", include_sleeping=True)
        assert {t["id"]: t["transaction_s"] for t in everything["threads"]}[idle.thread_id()] is None


async def test_long_open_transaction_finding() -> None:
    async with scene(3306) as place:
        holder = await hold_row(place)
        found = await place.wait_for(
            "mysql.processes.list",
            lambda r: any(t["id"] == holder.thread_id() for t in r["threads"]),
            min_time_s=1,  # the transaction's age counts, though the thread idles
        )
    assert RUNBOOK.probes[1:3] == ["mysql.processes.list", "mysql.locks.waits"]
    assert RUNBOOK.steps[1].params == {"min_time_s": 60}
    quick = build_runbook({**THRESHOLDS, "long_query_s": Threshold(warning=1, critical=3600, unit=" s")})
    [finding] = [f for f in quick.evaluate({"mysql.processes.list": found}) if "MySQL transaction" in f.title]
    assert finding.title.startswith("A MySQL transaction has been open for ")
    assert finding.severity == "warning"
    assert f"thread {holder.thread_id()} (root@" in finding.detail


async def test_a_login_without_process_is_told_what_it_cannot_see(accounts: Accounts) -> None:
    login = await accounts.user()
    deltas = []
    for _ in range(TRIES):  # a refused login of another client in between counts too: read again
        before = await trio.to_thread.run_sync(access_denied_errors, accounts.admin)
        found = await login.run("mysql.locks.waits")
        listed = await login.run("mysql.processes.list")
        deltas.append(await trio.to_thread.run_sync(access_denied_errors, accounts.admin) - before)
        if deltas[-1] == 0:
            break
    # asked, not tried: INNODB_TRX needs PROCESS, and a refusal is counted
    assert 0 in deltas, f"Access_denied_errors grew by {deltas}"
    assert (found["sees_all_threads"], found["row_lock_waits"]) == (False, [])
    assert "PROCESS" in found["visibility"]
    assert "transaction" in listed["visibility"]
    [hidden] = [f for f in RUNBOOK.evaluate({"mysql.locks.waits": found}) if f.severity == "info"]
    assert hidden.title == "MySQL lock waits are partly hidden from this login"


@pytest.fixture
async def accounts() -> AsyncIterator[Accounts]:
    made = Accounts(await trio.to_thread.run_sync(connect_to, 3306))
    try:
        yield made
    finally:
        await made.close()


# Who holds a metadata lock: a MariaDB of our own with performance_schema on


@pytest.fixture
def own_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A MariaDB with performance_schema and its metadata lock instrument on, on a free port."""
    require(Path(MARIADBD).exists() and shutil.which(INSTALL_DB) is not None, "needs mariadbd to start one")
    home = Path(tmp_path_factory.mktemp("mariadb"))
    install = [INSTALL_DB, "--no-defaults", f"--datadir={home / 'data'}", "--user=root"]
    subprocess.run(
        [*install, "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    server = subprocess.Popen(
        [
            MARIADBD,
            "--no-defaults",
            f"--datadir={home / 'data'}",
            "--user=root",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={home / 'sock'}",
            f"--pid-file={home / 'pid'}",
            "--skip-log-bin",
            "--performance-schema=ON",
            "--performance-schema-instrument=wait/lock/metadata/sql/mdl=ON",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


async def test_metadata_lock_holder_is_named_where_performance_schema_tells(own_mariadb: int) -> None:
    with trio.fail_after(WAIT_S):
        while True:  # until the server takes connections
            try:
                await trio.to_thread.run_sync(lambda: connect_to(own_mariadb).close())
                break
            except pymysql.err.OperationalError:
                await trio.sleep(POLL_S)
    async with scene(own_mariadb) as place:
        table_holder, table_waiter = await hold_table(place), await place.connection()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(place.sql, table_waiter, f"SELECT * FROM {place.name}.m")
            found = await place.wait_for("mysql.locks.waits", lambda r: r["metadata_lock_waits"] != [])
            await place.sql(table_holder, "UNLOCK TABLES")
    [wait] = found["metadata_lock_waits"]
    assert (wait["waiting"]["id"], wait["object"]) == (table_waiter.thread_id(), f"{place.name}.m")
    assert [h["id"] for h in wait["holders"]] == [table_holder.thread_id()]
    assert (found["knows_metadata_lock_holders"], found["visibility"]) == (True, None)
    titles = [f.title for f in RUNBOOK.evaluate({"mysql.locks.waits": found})]
    assert (
        f"MySQL thread {table_holder.thread_id()} blocks 1 thread on a table metadata lock on {place.name}.m"
        in titles
    )


# Deadlocks and the average row lock wait, judged since start


def deadlock(first: Any, second: Any, table: str) -> None:
    """Two transactions taking two rows in opposite order: InnoDB rolls one back."""
    first.cursor().execute("BEGIN")
    second.cursor().execute("BEGIN")
    first.cursor().execute(f"UPDATE {table} SET n = 1 WHERE id = 1")
    second.cursor().execute(f"UPDATE {table} SET n = 1 WHERE id = 2")


async def test_deadlocks_since_start_are_judged() -> None:
    async with scene(3306) as place:
        first, second = await place.connection(), await place.connection()
        table = f"{place.name}.t"
        await place.sql(first, f"INSERT INTO {table} VALUES (2, 0)")
        before = await run("mysql.innodb.summary")
        await trio.to_thread.run_sync(deadlock, first, second, table)
        errors: list[int] = []

        async def take(connection: Any, row: int) -> None:
            try:
                await place.sql(connection, f"UPDATE {table} SET n = 2 WHERE id = {row}")
            except pymysql.err.OperationalError as exc:
                errors.append(exc.args[0])
            await place.sql(connection, "ROLLBACK")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, first, 2)
            nursery.start_soon(take, second, 1)
        after = await run("mysql.innodb.summary")
    assert errors == [1213]  # ER_LOCK_DEADLOCK
    assert after["deadlocks"] >= before["deadlocks"] + 1
    found = [f for f in RUNBOOK.evaluate({"mysql.innodb.summary": after}) if "deadlocks" in f.title]
    assert len(found) == 1
    assert "SHOW ENGINE INNODB STATUS" in found[0].detail


def innodb_titles(**reading: Any) -> set[tuple[str, str]]:
    return {(f.severity, f.title) for f in RUNBOOK.evaluate({"mysql.innodb.summary": reading})}


def test_deadlock_and_row_lock_time_thresholds() -> None:
    assert innodb_titles(deadlocks=0, uptime_s=3600) == set()
    assert innodb_titles(deadlocks=3, deadlocks_per_hour_since_start=30.0, uptime_s=360) == {
        ("info", "3 InnoDB deadlocks since start (30/h)")
    }
    assert innodb_titles(deadlocks=40, deadlocks_per_hour_since_start=20.0, uptime_s=7200) == {
        ("critical", "InnoDB has averaged 20/h deadlocks since start")
    }
    assert innodb_titles(row_lock_waits=9, row_lock_time_avg_ms=50_000) == set()
    assert innodb_titles(row_lock_waits=200, row_lock_time_avg_ms=7585.0) == {
        ("warning", "InnoDB row lock waits have averaged 8 s since start")
    }


def grants(*lines: str) -> list[dict[str, Any]]:
    return [{"Grants for sonde@%": line} for line in lines]


def test_where_row_lock_waits_are_read_and_who_may_read_them() -> None:
    # MySQL 8 keeps row lock waits in performance_schema, which needs SELECT on it: without
    # it the statement would be refused (and counted), so it is not sent
    process = global_privileges(grants("GRANT PROCESS ON *.* TO `sonde`@`%`"))
    reader = global_privileges(
        grants(
            "GRANT PROCESS ON *.* TO `sonde`@`%`",
            "GRANT SELECT ON `performance_schema`.* TO `sonde`@`%`",
        )
    )
    assert (process.reads_performance_schema, reader.reads_performance_schema) == (False, True)
    assert row_waits_query("10.11.19-MariaDB-0+deb12u1", process) == ROW_WAITS_MARIADB
    assert row_waits_query("5.7.44-log", process) == ROW_WAITS_MARIADB
    assert row_waits_query("8.0.36", process) is None
    assert row_waits_query("8.0.36", reader) == ROW_WAITS_MYSQL8
    assert row_waits_query("8.0.36", global_privileges(grants("GRANT USAGE ON *.* TO `sonde`@`%`"))) is None
