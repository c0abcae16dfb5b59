"""Run read-only SQL against MySQL/MariaDB in a worker thread, errors turned into our vocabulary.

Sonde's connections mark themselves, so a probe can leave its siblings out of what it
reports: each names itself ``sonde`` when it connects (the ``program_name``
connection attribute, readable in performance_schema where that is on), and each
statement it sends begins with `SONDE_MARK`, which the process list shows while the
statement runs.

Every probe of the pack runs with a turn at its server (`one_turn`, on its entry point):
at most two of them talk to one server at once (`sonde.packs.server_turns`), and each
holds one connection (one `session`), so one agent holds at most two of a server's
connections.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, TypeVar

import trio

from sonde.packs.base import OutOfTime, ProbeUnavailable, ServiceRefused
from sonde.packs.context import ProbeContext
from sonde.packs.mysql import DEFAULTS
from sonde.packs.server_turns import takes_turns
from sonde.packs.services import Endpoint, Hangup, ServiceParams, SocketLimits, endpoint, nothing_listens

READ_TIMEOUT_S = 10  # each read and write, at most; less when the probe's deadline is nearer
CLOSE_TIMEOUT_S = 2
LOGIN_REFUSED = {1045, 1698}  # ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR
DATABASE_DENIED = 1044  # ER_DBACCESS_DENIED_ERROR: logged in, but not allowed the configured database
DATABASE_MISSING = 1049  # ER_BAD_DB_ERROR: the configured database is not on this server
PRIVILEGE_DENIED = {1142, 1143, 1227}  # table, column, a global privilege such as PROCESS
TOO_MANY_CONNECTIONS = 1040  # ER_CON_COUNT_ERROR: max_connections reached, clients turned away
LOST_CONNECTION = 2013  # CR_SERVER_LOST: PyMySQL's word for a read that timed out or was cut
UNKNOWN_VARIABLE = 1193  # ER_UNKNOWN_SYSTEM_VARIABLE: a server older than the statement limit
STATEMENT_STOPPED = {1969, 3024}  # MariaDB's max_statement_time, MySQL's max_execution_time, exceeded
# The server stops a statement a little before the client would give up on it: without a limit of
# its own, a statement the client gave up on (a sum over 100,000 tables) ran on, and the next probe's
# piled up beside it; and the probe says the server stopped it, not "lost connection"
STATEMENT_SHARE = 0.9
SOCKET_NAMES = ("mysqld.sock", "mysql.sock")  # in a directory given as the host: Debian's, MySQL's own
LOGIN_HINT = (
    "check that this user exists for the client host the server names, its password in the agent config "
    "(packs.mysql.password) and its authentication plugin (a unix_socket / auth_socket user logs in only "
    "over the socket, as the OS user of that name), or set the pack's user (packs.mysql.user)"
)
DATABASE_HINT = (
    "grant the agent's database user access to that database, or change the pack's database "
    "(packs.mysql.database)"
)
MISSING_DATABASE_HINT = "set it to a database on this server, or remove it: the probes need none"
PRIVILEGE_HINT = "grant the agent's database user the PROCESS privilege (and SELECT on information_schema)"
SONDE_PROGRAM = "sonde"  # every connection's program_name attribute
SONDE_MARK = "/* sonde */"  # the start of every statement Sonde sends
# A process list row that is one of Sonde's connections: running one of its statements (marked), or,
# where performance_schema is on, any that named itself so on connecting (the table lists this login's
# account's own only, and Sonde's connections are all of one account)
SONDE_THREAD = f"""(COALESCE(INFO, '') LIKE '{SONDE_MARK}%%' OR ID IN (
  SELECT PROCESSLIST_ID FROM performance_schema.session_account_connect_attrs
  WHERE ATTR_NAME = 'program_name' AND ATTR_VALUE = '{SONDE_PROGRAM}'))"""

Query = tuple[str, Sequence[Any]]
T = TypeVar("T")


class MysqlParams(ServiceParams):
    """Connection to MySQL/MariaDB (password only from the agent config)."""


def mysql_endpoint(ctx: ProbeContext, params: MysqlParams) -> Endpoint:
    return endpoint(params, ctx.settings.for_pack("mysql"), DEFAULTS)


one_turn = takes_turns("mysql", DEFAULTS)  # on every probe's entry point


def socket_path(host: str) -> str:
    """``host`` (a path) as a unix socket's path: a directory's socket by its usual names, as
    PostgreSQL's clients take a directory (the first name when neither is there)."""
    if not os.path.isdir(host):
        return host
    paths = [os.path.join(host, name) for name in SOCKET_NAMES]
    return next((path for path in paths if os.path.exists(path)), paths[0])


def statement_limit(server_version: str, seconds: float) -> str:
    """The session setting that stops each statement on the server after ``seconds``, in the
    words of this server (its version string says MariaDB or not)."""
    if "mariadb" in server_version.lower():
        return f"SET SESSION max_statement_time = {seconds:.3f}"
    return f"SET SESSION max_execution_time = {max(1, round(seconds * 1000))}"


def _socket(where: Endpoint, limits: SocketLimits) -> socket.socket:
    """A socket connected to ``where``: ours, so the `Hangup` can cut the login too."""
    if where.host.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(limits.connect_timeout_s)
            sock.connect(socket_path(where.host))
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((where.host, where.port), limits.connect_timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as PyMySQL's own connect does
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _connect(where: Endpoint, limits: SocketLimits, hangup: Hangup) -> Any:
    # imported here so the pack loads (and reports "not detected") without the driver
    import pymysql
    import pymysql.cursors

    address: dict[str, Any] = (
        {"unix_socket": socket_path(where.host)}
        if where.host.startswith("/")
        else {"host": where.host, "port": where.port}
    )
    connection = pymysql.connect(
        **address,
        user=where.user,
        password=where.password or "",
        database=where.database,
        connect_timeout=limits.connect_timeout_s,
        read_timeout=limits.io_timeout_s,
        write_timeout=limits.io_timeout_s,
        autocommit=True,
        cursorclass=pymysql.cursors.DictCursor,
        defer_connect=True,
        program_name=SONDE_PROGRAM,
    )
    try:
        sock = _socket(where, limits)
    except OSError as exc:  # in PyMySQL's words, as its own connect would say it
        if nothing_listens(exc):
            raise ServiceRefused(
                f"MySQL is not accepting connections at {where.where()}: {exc}", full=False
            ) from None
        raise pymysql.err.OperationalError(
            2003, f"Can't connect to MySQL server on {where.where()!r} ({exc})"
        ) from None
    try:
        hangup.attach(sock.fileno())
    except BaseException:
        sock.close()
        raise
    try:
        connection.connect(sock)  # on failure, PyMySQL closes it
    except pymysql.err.OperationalError as exc:
        if (
            exc.args
            and exc.args[0] == LOST_CONNECTION
            and getattr(connection, "server_version", None) is None
        ):
            raise ProbeUnavailable(  # PyMySQL says "during query": there was none
                f"MySQL is not available at {where.where()}: it sent no greeting within "
                f"{limits.io_timeout_s:.0f} s of the connection (is a MySQL server listening there?)"
            ) from None
        raise
    return connection


@contextmanager
def _our_errors(where: Endpoint) -> Iterator[None]:
    """PyMySQL's errors in our vocabulary: absent service, refused login or privilege, bad config."""
    try:
        import pymysql
    except ImportError:
        raise ProbeUnavailable("the PyMySQL driver is missing: install sonde[databases]") from None
    try:
        yield
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        text = str(exc.args[1] if len(exc.args) > 1 else exc)[:300]
        refused = _refusal(where, code, text)
        if refused is not None:
            raise refused from None
        if code in STATEMENT_STOPPED:
            raise OutOfTime(
                f"MySQL at {where.where()} stopped a statement at the probe's time limit: {text}"
            ) from None
        if code == TOO_MANY_CONNECTIONS:
            raise ServiceRefused(
                f"MySQL refuses new connections at {where.where()}: {text} (max_connections)", full=True
            ) from None
        if not isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError):
            raise  # our SQL is wrong for this server: a probe failure, not an absent service
        raise ProbeUnavailable(f"MySQL is not available at {where.where()}: {text}") from None


def _open(where: Endpoint, limits: SocketLimits, hangup: Hangup) -> Any:
    with _our_errors(where):
        import pymysql

        connection = _connect(where, limits, hangup)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"{SONDE_MARK} SET SESSION TRANSACTION READ ONLY")
                limit = statement_limit(connection.get_server_info(), limits.io_timeout_s * STATEMENT_SHARE)
                try:
                    cursor.execute(f"{SONDE_MARK} {limit}")
                except pymysql.err.MySQLError as exc:
                    if not exc.args or exc.args[0] != UNKNOWN_VARIABLE:
                        raise
        except BaseException:
            connection.close()
            raise
        return connection


def _query(where: Endpoint, connection: Any, queries: Sequence[Query]) -> list[list[dict[str, Any]]]:
    with _our_errors(where), connection.cursor() as cursor:
        results = []
        for sql, args in queries:
            cursor.execute(f"{SONDE_MARK} {sql.lstrip()}", args or None)
            results.append(list(cursor.fetchall()))
        return results


def _close(connection: Any) -> None:
    with suppress(Exception):  # the server or the network may have gone: nothing left to release
        connection.close()


def _refusal(where: Endpoint, code: int, text: str) -> PermissionError | ValueError | None:
    """The error for a refused login, a missing privilege or database (None for any other error code).

    A database not on the server is the agent config's mistake, not an absent
    service: a `ValueError` (the executor's ``refused``) naming the setting.
    """
    if code in LOGIN_REFUSED:
        return PermissionError(
            f"MySQL at {where.where()} did not accept the login of user {where.user!r}: {text}; {LOGIN_HINT}"
            f"{where.login_note()}"
        )
    if code == DATABASE_MISSING and where.database is not None:
        return ValueError(
            f"MySQL at {where.where()} has no database {where.database!r}, named by the pack's database "
            f"(packs.mysql.database in the agent config): {text}; {MISSING_DATABASE_HINT}"
        )
    if code == DATABASE_DENIED:
        return PermissionError(f"MySQL at {where.where()} refused: {text}; {DATABASE_HINT}")
    if code in PRIVILEGE_DENIED:
        return PermissionError(f"MySQL at {where.where()} refused: {text}; {PRIVILEGE_HINT}")
    return None


class Session:
    """One read-only connection, kept across awaits (a sample's two readings, say)."""

    def __init__(self, ctx: ProbeContext, where: Endpoint, connection: Any, hangup: Hangup) -> None:
        self._ctx, self._where, self._connection, self._hangup = ctx, where, connection, hangup

    async def run(self, *queries: Query) -> list[list[dict[str, Any]]]:
        """Each query's rows (as dicts), in a worker thread.

        Cancelled, it cuts the connection (the thread's blocked read fails at once): the
        session can run nothing more.
        """
        return await self._in_thread(_query, queries)

    async def _in_thread(self, call: Callable[..., T], arg: Any) -> T:
        """``call(where, connection, arg)`` in a worker thread; cancelled, it cuts the connection."""
        try:
            return await self._ctx.in_thread(call, self._where, self._connection, arg)
        except trio.Cancelled:
            self._hangup.cut()
            raise


@asynccontextmanager
async def session(ctx: ProbeContext, params: MysqlParams) -> AsyncIterator[Session]:
    """A `Session` on the configured server, closed on the way out (cancellation included).

    The connection is cut when the session ends, so no thread stays blocked on it: once the
    server has closed its side after the goodbye (`Hangup.hang_up`), at once when cancelled.
    """
    where, hangup = mysql_endpoint(ctx, params), Hangup()
    try:
        connection = await ctx.in_thread(_open, where, SocketLimits.from_deadline(READ_TIMEOUT_S), hangup)
        try:
            yield Session(ctx, where, connection, hangup)
        finally:
            if not hangup.is_cut:  # no query thread was left blocked on it: say goodbye (one short send)
                with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True), suppress(ProbeUnavailable):
                    await ctx.in_thread(_close, connection)
    finally:
        await hangup.hang_up()


async def run_queries(ctx: ProbeContext, params: MysqlParams, *queries: Query) -> list[list[dict[str, Any]]]:
    """Each query's rows (as dicts), over one connection opened and closed for them."""
    async with session(ctx, params) as connection:
        return await connection.run(*queries)


def as_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_dict(rows: list[dict[str, Any]]) -> dict[str, str]:
    """``SHOW ... STATUS`` / ``VARIABLES`` rows as a dict, names in lower case."""
    return {str(row["Variable_name"]).lower(): str(row["Value"]) for row in rows}
