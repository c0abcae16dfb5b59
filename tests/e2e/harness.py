"""Helpers shared by the hub security and probe end-to-end tests.

- a test-only pack, ``e2e``, made discoverable to agent subprocesses through a
  ``*.dist-info/entry_points.txt`` on PYTHONPATH (`write_test_pack`);
- enrollment through the real `sonde enroll` and through the REST route;
- a raw agent WebSocket speaking the wire protocol with the real codec, for
  frames a well-behaved agent never sends (wrong key, replayed, stale);
- REST and audit views of the hub, and polling with a deadline.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import trio
import trio_websocket

from sonde.agent.config import load_config
from sonde.agent.connection import sole_error
from sonde.agent.enroll import build_request
from sonde.agent.identity import register_payload
from sonde.hub.db import open_database
from sonde.hub.enrollment_tokens import create_enrollment_token
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM_PACK
from sonde.protocol.codec import FrameCodec, parse_frame
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import AgentRegister, Message
from sonde.protocol.signing import (
    Ed25519PrivateKey,
    new_private_key,
    private_key_from_text,
    public_key_to_text,
)
from tests.e2e.procs import SONDE, EnrolledAgent, RunningHub, base_env
from tests.testpacks import install_test_pack

TEST_PACK_SOURCE = '''
"""Test-only pack for the end-to-end tests: an echo that names its process, a long sleep."""
import os

import trio
from pydantic import Field

from sonde.packs.base import NoParams, Pack, Params, Result

PACK = Pack("e2e", "0.0.1", "Test-only probes for the end-to-end tests.")


class EchoParams(Params):
    value: int = Field(ge=0, le=1_000_000)


class Echo(Result):
    value: int
    pid: int


class Slept(Result):
    returncode: int


@PACK.probe("e2e.echo.value", "Returns `value` and the pid of the agent that ran it.")
async def echo(ctx, params: EchoParams) -> Echo:
    await trio.lowlevel.checkpoint()
    return Echo(value=params.value, pid=os.getpid())


@PACK.probe("e2e.sleep.long", "Runs `sleep 300` (to be cancelled).", timeout_s=600)
async def sleep_long(ctx, params: NoParams) -> Slept:
    output = await ctx.run(["sleep", "300"])
    return Slept(returncode=output.returncode)
'''


def write_test_pack(site: Path) -> Path:
    """Install the ``e2e`` pack into ``site`` (a PYTHONPATH entry) by entry point; returns ``site``."""
    return install_test_pack(site, "e2e", TEST_PACK_SOURCE)


@dataclass
class SharedFleet:
    """The session's hub and its agents ``alpha`` and ``beta`` (see conftest)."""

    hub: RunningHub
    agents: dict[str, EnrolledAgent]
    idle: EnrolledAgent  # enrolled with `sonde enroll`, never started
    pack_site: Path
    root: Path

    def home(self, name: str) -> Path:
        """A fresh HOME for an agent a test enrolls itself."""
        return self.root / f"home-{name}"


# --- enrollment ----------------------------------------------------------------


def agent_env(home: Path, pack_site: Path | None = None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = base_env(home)
    if pack_site is not None:
        env["PYTHONPATH"] = str(pack_site)
    return env


def sonde_enroll(
    hub_url: str, token: str, name: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the real `sonde enroll` and return how it ended."""
    return subprocess.run(
        [*SONDE, "enroll", "--hub", hub_url, "--token", token, "--name", name],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def rest_token(hub: RunningHub, name: str | None = None) -> str:
    """A fresh enrollment token from POST /api/v1/enrollment-tokens (faster than the CLI)."""
    with hub.client() as http:
        answer = http.post("/api/v1/enrollment-tokens", json={} if name is None else {"name": name})
    assert answer.status_code == 201, answer.text
    secret: str = answer.json()["secret"]
    return secret


def enroll_named(
    hub: RunningHub, home: Path, name: str, *, token: str | None = None, pack_site: Path | None = None
) -> EnrolledAgent:
    """Enroll ``name`` with `sonde enroll` in its own HOME; the enrollment must succeed."""
    env = agent_env(home, pack_site)
    done = sonde_enroll(hub.url, token or rest_token(hub), name, env)
    assert done.returncode == 0, done.stderr
    return EnrolledAgent(name, home, env)


def config_file(home: Path) -> Path:
    return home / ".sonde" / "config.json"


def agent_identity(agent: EnrolledAgent) -> tuple[str, Ed25519PrivateKey]:
    """The agent id and private key `sonde enroll` saved in the agent's HOME."""
    config = load_config(config_file(agent.home))
    assert config is not None
    assert config.agent_id
    assert config.private_key
    return config.agent_id, private_key_from_text(config.private_key)


def post_enroll(hub: RunningHub, token: str, name: str) -> httpx.Response:
    """POST /api/v1/agents/enroll with a fresh key pair, as `sonde enroll` would."""
    key = public_key_to_text(new_private_key().public_key())
    body = build_request(token, name, key, PackRegistry.of([SYSTEM_PACK]))
    with httpx.Client(base_url=hub.url, timeout=10) as http:
        return http.post("/api/v1/agents/enroll", content=body.model_dump_json(by_alias=True))


def create_expired_token(hub: RunningHub) -> str:
    """A token that expired an hour ago, made on the hub's SQLite file directly."""
    db = open_database(hub.data_dir / "sonde.db")
    try:
        _, secret = create_enrollment_token(db, ttl_s=60, now=time.time() - 3600)
    finally:
        db.close()
    return secret


# --- hub views -----------------------------------------------------------------


def listed(hub: RunningHub, path: str, items: str, by: str) -> dict[str, dict[str, Any]]:
    """The ``items`` list an admin GET of ``path`` answers, each item keyed by its ``by`` field."""
    with hub.client() as http:
        answer = http.get(path)
    assert answer.status_code == 200, answer.text
    return {row[by]: row for row in answer.json()[items]}


def agent_rows(hub: RunningHub) -> dict[str, dict[str, Any]]:
    """Every enrolled agent by name, as GET /api/v1/agents shows it."""
    return listed(hub, "/api/v1/agents", "agents", "name")


def status_of(hub: RunningHub, name: str) -> str | None:
    row = agent_rows(hub).get(name)
    return None if row is None else row["status"]


def file_rows(db_path: Path, query: str) -> list[tuple[Any, ...]]:
    """The rows of ``query`` in a hub's database file, read-only (the hub may be dead, or
    running: nothing is written, no migration made)."""
    conn = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def audit_rows(hub: RunningHub, action: str) -> list[dict[str, Any]]:
    """Audit entries with this action, read from the hub's SQLite file."""
    db = open_database(hub.data_dir / "sonde.db")
    try:
        return list(db.query("SELECT * FROM audit WHERE action = ? ORDER BY seq", [action]))
    finally:
        db.close()


async def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Poll ``condition`` every 50 ms until it holds; returns the seconds it took."""
    started = trio.current_time()
    with trio.move_on_after(timeout_s):
        for _ in itertools.count():
            if condition():
                return trio.current_time() - started
            await trio.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout_s}s")


def descendants_running(pid: int, argv: list[str]) -> list[psutil.Process]:
    """Live (not zombie) descendants of ``pid`` whose command line is exactly ``argv``."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.cmdline() == argv and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


# --- the raw agent WebSocket ---------------------------------------------------


def register_frame(
    agent_id: str,
    name: str,
    key: Ed25519PrivateKey,
    ts: datetime | None = None,
    exchange: LinkKeyExchange | None = None,
) -> str:
    """A signed ``agent.register`` text frame, as `sonde start` sends it first.

    It offers ``exchange``'s link key (a throwaway one if None: keep the
    exchange to speak on the link after the ack).
    """
    link_key = (exchange or LinkKeyExchange()).public_text
    payload = register_payload(name, PackRegistry.of([SYSTEM_PACK])).model_copy(update={"link_key": link_key})
    message = AgentRegister(payload=payload) if ts is None else AgentRegister(payload=payload, ts=ts)
    return FrameCodec(signing_key=key, agent_id=agent_id).encode(message)


@dataclass
class Answer:
    """What the hub did with one register frame."""

    first: Message | None  # the hub's first frame (None: the socket closed first)
    close_code: int | None  # set when the hub closed the socket after its answer


@asynccontextmanager
async def agent_socket(
    hub_url: str, origin: str | None = None, forwarded_for: str | None = None
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """A raw WebSocket to /ws/agent (with an Origin header, as a browser sends, and an
    X-Forwarded-For header, as a reverse proxy sends, if given).

    We own the TCP stream and close it on every way out: trio-websocket's own
    client leaves it to the garbage collector when the hub refuses or closes first.
    """
    parts = urlsplit(hub_url)
    headers = [(b"Origin", origin.encode())] if origin else []
    headers += [(b"X-Forwarded-For", forwarded_for.encode())] if forwarded_for else []
    stream = await trio.open_tcp_stream(parts.hostname or "", parts.port or 80)
    async with stream:
        try:
            async with trio.open_nursery() as nursery:
                ws = await trio_websocket.wrap_client_stream(
                    nursery, stream, parts.netloc, "/ws/agent", extra_headers=headers
                )
                try:
                    yield ws
                finally:
                    with trio.move_on_after(2):
                        await ws.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_error(group) from None


async def send_register(
    hub_url: str, frame: str, *, origin: str | None = None, forwarded_for: str | None = None
) -> Answer:
    """Send ``frame`` first on a new socket; read the hub's answer and whether it then closes.

    After a ``hub.ack`` we close the socket ourselves.
    """
    with trio.fail_after(10):
        async with agent_socket(hub_url, origin, forwarded_for) as ws:
            await ws.send_message(frame)
            try:
                first, _ = parse_frame(await ws.get_message())
            except trio_websocket.ConnectionClosed as closed:
                return Answer(None, closed.reason.code)
            if first.type == "hub.ack":
                return Answer(first, None)
            try:
                await ws.get_message()
            except trio_websocket.ConnectionClosed as closed:
                return Answer(first, closed.reason.code)
            raise AssertionError("the hub kept the socket open after its first answer")
