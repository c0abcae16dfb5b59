"""What this MySQL/MariaDB login may see, asked of the server without being refused.

Other users' threads in the process list need the PROCESS privilege, and
information_schema lists only the databases and tables the login holds a privilege
on. Whether it holds one is read from ``SHOW GRANTS`` for the current user, which
every login may run: its global grants (``ON *.*``) and those of the roles enabled in
this session. MariaDB lists the current role and the roles it holds, each on lines of
its own; MySQL 8 folds the active roles' privileges into the user's lines. A role
granted but not enabled is listed by name only (``GRANT `r` TO ...``) and counts for
nothing, as on the server.

Trying a statement the privilege guards would tell as well, but the server counts
each refusal (MariaDB's ``Access_denied_errors``, which operators alert on), on every
call. The password hash ``SHOW GRANTS`` may print is read past, never kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SHOW_GRANTS = "SHOW GRANTS"
# a global grant's privileges: upper-case words, never a quoted role or account name
GLOBAL_GRANT = re.compile(r"GRANT ([A-Z][A-Z_ ,]*) ON \*\.\* TO ")
# MySQL 8 with partial_revokes: a global privilege taken back on some databases
PARTIAL_REVOKE = re.compile(r"REVOKE ([A-Z][A-Z_ ,]*) ON ")
# a grant on performance_schema alone (who holds a metadata lock is read there)
PERFORMANCE_SCHEMA_GRANT = re.compile(r"GRANT ([A-Z][A-Z_ ,]*) ON `performance_schema`\.\* TO ")
ALL = "ALL PRIVILEGES"
# any one of these on a table shows it in information_schema.TABLES (SHOW VIEW reads no data)
TABLE_PRIVILEGES = frozenset(
    {
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
        "CREATE",
        "DROP",
        "REFERENCES",
        "INDEX",
        "ALTER",
        "CREATE VIEW",
        "SHOW VIEW",
        "TRIGGER",
        "DELETE HISTORY",
    }
)
SEE_EVERY_TABLE = (
    "Grant the agent's database user SHOW VIEW ON *.* (it reads no data) to see every database and table."
)
NAMES_ONLY = (
    "This login sees every database's name (SHOW DATABASES) but holds no privilege on every table: "
    "information_schema does not show it the tables of a database it holds no privilege on, so such a "
    "database reads 0 tables and 0 bytes, and the total size covers only the tables it sees."
)
SOME_DATABASES = (
    "This login holds neither SHOW DATABASES nor a privilege on every table: information_schema shows "
    "it only the databases and tables it holds a privilege on, so the list, the number of databases and "
    "the total size cover those only, and how many databases are hidden cannot be known from this login."
)


def _privileges(listed: str) -> set[str]:
    return {name.strip() for name in listed.split(",")}


@dataclass(frozen=True)
class GlobalPrivileges:
    """The login's global privileges in this session, its enabled roles' included."""

    granted: frozenset[str]
    partly_revoked: frozenset[str] = frozenset()
    on_performance_schema: frozenset[str] = frozenset()

    def holds(self, privilege: str) -> bool:
        """Whether it holds ``privilege`` on every database (as SHOW GRANTS spells it: 'SHOW VIEW')."""
        if privilege in self.partly_revoked or ALL in self.partly_revoked:
            return False
        return privilege in self.granted or ALL in self.granted

    @property
    def sees_all_threads(self) -> bool:
        return self.holds("PROCESS")

    @property
    def reads_performance_schema(self) -> bool:
        """SELECT on performance_schema, globally or on it alone (its tables need it: no PROCESS)."""
        return self.holds("SELECT") or bool({"SELECT", ALL} & self.on_performance_schema)

    @property
    def sees_every_table(self) -> bool:
        return any(self.holds(privilege) for privilege in TABLE_PRIVILEGES)

    @property
    def sees_every_database_name(self) -> bool:
        return self.sees_every_table or self.holds("SHOW DATABASES")


def global_privileges(rows: Iterable[dict[str, Any]]) -> GlobalPrivileges:
    """The global privileges `SHOW_GRANTS` rows name (one column, named after the account)."""
    granted: set[str] = set()
    revoked: set[str] = set()
    performance_schema: set[str] = set()
    for row in rows:
        line = str(next(iter(row.values()), ""))
        if found := GLOBAL_GRANT.match(line):
            granted |= _privileges(found[1])
        elif found := PARTIAL_REVOKE.match(line):
            revoked |= _privileges(found[1])
        elif found := PERFORMANCE_SCHEMA_GRANT.match(line):
            performance_schema |= _privileges(found[1])
    return GlobalPrivileges(frozenset(granted), frozenset(revoked), frozenset(performance_schema))


def databases_visibility(privileges: GlobalPrivileges) -> tuple[int | None, str | None]:
    """How many databases the listing leaves out (None: not knowable) and what it cannot see (None: nothing)."""
    if privileges.sees_every_table:
        return 0, None
    if privileges.sees_every_database_name:
        return 0, f"{NAMES_ONLY} {SEE_EVERY_TABLE}"
    return None, f"{SOME_DATABASES} {SEE_EVERY_TABLE}"
