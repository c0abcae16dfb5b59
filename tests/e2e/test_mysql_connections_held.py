"""A health_check of the mysql pack takes at most 2 of the server's connections at once.

The runbook's four probes ran at once on the agent, each on a connection of its own (the
status sample holding its connection for a second). Here a real hub, a real agent and the
machine's MariaDB on 127.0.0.1:3306, the agent logging in as a user of the test's own (with
the privileges the pack asks for), so that the process list tells its connections from
every other client's.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sonde.packs.mysql.runbook import RUNBOOK
from tests.conftest import require
from tests.e2e.connections_held import check_held, health_checks

START_HINT = "MariaDB must run on 127.0.0.1:3306: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
CONNECTIONS_PER_PROBE = 1  # the most one mysql probe holds at once: one `session` each


def connect(user: str = "root", password: str = "") -> Any:
    return pymysql.connect(
        host="127.0.0.1", port=3306, user=user, password=password, autocommit=True, connect_timeout=3
    )


def execute(connection: Any, sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.fixture
def login() -> Iterator[tuple[str, str]]:
    """A user of this test's own with the pack's privileges, and its password; dropped afterwards."""
    try:
        admin = connect()
    except pymysql.err.OperationalError:
        require(False, START_HINT)
    name, password = f"sonde_held_{uuid.uuid4().hex[:10]}", secrets.token_urlsafe(16)
    try:
        execute(admin, f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        execute(admin, f"GRANT PROCESS, SHOW VIEW ON *.* TO '{name}'@'%'")
        execute(admin, f"GRANT SELECT ON performance_schema.* TO '{name}'@'%'")
        yield name, password
    finally:
        execute(admin, f"DROP USER IF EXISTS '{name}'@'%'")
        admin.close()


async def test_a_health_check_holds_at_most_two_connections(tmp_path: Path, login: tuple[str, str]) -> None:
    user, password = login
    sampler = connect()
    try:

        def sonde_connections() -> int:
            with sampler.cursor() as cursor:
                cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", (user,))
                return int(cursor.fetchone()[0])

        settings = {"user": user, "password": password}
        done = await health_checks(tmp_path, "mysql", settings, sonde_connections)
    finally:
        sampler.close()
    check_held(done, len(RUNBOOK.steps), CONNECTIONS_PER_PROBE)
