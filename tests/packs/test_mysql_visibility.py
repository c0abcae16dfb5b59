"""What a MySQL/MariaDB login may see, asked without being refused; Sonde's own connections in the counts.

Against the real MariaDB on 127.0.0.1:3306 (root, empty password): each test makes
throwaway users, roles and databases with unique names, and drops them afterwards.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.mysql.connection import MysqlParams, session
from sonde.packs.mysql.visibility import databases_visibility, global_privileges
from tests.packs.test_mysql import (
    WAIT_S,
    Login,
    connect,
    execute,
    mariadb_runs,  # noqa: F401  (autouse: no server, a skip; under CI=true, a failure)
    run,
    threads_now,
)

POLL_S = 0.1
TRIES = 5  # a reading another client's refused login fell into is taken again, so many times at most


class Accounts:
    """Users, roles and databases made for one test (unique names), all dropped by `close`."""

    def __init__(self, admin: Any) -> None:
        self.admin, self.prefix = admin, f"sonde_v{uuid.uuid4().hex[:8]}"
        self.users: list[str] = []
        self.roles: list[str] = []
        self.databases: list[str] = []

    async def sql(self, *statements: str) -> None:
        for statement in statements:
            await trio.to_thread.run_sync(execute, self.admin, statement)

    async def user(self, *grants: str) -> Login:
        """A user holding ``grants`` (each a GRANT statement with ``{user}`` for the account)."""
        login = Login(f"{self.prefix}_u{len(self.users)}", secrets.token_urlsafe(16))
        self.users.append(login.user)
        account = f"'{login.user}'@'%'"
        await self.sql(f"CREATE USER {account} IDENTIFIED BY '{login.password}'")
        await self.sql(*(grant.format(user=account) for grant in grants))
        return login

    async def role(self, *grants: str) -> str:
        """A role holding ``grants`` (each a GRANT statement with ``{user}`` for the role)."""
        name = f"{self.prefix}_r{len(self.roles)}"
        self.roles.append(name)
        await self.sql(f"CREATE ROLE {name}", *(grant.format(user=name) for grant in grants))
        return name

    async def database(self) -> str:
        """A database of one table with a row in it."""
        name = f"{self.prefix}_d{len(self.databases)}"
        self.databases.append(name)
        await self.sql(
            f"CREATE DATABASE {name}",
            f"CREATE TABLE {name}.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB",
            f"INSERT INTO {name}.t VALUES (1, REPEAT('x', 60000))",
        )
        return name

    async def close(self) -> None:
        for user in self.users:
            await self.sql(f"DROP USER IF EXISTS '{user}'@'%'")
        for role in self.roles:
            await self.sql(f"DROP ROLE IF EXISTS {role}")
        for database in self.databases:
            await self.sql(f"DROP DATABASE IF EXISTS {database}")
        await trio.to_thread.run_sync(self.admin.close)


@pytest.fixture
async def connections() -> AsyncIterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for connection in opened:
        await trio.to_thread.run_sync(connection.close)


@pytest.fixture
async def accounts() -> AsyncIterator[Accounts]:
    made = Accounts(await trio.to_thread.run_sync(connect))
    try:
        yield made
    finally:
        await made.close()


def access_denied_errors(admin: Any) -> int:
    with admin.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Access_denied_errors'")
        return int(cursor.fetchone()[1])


# 1. Whether the login holds PROCESS is asked, not tried


async def test_asking_for_process_adds_no_access_denied_error(accounts: Accounts) -> None:
    # Without PROCESS, each mysql.processes.list read information_schema.INNODB_TRX to find
    # out: the server refused it and counted one more Access_denied_errors, which an
    # operator's alert watches.
    login = await accounts.user()
    deltas = []
    for _ in range(TRIES):  # a refused login of another client in between counts too: read again
        before = await trio.to_thread.run_sync(access_denied_errors, accounts.admin)
        answers = [await login.run("mysql.processes.list") for _ in range(2)]
        answers += [await login.run("mysql.databases.sizes") for _ in range(2)]
        deltas.append(await trio.to_thread.run_sync(access_denied_errors, accounts.admin) - before)
        if deltas[-1] == 0:
            break
    assert 0 in deltas, f"Access_denied_errors grew by {deltas} over each try's calls"
    for listed in answers[:2]:
        assert (listed["sees_all_threads"], "PROCESS" in listed["visibility"]) == (False, True)


@pytest.mark.parametrize(
    ("grants", "role_grants", "sees_all"),
    [
        ((), (), False),
        (("GRANT PROCESS ON *.* TO {user}",), (), True),
        (("GRANT ALL PRIVILEGES ON *.* TO {user}",), (), True),
        (("GRANT SELECT, PROCESS, SHOW VIEW ON *.* TO {user}",), (), True),
        (("GRANT ALL PRIVILEGES ON `mysql`.* TO {user}",), (), False),  # PROCESS is global only
        (("GRANT {role} TO {user}", "SET DEFAULT ROLE {role} FOR {user}"), ("PROCESS",), True),
        (("GRANT {role} TO {user}",), ("PROCESS",), False),  # granted, not enabled
        (("GRANT {role} TO {user}", "SET DEFAULT ROLE {role} FOR {user}"), ("SHOW VIEW",), False),
    ],
    ids=[
        "none",
        "direct",
        "all-privileges",
        "among-others",
        "database-level",
        "through-a-role",
        "role-not-enabled",
        "role-without-it",
    ],
)
async def test_process_is_told_granted_directly_or_through_a_role(
    accounts: Accounts, grants: tuple[str, ...], role_grants: tuple[str, ...], sees_all: bool
) -> None:
    role = await accounts.role(*(f"GRANT {privilege} ON *.* TO {{user}}" for privilege in role_grants))
    login = await accounts.user(*(grant.replace("{role}", role) for grant in grants))
    found = await login.run("mysql.processes.list", include_sleeping=True)
    assert found["sees_all_threads"] is sees_all
    assert (found["hidden_threads"] is None, found["visibility"] is None) == (sees_all, sees_all)


async def test_process_through_a_role_of_a_role(accounts: Accounts) -> None:
    inner = await accounts.role("GRANT PROCESS ON *.* TO {user}")
    outer = await accounts.role(f"GRANT {inner} TO {{user}}")
    login = await accounts.user(f"GRANT {outer} TO {{user}}", f"SET DEFAULT ROLE {outer} FOR {{user}}")
    found = await login.run("mysql.processes.list")
    assert (found["sees_all_threads"], found["hidden_threads"], found["visibility"]) == (True, None, None)


# 2. mysql.databases.sizes says what it could not see


async def test_database_sizes_say_what_the_login_cannot_see(accounts: Accounts) -> None:
    # information_schema lists only the databases (and tables) a login holds a privilege
    # on: a login with one database's SELECT read as a server of one database, and said
    # nothing of the others.
    granted, other = await accounts.database(), await accounts.database()
    mine = {granted, other}
    limited = await (await accounts.user(f"GRANT SELECT ON {granted}.* TO {{user}}")).run(
        "mysql.databases.sizes"
    )
    assert {d["name"] for d in limited["databases"]} & mine == {granted}
    assert (limited.get("sees_all_databases"), limited.get("hidden_databases")) == (False, None)
    assert "cannot be known" in limited["visibility"]
    assert "SHOW DATABASES" in limited["visibility"]
    # every database's name, but not the tables of those it holds no privilege on
    names_only = await (await accounts.user("GRANT SHOW DATABASES ON *.* TO {user}")).run(
        "mysql.databases.sizes"
    )
    listed = {d["name"]: d for d in names_only["databases"] if d["name"] in mine}
    assert (listed[other]["tables"], listed[other]["size_bytes"]) == (0, 0)
    assert (names_only["sees_all_databases"], names_only["hidden_databases"]) == (False, 0)
    assert "tables" in names_only["visibility"]
    # a privilege on every table (SHOW VIEW reads no data) shows them all, through a role too
    viewer_role = await accounts.role("GRANT SHOW VIEW ON *.* TO {user}")
    viewer = await accounts.user(
        f"GRANT {viewer_role} TO {{user}}", f"SET DEFAULT ROLE {viewer_role} FOR {{user}}"
    )
    full = await viewer.run("mysql.databases.sizes")
    everything = await run("mysql.databases.sizes")
    for answer in (full, everything):
        sized = {d["name"]: d["tables"] for d in answer["databases"] if d["name"] in mine}
        assert sized == {granted: 1, other: 1}
        assert (answer["sees_all_databases"], answer["hidden_databases"], answer["visibility"]) == (
            True,
            0,
            None,
        )


# 4. mysql.status.summary leaves out Sonde's sibling connections, as processes.list does


def sonde_statements(observer: Any) -> int:
    """How many of Sonde's statements ``observer`` (root: it sees every thread) sees running."""
    with observer.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '/* sonde */%'")
        return int(cursor.fetchone()[0])


async def test_status_leaves_out_sonde_siblings(connections: list[Any]) -> None:
    # A Sonde probe running beside it (a runbook runs its probes at once) was counted as a
    # client in threads_connected and threads_running, and so in the percent used.
    observer = await trio.to_thread.run_sync(connect)
    connections.append(observer)
    async with session(ProbeContext(), MysqlParams()) as sibling, trio.open_nursery() as nursery:
        nursery.start_soon(sibling.run, ("SELECT SLEEP(5)", ()))
        with trio.fail_after(WAIT_S):
            while True:  # until the sibling's statement runs, and no client came or went around the probe
                if await trio.to_thread.run_sync(sonde_statements, observer) == 1:
                    seen = await trio.to_thread.run_sync(threads_now, observer)
                    found = await run("mysql.status.summary", interval_s=0)
                    if await trio.to_thread.run_sync(threads_now, observer) == seen:
                        break
                await trio.sleep(POLL_S)
    connected, running = seen  # the observer's counts: itself, the sibling and every other client
    assert found.get("sonde_threads") == 1
    assert found["threads_connected"] == connected - 1  # the observer counted; the sibling not
    assert found["threads_running"] == running - 2  # neither the observer's SHOW STATUS nor the sibling
    assert found["connection_usage_percent"] == round((connected - 1) * 100 / found["max_connections"], 1)


def grants(*lines: str) -> list[dict[str, Any]]:
    return [{"Grants for sonde@%": line} for line in lines]


def test_global_privileges_as_mysql_8_and_mariadb_print_them() -> None:
    # MySQL 8 folds active roles into the user's lines, lists dynamic privileges without
    # spaces, and with partial_revokes takes a global privilege back on some databases
    mysql8 = global_privileges(
        grants(
            "GRANT SELECT, PROCESS, SHOW DATABASES ON *.* TO `sonde`@`%`",
            "GRANT BACKUP_ADMIN,SYSTEM_VARIABLES_ADMIN ON *.* TO `sonde`@`%`",
            "REVOKE SELECT ON `secret`.* FROM `sonde`@`%`",
            "GRANT `monitor`@`%` TO `sonde`@`%`",
        )
    )
    assert (mysql8.sees_all_threads, mysql8.sees_every_table, mysql8.sees_every_database_name) == (
        True,
        False,
        True,
    )
    assert databases_visibility(mysql8)[0] == 0
    mariadb = global_privileges(
        grants(
            "GRANT USAGE ON *.* TO `sonde`@`%` IDENTIFIED BY PASSWORD '*0000000000000000000000000000000000000000'",
            "GRANT SELECT ON `app`.* TO `sonde`@`%`",
            "GRANT `PROCESS` TO `sonde`@`%`",  # a role named so grants nothing by its name
        )
    )
    assert (mariadb.sees_all_threads, mariadb.sees_every_database_name) == (False, False)
    hidden, note = databases_visibility(mariadb)
    assert (hidden, "cannot be known" in (note or "")) == (None, True)
    everything = global_privileges(
        grants("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION")
    )
    assert (everything.sees_all_threads, databases_visibility(everything)) == (True, (0, None))
