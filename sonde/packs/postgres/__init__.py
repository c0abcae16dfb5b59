"""The `postgres` pack: databases, connections, long and blocked queries, replication, wraparound, cache.

Queries run through psycopg 3 in a worker thread (`ctx.in_thread`), on a
read-only session with a statement timeout. Numbers from probe params are
bound as query parameters, never pasted into SQL text. Other users' query text
is only visible to superusers and members of ``pg_monitor`` (or
``pg_read_all_stats``): grant the agent's database user that role.
"""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack
from sonde.packs.services import ServiceDefaults, detect_service

DEFAULTS = ServiceDefaults("127.0.0.1", 5432, user="postgres", database="postgres")
SOCKETS = ("/var/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5432")


def detect_postgres() -> Detection:
    return detect_service("PostgreSQL", "psycopg", "psycopg", SOCKETS, DEFAULTS)


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="postgres",
    version=__version__,
    description=(
        "PostgreSQL: database sizes, connections vs the slots clients may use, long and blocked queries, "
        "replication and WAL archiving, transaction ID wraparound, cache hits."
    ),
    detect=detect_postgres,
    categories=("postgres",),
    settings=("host", "port", "user", "password", "database", "show_values"),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.activity",
        f"{__name__}.locks",
        f"{__name__}.server",
        f"{__name__}.cache",
        f"{__name__}.runbook",
    ),
)
