"""`sonde mcp-bridge` as a real process: exit codes, signals, stdout hygiene, `sonde login`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from tests.bridge.fakehub import GOOD_KEY, fake_hub, hung_hub
from tests.bridge.peer import INITIALIZE, INITIALIZED, StdioPeer, call, eventually
from tests.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

SONDE = [sys.executable, "-m", "sonde"]
EXIT_DEADLINE_S = 8


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONDE_")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


@dataclass
class Bridge:
    process: trio.Process
    peer: StdioPeer
    stderr: bytearray = field(default_factory=bytearray)

    async def exit_code(self) -> int:
        with trio.fail_after(EXIT_DEADLINE_S):
            return await self.process.wait()


@asynccontextmanager
async def bridge_process(env: dict[str, str], *args: str, read_stderr: bool = True) -> AsyncIterator[Bridge]:
    process = await trio.lowlevel.open_process(
        [*SONDE, "mcp-bridge", *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    bridge = Bridge(process, StdioPeer(process.stdin, process.stdout))

    async def collect_stderr(stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            bridge.stderr += chunk

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                if read_stderr:  # else as a client that never reads it: the pipe fills at 64 KiB
                    nursery.start_soon(collect_stderr, process.stderr)
                yield bridge
                await bridge.exit_code()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                await stream.aclose()


async def test_no_hub_or_key_exits_1_with_instructions(tmp_path: Path) -> None:
    async with bridge_process(clean_env(tmp_path)) as bridge:
        assert await bridge.exit_code() == 1
        assert await bridge.peer.rest() == []
    assert b"sonde login --hub URL` once (it asks for the key" in bridge.stderr
    assert b"SONDE_API_KEY" in bridge.stderr


async def test_a_hub_url_without_a_key_exits_1(tmp_path: Path) -> None:
    (tmp_path / ".sonde").mkdir()
    (tmp_path / ".sonde" / "config.json").write_text(json.dumps({"hubUrl": "http://hub.example:3000"}))
    async with bridge_process(clean_env(tmp_path)) as bridge:
        assert await bridge.exit_code() == 1
    assert b"no API key for hub http://hub.example:3000" in bridge.stderr


async def test_eof_deletes_the_session_and_exits_0_with_only_jsonrpc_on_stdout(tmp_path: Path) -> None:
    async with fake_hub() as (hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY, SONDE_LOG_LEVEL="DEBUG")
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            await bridge.peer.send(call(1, "echo", print="this goes to stdout?"))
            assert (await bridge.peer.receive())["id"] == 1
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
            assert await bridge.peer.rest() == []
        [delete] = hub.seen("DELETE")
        assert delete.headers["mcp-session-id"] == "session-1"
        assert delete.headers["authorization"] == f"Bearer {GOOD_KEY}"
    for line in bridge.peer.lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert b"bridging MCP over stdio to " + url.encode() + b"/mcp" in bridge.stderr
    assert b"ended session session-1" in bridge.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130), (signal.SIGHUP, 0)])
async def test_signals_delete_the_session_then_exit(tmp_path: Path, signum: int, code: int) -> None:
    async with fake_hub() as (hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            await bridge.peer.send(call(1, "hang"))
            await eventually(lambda: hub.hanging == 1)
            bridge.process.send_signal(signum)
            assert await bridge.exit_code() == code
        assert [r.headers["mcp-session-id"] for r in hub.seen("DELETE")] == ["session-1"]
    assert signal.Signals(signum).name.encode() in bridge.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_a_second_signal_while_the_session_ends_is_said_and_changes_nothing(
    tmp_path: Path, signum: int, code: int
) -> None:
    """An impatient supervisor, or Ctrl-C twice: the second comes while the bridge waits on
    the hub's answer to its DELETE (0.8 s at most). Before, a second SIGTERM killed the bridge
    (exit 143) and neither was said."""
    async with fake_hub() as (hub, url):
        hub.delete_delay_s = 5
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            bridge.process.send_signal(signum)
            await eventually(lambda: hub.seen("DELETE"))
            bridge.process.send_signal(signum)
            assert await bridge.exit_code() == code
    name = signal.Signals(signum).name.encode()
    assert name + b": ending the session" in bridge.stderr
    assert name + b": already ending the session" in bridge.stderr
    assert b"Traceback" not in bridge.stderr


async def test_a_stderr_nobody_reads_never_stops_the_answers_nor_the_exit(tmp_path: Path) -> None:
    """Regression: the bridge logged from its event loop, so once a client's unread stderr pipe
    was full, the next log line blocked everything: no answer, and neither EOF nor SIGTERM
    ended it (only SIGKILL)."""
    async with fake_hub() as (_hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env, read_stderr=False) as bridge:
            await bridge.peer.initialize()
            for _ in range(1000):  # each answered, and logged (about 300 bytes): far past 64 KiB
                await bridge.peer.send_raw(b'{"jsonrpc": "2.0", "method": not json ' + b"x" * 200 + b"\n")
                assert (await bridge.peer.receive())["error"]["code"] == -32700
            await bridge.peer.send(call(2, "echo"))
            assert (await bridge.peer.receive())["id"] == 2
            await bridge.peer.close()
            assert await bridge.exit_code() == 0


async def test_a_client_that_closes_stdin_and_reads_no_more_is_not_kept_waiting(tmp_path: Path) -> None:
    """Regression: with stdout unread, the bridge took 5.2 s to exit after EOF (three waits of
    its own added up), not the README's 2 s an MCP client gives a server."""
    async with fake_hub() as (_hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            for n in range(40):  # answers of 32 KiB, never read: past the pipe (64 KiB) and the 16 queued
                await bridge.peer.send(call(n, "echo", text="x" * 32 * 1024))
            await bridge.peer.send(call("open", "hang_json"))  # answered with an error at EOF
            await trio.sleep(1)
            started = trio.current_time()
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
            took = trio.current_time() - started
    assert took < 4.0, (took, bytes(bridge.stderr))


async def test_a_second_signal_while_the_bridge_exits_changes_nothing(tmp_path: Path) -> None:
    """Regression: once the bridge had ended its session and stopped receiving signals, a
    second SIGTERM 10-50 ms after the first killed it on its way out (exit 143: 9 runs in 12)."""
    async with fake_hub() as (_hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        for gap_s in (0.01, 0.02, 0.03, 0.04, 0.05):
            async with bridge_process(env) as bridge:
                await bridge.peer.initialize()
                bridge.process.send_signal(signal.SIGTERM)
                await trio.sleep(gap_s)
                if bridge.process.returncode is None:
                    bridge.process.send_signal(signal.SIGTERM)
                assert await bridge.exit_code() == 0, (gap_s, bytes(bridge.stderr))


async def test_a_session_the_hub_forgot_is_not_warned_about_at_exit(tmp_path: Path) -> None:
    """A hub restarted since the last request answers the exit's DELETE 404: nothing is wrong
    (it warned "the hub answered HTTP 404")."""
    async with fake_hub() as (hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            hub.forgets_at_delete = True
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
        assert [r.headers["mcp-session-id"] for r in hub.seen("DELETE")] == ["session-1"]
    assert b"session session-1 had already ended on the hub" in bridge.stderr
    assert b"the hub answered" not in bridge.stderr


async def test_login_then_bridge_with_no_flags(tmp_path: Path) -> None:
    async with fake_hub() as (hub, url):
        env = clean_env(tmp_path)
        done = await trio.run_process(
            [*SONDE, "login", "--hub", url, "--api-key", GOOD_KEY],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
        )
        assert done.stdout == b""
        assert b"the hub accepted the key" in done.stderr
        config = json.loads((tmp_path / ".sonde" / "config.json").read_text())
        assert config == {"hubUrl": url, "apiKey": GOOD_KEY}
        async with bridge_process(env) as bridge:
            await bridge.peer.initialize()
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
        assert hub.seen("DELETE")


async def test_flags_override_the_environment(tmp_path: Path) -> None:
    async with fake_hub() as (hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL="http://127.0.0.1:9", SONDE_API_KEY="sonde_wrong")
        async with bridge_process(env, "--hub", url, "--api-key", GOOD_KEY) as bridge:
            await bridge.peer.initialize()
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
        assert hub.seen("POST", "initialize")[0].headers["authorization"] == f"Bearer {GOOD_KEY}"


async def test_a_version_no_header_can_carry_is_answered_and_the_bridge_goes_on(tmp_path: Path) -> None:
    version_key = "io.modelcontextprotocol/protocolVersion"
    async with fake_hub() as (_hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            bad = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/list",
                "params": {"_meta": {version_key: "2026é"}},
            }
            await bridge.peer.send(bad)
            answer = await bridge.peer.receive()
            assert answer["id"] == 1
            assert answer["error"]["code"] == -32602
            await bridge.peer.initialize()
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
    assert b"Traceback" not in bridge.stderr


async def test_eof_ends_the_bridge_though_the_hub_never_answers(tmp_path: Path) -> None:
    async with hung_hub() as (url, held):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=GOOD_KEY)
        async with bridge_process(env) as bridge:
            await bridge.peer.send(INITIALIZE)
            await bridge.peer.send(INITIALIZED)
            await bridge.peer.send(call(1, "echo"))
            await eventually(lambda: len(held) == 1)
            await bridge.peer.close()
            assert sorted(a["id"] for a in await bridge.peer.rest()) == [0, 1]
            assert await bridge.exit_code() == 0
    assert b"stdin closed with 2 requests unanswered after 1 s; abandoned: 0, 1" in bridge.stderr


async def test_eof_while_waiting_for_a_hub_that_is_down_says_why_it_waited(tmp_path: Path) -> None:
    """It said only that the hub had not answered within 1 s; that nothing listens there was on
    stderr alone (an operator-day review)."""
    env = clean_env(tmp_path, SONDE_HUB_URL=f"http://127.0.0.1:{free_port()}", SONDE_API_KEY=GOOD_KEY)
    async with bridge_process(env) as bridge:
        await bridge.peer.send(INITIALIZE)
        await trio.sleep(0.5)  # it tried, and waits for the hub
        await bridge.peer.close()
        [answer] = await bridge.peer.rest()
        assert await bridge.exit_code() == 0
    message = answer["error"]["message"]
    assert "stdin closed and the hub had not answered within 1 s (it cannot be reached: " in message, message
    assert "refused" in message, message
