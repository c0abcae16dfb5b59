"""A key the hub stops taking, end to end: `sonde login` with a new one is all it takes when the
bridge's key came from the config file; from SONDE_API_KEY, the advice says to restart the client."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.bridge.fakehub import fake_hub
from tests.bridge.fleet import Fleet
from tests.bridge.peer import INITIALIZE
from tests.bridge.test_process import bridge_process, clean_env
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_ok

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def new_key(fleet: Fleet, name: str) -> str:
    created = fleet.hub.cli("hub", "key", "create", "--name", name)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


def login(fleet: Fleet, env: dict[str, str], key: str) -> None:
    run_ok([*SONDE, "login", "--hub", fleet.hub.url], env={**env, "SONDE_API_KEY": key}, timeout=30)


async def refused(fleet: Fleet, key: str) -> None:
    """Wait out the hub's key cache: until ``key`` gets 401 (it gives no event to wait on)."""
    async with httpx.AsyncClient(base_url=fleet.hub.url, timeout=10) as http:
        for _ in range(75):
            answer = await http.get("/api/v1/agents", headers={"Authorization": f"Bearer {key}"})
            if answer.status_code == 401:
                return
            await trio.sleep(0.2)
    raise AssertionError(f"the hub still takes the revoked key: HTTP {answer.status_code}")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sonde_login_with_a_new_key_is_picked_up_by_the_running_bridge(
    fleet: Fleet, tmp_path: Path, mode: str
) -> None:
    env = base_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    first = new_key(fleet, f"rotated-first-{mode}")
    login(fleet, env, first)
    errlog = tmp_path / "bridge.err"
    params = StdioServerParameters(command=sys.executable, args=["-m", "sonde", "mcp-bridge"], env=env)
    with errlog.open("w") as err, trio.fail_after(90):
        async with Client(stdio_client(params, errlog=err), mode=mode) as client:
            assert not (await client.call_tool("list_agents", {})).is_error
            revoked = fleet.hub.cli("hub", "key", "revoke", first)
            assert revoked.returncode == 0, revoked.stderr
            await refused(fleet, first)
            with pytest.raises(MCPError) as caught:
                await client.call_tool("list_agents", {})
            said = str(caught.value)
            assert "this API key was revoked at" in said  # the hub's words
            assert "(wrong or revoked)" not in said  # not the cause a second time
            assert f"read from {tmp_path / 'home' / '.sonde' / 'config.json'}" in said, said
            assert f"run `sonde login --hub {fleet.hub.url}` with a valid key" in said, said
            assert "picks it up at its next call" in said
            login(fleet, env, new_key(fleet, f"rotated-second-{mode}"))  # as the message says
            answer = await client.call_tool("list_agents", {})
            assert not answer.is_error, answer.content
            assert answer.structured_content is not None
            assert [a["name"] for a in answer.structured_content["agents"]] == ["alpha"]
    log = errlog.read_text()
    assert "holds a new one (`sonde login`): using it" in log, log
    if mode == "legacy":  # the old key's session is gone with it
        assert "the hub refused the old API key; opening a new session" in log, log


async def test_a_key_from_the_environment_is_read_only_at_start_and_the_advice_says_so(
    tmp_path: Path,
) -> None:
    async with fake_hub() as (_hub, url):
        env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY="sonde_wrong")
        async with bridge_process(env) as bridge:
            await bridge.peer.send(INITIALIZE)
            said = (await bridge.peer.receive())["error"]["message"]
            await bridge.peer.close()
    assert "the hub refused the API key the bridge took from SONDE_API_KEY (wrong or revoked)" in said
    assert "reads it only at start: fix SONDE_API_KEY in the MCP client's env config" in said
    assert "then restart the MCP client" in said
