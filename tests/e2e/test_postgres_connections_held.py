"""A health_check of the postgres pack takes at most 2 of the server's connections at once.

The runbook's six probes ran at once on the agent, each on a connection of its own: six of
the server's slots, which on a nearly full server turned its applications away. Here a real
hub, a real agent and the machine's PostgreSQL on 127.0.0.1:5432, with the agent logging in
as a role of the test's own (with pg_monitor, as the pack asks) so that pg_stat_activity
tells its sessions (application 'sonde') from every other client's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sonde.packs.postgres.runbook import RUNBOOK
from tests.conftest import require
from tests.e2e.connections_held import check_held, health_checks

DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
START_HINT = "PostgreSQL must run on 127.0.0.1:5432: pg_ctlcluster --skip-systemctl-redirect 15 main start"
CONNECTIONS_PER_PROBE = 1  # the most one postgres probe holds at once: `run_queries` calls follow each other


def connect() -> psycopg.Connection[Any]:
    return psycopg.connect(DSN, autocommit=True)


@pytest.fixture
def role() -> Iterator[str]:
    """A login role of this test's own, member of pg_monitor; dropped afterwards."""
    try:
        admin = connect()
    except psycopg.OperationalError:
        require(False, START_HINT)
    name = f"sonde_held_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE pg_monitor")
        try:
            yield name
        finally:
            admin.execute(f"DROP ROLE {name}")


async def test_a_health_check_holds_at_most_two_connections(tmp_path: Path, role: str) -> None:
    with connect() as sampler:

        def sonde_sessions() -> int:
            row = sampler.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sonde' AND usename = %s",
                (role,),
            ).fetchone()
            assert row is not None
            return int(row[0])

        done = await health_checks(tmp_path, "postgres", {"user": role}, sonde_sessions, runs=15)
    check_held(done, len(RUNBOOK.steps), CONNECTIONS_PER_PROBE)
