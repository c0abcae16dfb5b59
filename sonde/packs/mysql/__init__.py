"""The `mysql` pack (MySQL and MariaDB): databases, process list, global status, InnoDB.

Queries run through PyMySQL (pure Python) in a worker thread on a read-only
session. Other users' threads in the process list, open transactions and row lock
waits are only visible with the PROCESS privilege, every database's size only with a
privilege on every table (SHOW VIEW ON *.* reads no data), and who holds a metadata
lock (or, on MySQL 8, a row lock) only with SELECT on performance_schema: grant them to
the agent's database user.
"""

from __future__ import annotations

from pathlib import Path

from sonde import __version__
from sonde.packs.base import Detection, Pack
from sonde.packs.services import ServiceDefaults, detect_service

DEFAULTS = ServiceDefaults("127.0.0.1", 3306, user="root")
SOCKETS = ("/run/mysqld/mysqld.sock", "/var/run/mysqld/mysqld.sock", "/var/lib/mysql/mysql.sock")


def detect_mysql() -> Detection:
    return detect_service("MySQL/MariaDB", "pymysql", "PyMySQL", SOCKETS, DEFAULTS)


PACK = Pack(
    described_by=Path(__file__).with_name("descriptor.json"),
    name="mysql",
    version=__version__,
    description=(
        "MySQL and MariaDB: database sizes, process list, QPS and connection usage, slow queries, InnoDB, "
        "lock waits."
    ),
    detect=detect_mysql,
    categories=("mysql",),
    settings=("host", "port", "user", "password", "database", "show_values"),
    # the probe and runbook modules, in declaration order: imported on first use of PACK.probes
    modules=(
        f"{__name__}.probes",
        f"{__name__}.status",
        f"{__name__}.locks",
        f"{__name__}.runbook",
    ),
)
