"""A service password from the agent config goes only to the endpoint the config names.

A caller chooses a probe's host, port and user; if the agent sent its configured
password wherever the caller pointed it, any key allowed one database probe could
collect the password on a server of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pymysql
import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.mysql import PACK as MYSQL
from sonde.packs.redis import PACK as REDIS
from sonde.packs.registry import PackRegistry
from sonde.packs.services import PASSWORD_WITHHELD, ServiceDefaults, ServiceParams, endpoint

REGISTRY = PackRegistry.of([MYSQL, REDIS])
DEFAULTS = ServiceDefaults("127.0.0.1", 3306, user="root")
SECRET = "s3cret-" + uuid.uuid4().hex


@pytest.mark.parametrize(
    ("config", "params", "sent"),
    [
        ({"password": SECRET}, {}, True),  # the defaults the config leaves
        ({"password": SECRET}, {"host": "127.0.0.1", "port": 3306, "user": "root"}, True),  # named again
        ({"host": "db.internal", "password": SECRET}, {"host": "db.internal"}, True),
        ({"password": SECRET}, {"host": "attacker.example"}, False),
        ({"password": SECRET}, {"host": "localhost"}, False),  # the same server, but not the name given
        ({"password": SECRET}, {"port": 3307}, False),
        ({"password": SECRET}, {"user": "other"}, False),
        ({"host": "db.internal", "password": SECRET}, {}, True),
        (
            {"host": "db.internal", "password": SECRET},
            {"host": "127.0.0.1"},
            False,
        ),  # the default, not the config
        ({"user": "monitor", "password": SECRET}, {"user": "root"}, False),
    ],
)
def test_password_only_for_the_configured_endpoint(
    config: dict[str, Any], params: dict[str, Any], sent: bool
) -> None:
    where = endpoint(ServiceParams.model_validate(params), config, DEFAULTS)
    assert (where.password == SECRET, where.password_withheld) == (sent, not sent)
    assert (PASSWORD_WITHHELD in where.login_note()) is not sent


def test_no_password_configured_is_not_withheld() -> None:
    where = endpoint(ServiceParams(host="elsewhere"), {}, DEFAULTS)
    assert (where.password, where.password_withheld, where.login_note()) == (None, False, "")


async def test_redis_password_does_not_go_to_a_server_the_caller_names() -> None:
    """A listener the caller points the probe at records what the Redis client sends it."""
    received = bytearray()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def record(stream: trio.SocketStream) -> None:
        with trio.move_on_after(3):
            async for chunk in stream:
                received.extend(chunk)
                if len(received) > 4096:
                    break
        await stream.aclose()

    ctx = ProbeContext()
    ctx.settings.packs["redis"] = {"password": SECRET}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, record, listeners)
        with pytest.raises(ProbeExecutionError):  # the listener never answers like Redis
            await execute_probe(REGISTRY, "redis.server.info", {"port": port}, ctx)
        nursery.cancel_scope.cancel()
    assert received  # the client did talk to it
    assert SECRET.encode() not in received


@pytest.fixture
async def mysql_monitor() -> AsyncIterator[str]:
    """A MariaDB user whose password only the agent config holds; dropped afterwards."""
    name = f"sonde_mon_{uuid.uuid4().hex[:10]}"
    try:
        admin = await trio.to_thread.run_sync(
            lambda: pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
        )
    except pymysql.err.OperationalError as exc:
        from tests.conftest import require

        require(False, f"MariaDB must run on 127.0.0.1:3306 (root, empty password): {exc}")
        raise

    def execute(sql: str) -> None:
        with admin.cursor() as cursor:
            cursor.execute(sql)

    try:
        await trio.to_thread.run_sync(execute, f"CREATE USER '{name}'@'%' IDENTIFIED BY '{SECRET}'")
        yield name
    finally:
        await trio.to_thread.run_sync(execute, f"DROP USER IF EXISTS '{name}'@'%'")
        await trio.to_thread.run_sync(admin.close)


async def test_mysql_login_with_the_password_only_where_configured(mysql_monitor: str) -> None:
    ctx = ProbeContext()
    ctx.settings.packs["mysql"] = {"user": mysql_monitor, "password": SECRET}
    found = await execute_probe(REGISTRY, "mysql.status.summary", {"interval_s": 0}, ctx)
    assert found.result["uptime_s"] > 0  # the configured endpoint: logged in with the password
    with pytest.raises(ProbeExecutionError) as caught:  # the same server under another name: no password
        await execute_probe(REGISTRY, "mysql.status.summary", {"interval_s": 0, "host": "localhost"}, ctx)
    assert caught.value.code == "permission_denied"
    assert f"did not accept the login of user '{mysql_monitor}'" in caught.value.message
    assert PASSWORD_WITHHELD in caught.value.message
