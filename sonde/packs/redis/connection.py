"""Talk to Redis in a worker thread; INFO comes back as raw text for `parse_info`.

Every probe of the pack runs with a turn at its server (`one_turn`, on its entry point):
at most two of them talk to one server at once (`sonde.packs.server_turns`), and each
holds one connection at a time (`with_redis` calls follow one another), so one agent
holds at most two of a server's connections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sonde.packs.base import ProbeUnavailable, ServiceRefused
from sonde.packs.context import ProbeContext
from sonde.packs.redis import DEFAULTS
from sonde.packs.server_turns import takes_turns
from sonde.packs.services import Endpoint, Hangup, ServiceParams, SocketLimits, endpoint, nothing_listens

T = TypeVar("T")
COMMAND_TIMEOUT_S = 10  # each read and write, at most; less when the probe's deadline is nearer
MAXCLIENTS_REACHED = "max number of clients reached"  # the server's answer to a new client at maxclients
ACL_HINT = (
    "the agent's Redis user needs '+info +slowlog' (ACL; '+config|get' too for the persistence settings) "
    "and its password in the agent config"
)


class RedisParams(ServiceParams):
    """Connection to Redis (password only from the agent config)."""


def redis_endpoint(ctx: ProbeContext, params: RedisParams) -> Endpoint:
    return endpoint(params, ctx.settings.for_pack("redis"), DEFAULTS)


one_turn = takes_turns("redis", DEFAULTS)  # on every probe's entry point


def _client(where: Endpoint, limits: SocketLimits, hangup: Hangup) -> Any:
    # imported here so the pack loads (and reports "not detected") without the driver
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    address: dict[str, Any] = (
        {"unix_socket_path": where.host}
        if where.host.startswith("/")
        else {"host": where.host, "port": where.port}
    )

    def hand_socket_to_hangup(connection: Any) -> None:  # then log in: the hangup can cut that too
        hangup.attach(connection._sock.fileno())  # redis-py names no public accessor
        connection.on_connect()

    client = redis.Redis(
        **address,
        username=where.user,
        password=where.password,
        socket_timeout=limits.io_timeout_s,
        socket_connect_timeout=limits.connect_timeout_s,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),  # one attempt: a probe reports, the hub decides whether to ask again
        single_connection_client=True,  # the one socket the hangup holds
        redis_connect_func=hand_socket_to_hangup,  # type: ignore[arg-type]  # redis-py calls it with the connection
    )
    client.set_response_callback("INFO", lambda response, **options: response)
    return client


def _run(where: Endpoint, work: Callable[[Any], T], limits: SocketLimits, hangup: Hangup) -> T:
    try:
        import redis
    except ImportError:
        raise ProbeUnavailable("the redis-py driver is missing: install sonde[databases]") from None
    try:
        with _client(where, limits, hangup) as client:
            return work(client)
    except (redis.exceptions.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
        raise PermissionError(
            f"Redis at {where.where()} refused: {exc}; {ACL_HINT}{where.login_note()}"
        ) from None
    except redis.exceptions.ConnectionError as exc:
        if MAXCLIENTS_REACHED in str(exc):
            raise ServiceRefused(
                f"Redis refuses new connections at {where.where()}: {exc} (maxclients)", full=True
            ) from None
        if nothing_listens(exc):
            raise ServiceRefused(
                f"Redis is not accepting connections at {where.where()}: {exc}", full=False
            ) from None
        raise ProbeUnavailable(f"Redis is not available at {where.where()}: {exc}") from None
    except redis.exceptions.TimeoutError as exc:
        raise ProbeUnavailable(f"Redis is not available at {where.where()}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        if "NOAUTH" in str(exc) or "NOPERM" in str(exc):
            raise PermissionError(
                f"Redis at {where.where()} refused: {exc}; {ACL_HINT}{where.login_note()}"
            ) from None
        raise


async def with_redis(ctx: ProbeContext, params: RedisParams, work: Callable[[Any], T]) -> T:
    """``work(client)`` over one connection opened and closed in a worker thread.

    Cancelled (the probe's deadline), it returns at once and cuts the connection, so
    the thread's blocked call fails and the thread returns.
    """
    hangup = Hangup()
    try:
        return await ctx.in_thread(
            _run, redis_endpoint(ctx, params), work, SocketLimits.from_deadline(COMMAND_TIMEOUT_S), hangup
        )
    finally:
        hangup.cut()


def info_text(client: Any) -> str:
    """The default INFO sections (server, clients, memory, stats, replication, keyspace, ...)."""
    return str(client.execute_command("INFO"))
