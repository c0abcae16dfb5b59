"""Run read-only SQL against PostgreSQL in a worker thread, errors turned into our vocabulary.

Every probe of the pack runs with a turn at its server (`one_turn`, on its entry point):
at most two of them talk to one server at once (`sonde.packs.server_turns`), and each
holds one connection at a time (`run_queries` calls follow one another), so one agent
holds at most two of a server's connections.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sonde.packs.base import OutOfTime, ProbeUnavailable, ServiceRefused
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import DEFAULTS
from sonde.packs.server_turns import takes_turns
from sonde.packs.services import (
    CONNECT_TIMEOUT_S,
    DatabaseName,
    Endpoint,
    Hangup,
    ServiceParams,
    endpoint,
    time_left_s,
    whole_seconds_left,
)

STATEMENT_TIMEOUT_MS = 10_000  # at most; less when the probe's deadline is nearer
TIMEOUT_SHARE = 0.9  # a statement cancelled after this share of its limit met the limit
MONITOR_HINT = "grant the agent's database user the pg_monitor role"
# a login the server refused (SQLSTATE 28P01 / 28000), in libpq's and the server's (English) words
LOGIN_REFUSED = re.compile(
    r"authentication failed|no pg_hba\.conf entry|pg_hba\.conf rejects|role \".*\" does not exist"
    r"|is not permitted to log in|no password supplied"
)
LOGIN_SQLSTATES = {"28000", "28P01"}
SONDE_APPLICATION = "sonde"  # every probe's session is named so (the connection counts leave them out)
LOGIN_HINT = (
    "check that this role exists and may log in, its password in the agent config "
    "(packs.postgres.password) and the pg_hba.conf entry for this client, or set the pack's user "
    "(packs.postgres.user)"
)
# the database to connect to is not on the server (SQLSTATE 3D000, invalid_catalog_name)
DATABASE_MISSING = re.compile(r"database \".*\" does not exist")
DATABASE_SQLSTATES = {"3D000"}
# libpq rarely gives a failed connection's SQLSTATE, so the server's words are read too:
# 53300 too_many_connections (every slot taken, or only reserved ones left)
SERVER_FULL = re.compile(r"too many clients already|remaining connection slots are reserved")
FULL_SQLSTATES = {"53300"}
# nothing listens (port or socket file), or 57P03 cannot_connect_now (starting, stopping, recovering)
SERVER_DOWN = re.compile(
    r"Connection refused|No such file or directory|the database system is "
    r"(?:starting up|shutting down|in recovery mode|not yet accepting connections)"
)
DOWN_SQLSTATES = {"57P03"}
# libpq's words when something took the connection but did not answer as PostgreSQL: nothing came
# within connect_timeout (a silent listener, or Redis waiting for a whole line), or a reply no
# PostgreSQL server sends (MySQL's greeting read as the answer to libpq's SSL request)
CONNECT_TIMED_OUT = re.compile(r"^connection timeout expired$")
NOT_POSTGRES = re.compile(
    r"received invalid response to SSL negotiation|expected authentication request from server"
)
MISSING_DATABASE_HINT = (
    "name one that exists there instead: the probes read server-wide views and work from any "
    "database ('postgres' is the usual one)"
)
CONNECT_HINT = (
    "grant the agent's database user CONNECT on that database, or set the pack's database "
    "(packs.postgres.database)"
)

Query = tuple[str, Sequence[Any]]


class PostgresParams(ServiceParams):
    """Connection to PostgreSQL (password only from the agent config)."""

    database: DatabaseName | None = None


def postgres_endpoint(ctx: ProbeContext, params: PostgresParams) -> Endpoint:
    return endpoint(params, ctx.settings.for_pack("postgres"), DEFAULTS, params.database)


def server_address(where: Endpoint) -> str:
    """Where the server listens: host and port, or its socket file (a socket directory holds
    one per port, so the directory alone would not name one server)."""
    return f"{where.host.rstrip('/')}/.s.PGSQL.{where.port}" if where.host.startswith("/") else where.where()


one_turn = takes_turns("postgres", DEFAULTS, server_address)  # on every probe's entry point


def database_origin(ctx: ProbeContext, params: PostgresParams) -> str:
    """Where the endpoint's database was named (the same order as `endpoint`), for an error to point at."""
    if params.database is not None:
        return "the probe's database param"
    if "database" in ctx.settings.for_pack("postgres"):
        return "the pack's database (packs.postgres.database in the agent config)"
    return "the pack's default database (set packs.postgres.database in the agent config)"


def session_options(statement_timeout_ms: int) -> str:
    return f"-c default_transaction_read_only=on -c statement_timeout={statement_timeout_ms}"


@dataclass(frozen=True)
class Limits:
    """A call's timeouts, from its probe's deadline: libpq's (whole seconds) and the server's."""

    connect_timeout_s: int
    statement_timeout_ms: int

    @classmethod
    def from_deadline(cls) -> Limits:
        """Call in the probe's task."""
        statement_ms = int(time_left_s(STATEMENT_TIMEOUT_MS / 1000) * 1000)
        return cls(whole_seconds_left(CONNECT_TIMEOUT_S), statement_ms)


def _run(
    where: Endpoint, queries: Sequence[Query], origin: str, limits: Limits, hangup: Hangup
) -> list[list[dict[str, Any]]]:
    try:
        import psycopg
        from psycopg.rows import dict_row
    except ImportError:
        raise ProbeUnavailable("the psycopg driver is missing: install sonde[databases]") from None
    statement_started = time.monotonic()
    try:
        with psycopg.connect(
            host=where.host,
            port=where.port,
            user=where.user,
            password=where.password,
            dbname=where.database,
            connect_timeout=limits.connect_timeout_s,  # psycopg: a deadline for the whole connection
            application_name=SONDE_APPLICATION,
            options=session_options(limits.statement_timeout_ms),  # a working server stops by then
            autocommit=True,
            row_factory=dict_row,
        ) as connection:
            hangup.attach(connection.fileno())  # one that stops answering is cut off (`run_queries`)
            results = []
            for sql, args in queries:
                with connection.cursor() as cursor:
                    statement_started = time.monotonic()
                    cursor.execute(sql, args)  # constant SQL, bound args
                    results.append(cursor.fetchall())
            return results
    except psycopg.errors.QueryCanceled as exc:  # its statement_timeout, near the probe's deadline
        text = first_line(exc)
        # the server's words may be in another language: it ran about as long as its limit
        ran_ms = (time.monotonic() - statement_started) * 1000
        if "statement timeout" in text or ran_ms >= limits.statement_timeout_ms * TIMEOUT_SHARE:
            raise OutOfTime(
                f"PostgreSQL at {where.where()} stopped a statement at the probe's time limit: {text}"
            ) from None
        raise _not_connected(where, text, exc.sqlstate, origin) from None  # pg_cancel_backend, say
    except psycopg.errors.InsufficientPrivilege as exc:
        raise PermissionError(f"PostgreSQL refused: {exc}; {MONITOR_HINT}") from None
    except psycopg.OperationalError as exc:
        text = first_line(exc)
        if CONNECT_TIMED_OUT.search(text):
            raise ProbeUnavailable(
                f"PostgreSQL is not available at {where.where()}: nothing answered as PostgreSQL there "
                f"within {limits.connect_timeout_s} s of the connection ({text}; {listening_question(where)})"
            ) from None
        raise _not_connected(where, text, exc.sqlstate, origin) from None


def first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _not_connected(where: Endpoint, text: str, sqlstate: str | None, origin: str) -> Exception:
    """What a failed connection means: the login refused, no such database, no CONNECT on it, or no server.

    A database not on the server is a `ValueError` (the executor's ``refused``) naming
    ``origin``, where it was configured: the service is there, the setting is wrong.
    """
    if sqlstate in LOGIN_SQLSTATES or LOGIN_REFUSED.search(text):
        return PermissionError(
            f"PostgreSQL at {where.where()} did not accept the login of user {where.user!r}: {text}; "
            f"{LOGIN_HINT}{where.login_note()}"
        )
    if sqlstate in DATABASE_SQLSTATES or DATABASE_MISSING.search(text):
        return ValueError(
            f"PostgreSQL at {where.where()} has no database {where.database!r}, named by {origin}: {text}; "
            f"{MISSING_DATABASE_HINT}"
        )
    if "permission denied for database" in text:  # SQLSTATE 42501 at connection time
        return PermissionError(
            f"PostgreSQL at {where.where()} refused user {where.user!r}: {text}; {CONNECT_HINT}"
        )
    if sqlstate in FULL_SQLSTATES or SERVER_FULL.search(text):
        return ServiceRefused(
            f"PostgreSQL refuses new connections at {where.where()}: {text} (max_connections)", full=True
        )
    if sqlstate in DOWN_SQLSTATES or SERVER_DOWN.search(text):
        return ServiceRefused(
            f"PostgreSQL is not accepting connections at {where.where()}: {text}", full=False
        )
    if NOT_POSTGRES.search(text):
        return ProbeUnavailable(
            f"PostgreSQL is not available at {where.where()}: something answered there, but not as "
            f"PostgreSQL ({text}; {listening_question(where)})"
        )
    return ProbeUnavailable(f"PostgreSQL is not available at {where.where()}: {text}")


def listening_question(where: Endpoint) -> str:
    place = "there" if where.host.startswith("/") else "on that port"
    return f"is PostgreSQL listening {place}?"


async def run_queries(
    ctx: ProbeContext, params: PostgresParams, *queries: Query
) -> list[list[dict[str, Any]]]:
    """Each query's rows (as dicts), over one connection opened and closed in a worker thread.

    It returns once the server has let the connection go (its backend exited: `Hangup.hang_up`),
    so the probe's turn at the server passes on with the server's slot free. Cancelled (the
    probe's deadline), it returns at once and cuts the connection, so the thread's blocked
    call fails and the thread returns.
    """
    where, origin = postgres_endpoint(ctx, params), database_origin(ctx, params)
    hangup = Hangup()
    try:
        return await ctx.in_thread(_run, where, queries, origin, Limits.from_deadline(), hangup)
    finally:
        await hangup.hang_up()
