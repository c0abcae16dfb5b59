"""A server that stops answering cannot take the agent's probe threads.

Probe params may name any server. One that completes the PostgreSQL startup and
then never answers a query left psycopg blocked for good in its worker thread; the
probe's deadline abandoned the thread, which kept its slot: after 8 such calls
every thread-backed probe on the agent timed out until it restarted. Here a fake
of such a server (and of MySQL and Redis servers that trickle a byte at a time,
which no per-read timeout stops) runs on 127.0.0.1, and the real probes go
through the executor: each ends at its deadline, its connection is cut, and
ordinary probes still answer after more hung calls than there are slots. Each hung
probe of a wave talks to a server of its own: at one server, only two at once would
get a turn (`sonde.packs.server_turns`), and take a thread.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.packs.base import ProbeUnavailable
from sonde.packs.context import THREAD_LIMIT, ProbeContext, ProbeSettings, ProbeThreads
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.mysql import PACK as MYSQL
from sonde.packs.postgres import PACK as POSTGRES
from sonde.packs.redis import PACK as REDIS
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM

REGISTRY = PackRegistry.of([SYSTEM, POSTGRES, MYSQL, REDIS])
DEADLINE_S = 0.5
LATE_S = 0.5  # how long after its deadline a probe may take to answer (a loaded test machine)
CUT_WITHIN_S = 5  # the hung connections are all closed by then
TRICKLE_INTERVAL_S = 0.05
WAVES = 2  # of THREAD_LIMIT hung probes at once: more hung calls than there are slots

SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104


def pg_message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


PG_READY = b"".join(
    [
        pg_message(b"R", struct.pack("!I", 0)),  # AuthenticationOk
        *(
            pg_message(b"S", name + b"\0" + value + b"\0")
            for name, value in (
                (b"server_version", b"16.0"),
                (b"client_encoding", b"UTF8"),
                (b"standard_conforming_strings", b"on"),
                (b"integer_datetimes", b"on"),
                (b"DateStyle", b"ISO, MDY"),
            )
        ),
        pg_message(b"K", struct.pack("!II", 1, 2)),  # BackendKeyData
        pg_message(b"Z", b"I"),  # ReadyForQuery
    ]
)


@dataclass
class HungServer:
    """Counts the connections it took and those the client has since closed."""

    port: int = 0
    accepted: int = 0
    closed: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def note(self, *, accepted: int = 0, closed: int = 0) -> None:
        self.accepted += accepted
        self.closed += closed
        self.changed.set()
        self.changed = trio.Event()

    async def wait_all_closed(self, count: int) -> None:
        """Until ``count`` connections were taken and every one closed by its client."""
        with trio.fail_after(CUT_WITHIN_S):
            while not (self.accepted >= count and self.closed == self.accepted):
                await self.changed.wait()


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


async def drain(stream: trio.SocketStream) -> None:
    """Read (and ignore) what the client sends until it closes the connection."""
    while await stream.receive_some():
        pass


async def never_answer_a_query(stream: trio.SocketStream) -> None:
    """Complete the PostgreSQL startup, then read queries and answer none."""
    while True:
        (length,) = struct.unpack("!I", await receive_exactly(stream, 4))
        body = await receive_exactly(stream, length - 4)
        if struct.unpack("!I", body[:4])[0] not in (SSL_REQUEST, GSSENC_REQUEST):
            break
        await stream.send_all(b"N")  # no TLS, no GSSAPI: the startup message comes next
    await stream.send_all(PG_READY)
    await drain(stream)


def trickling(prefix: bytes) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """Send ``prefix`` (the start of a long message), then a byte every interval, until the client leaves."""

    async def send_slowly(stream: trio.SocketStream) -> None:
        await stream.send_all(prefix)
        while True:
            await trio.sleep(TRICKLE_INTERVAL_S)
            await stream.send_all(b"a")

    async def behave(stream: trio.SocketStream) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_slowly, stream)
            await drain(stream)
            nursery.cancel_scope.cancel()

    return behave


def hung_handler(server: HungServer, behave: Callable[[trio.SocketStream], Awaitable[None]]) -> Any:
    async def handle(stream: trio.SocketStream) -> None:
        server.note(accepted=1)
        try:
            await behave(stream)  # returns when the client closes (or cuts) its end
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away mid-message
        finally:
            server.note(closed=1)

    return handle


async def serve_hung(
    nursery: trio.Nursery, behave: Callable[[trio.SocketStream], Awaitable[None]]
) -> HungServer:
    server = HungServer()
    handler = hung_handler(server, behave)
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    return server


@pytest.fixture
def readable(tmp_path: Path) -> Path:
    path = tmp_path / "app.log"
    path.write_text("still answering\n")
    return path


@pytest.fixture
def ctx(tmp_path: Path) -> ProbeContext:
    return ProbeContext(settings=ProbeSettings(allowed_paths=(str(tmp_path),)))


async def times_out_at_deadline(ctx: ProbeContext, name: str, port: int) -> None:
    started = trio.current_time()
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, name, {"host": "127.0.0.1", "port": port}, ctx, timeout_s=DEADLINE_S)
    assert caught.value.code == "timeout", caught.value.message
    assert trio.current_time() - started < DEADLINE_S + LATE_S


async def hang_waves(ctx: ProbeContext, name: str, servers: list[HungServer]) -> None:
    """``WAVES`` times, a hung probe at each of ``servers`` at once: each ends at its deadline."""
    for _ in range(WAVES):
        async with trio.open_nursery() as nursery:
            for server in servers:
                nursery.start_soon(times_out_at_deadline, ctx, name, server.port)


async def no_thread_stuck(threads: ProbeThreads) -> None:
    """Until every abandoned thread has returned (they count themselves out: no event tells trio)."""
    with trio.fail_after(CUT_WITHIN_S):
        while threads.stuck:  # noqa: ASYNC110
            await trio.sleep(0.01)


async def still_answers(ctx: ProbeContext, readable: Path) -> None:
    outcome = await execute_probe(
        REGISTRY, "system.files.read", {"path": str(readable), "max_bytes": 20}, ctx, timeout_s=DEADLINE_S
    )
    assert "still answering" in str(outcome.result)


@pytest.mark.parametrize(
    ("probe", "handler"),
    [
        # completes the PostgreSQL startup, then never answers a query
        ("postgres.cache.hit_ratio", never_answer_a_query),
        # starts a 64 KiB handshake packet, then sends a byte of it every 50 ms
        ("mysql.processes.list", trickling(b"\xff\xff\x00\x00")),
        # starts a 100 MB bulk reply to whatever is asked, then sends a byte of it every 50 ms
        ("redis.server.info", trickling(b"$100000000\r\n")),
    ],
    ids=["postgres-hangs", "mysql-trickles", "redis-trickles"],
)
async def test_a_server_that_hangs_or_trickles_does_not_take_the_probe_threads(
    ctx: ProbeContext,
    readable: Path,
    nursery: trio.Nursery,
    probe: str,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
) -> None:
    # `nursery` is pytest-trio's: cancelled after the test
    servers = [await serve_hung(nursery, handler) for _ in range(THREAD_LIMIT)]
    await hang_waves(ctx, probe, servers)
    await still_answers(ctx, readable)
    for server in servers:
        await server.wait_all_closed(WAVES)  # each connection was cut
    await no_thread_stuck(ctx.threads)  # and each thread returned


# --- a call that never returns, whatever its cause ----------------------------------


async def test_stuck_threads_free_their_slots_and_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """A thread abandoned at its deadline frees its slot; past ``max_stuck`` thread work is refused."""
    threads = ProbeThreads(slots=2, max_stuck=3)
    release = threading.Event()
    for _ in range(3):  # more stuck calls than slots
        with trio.move_on_after(0.05) as waited:
            await threads.run(release.wait)
        assert waited.cancelled_caught
    assert threads.stuck == 3
    with pytest.raises(ProbeUnavailable, match="3 probe threads are stuck"):
        await threads.run(len, "refused")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "3 probe threads are stuck past their probes' deadlines (Event.wait for 0s, Event.wait for 0s, "
        "Event.wait for 0s); thread work is refused (first: <built-in function len>) until some return"
    ]
    release.set()  # the stuck calls return, and are no longer counted
    await no_thread_stuck(threads)
    assert await threads.run(len, "served") == 6
