"""A real `sonde start` refused by a hub that cannot read its register says which side to upgrade.

Regression (found by an upgrade review with a new agent on an old hub): the old hub, not knowing
``payload.linkKey``, answered an unbound ``hub.reject`` (protocol_error: unknown field
'payload.linkKey'), and the agent logged only "not heeded: ... it was made for another
connection" while retrying forever: nobody said the hub was older than the agent.

The hub here is a stand-in for that older hub (a small WebSocket server answering every register
with the signed, unbound reject an older hub sends, signed with the key the agent pinned); the
agent is the real process. The reject must still not be obeyed (anyone on a ws:// path could hand
one on): the agent keeps retrying, on its growing backoff, and stops only when told to.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import trio
import trio_websocket

from sonde import __version__
from sonde.agent.config import AgentConfig, save_config
from sonde.protocol.codec import FrameCodec
from sonde.protocol.messages import AgentRegister, HubReject, RejectPayload, VersionRange
from sonde.protocol.signing import Ed25519PrivateKey, new_private_key, private_key_to_text, public_key_to_text
from tests.e2e.procs import Proc, base_env, spawn

pytestmark = pytest.mark.e2e

RETRIED = "retrying (the reject does not echo this register, so it is only logged)"
HUB_OLDER = (
    f"the hub likely runs an older Sonde than this agent ({__version__}): upgrade the hub, "
    "or install this agent's Sonde version on it"
)
HUB_NEWER = f"the hub likely runs a newer Sonde than this agent ({__version__}): upgrade this agent to the hub's version"
RECONNECTING = re.compile(r"reconnecting to \S+ in [\d.]+s \(attempt (\d+)\)")


@dataclass
class OtherVersionHub:
    """Answers every register, after checking its signature, with one unbound ``hub.reject``."""

    rejected: RejectPayload
    hub_key: Ed25519PrivateKey = field(default_factory=new_private_key)
    agent_key: Ed25519PrivateKey = field(default_factory=new_private_key)
    registers: list[AgentRegister] = field(default_factory=list)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(trio_websocket.serve_websocket, self.answer, "127.0.0.1", 0, None)
            task_status.started(server.port)

    async def answer(self, request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        codec = FrameCodec(signing_key=self.hub_key, peer_key=self.agent_key.public_key())
        register = codec.decode(str(await ws.get_message()))
        assert isinstance(register, AgentRegister)
        self.registers.append(register)
        await ws.send_message(codec.encode(HubReject(payload=self.rejected)))  # no nonce, no agentId
        await ws.aclose(1008, self.rejected.code)

    def enroll(self, home: Path, port: int) -> None:
        """The config `sonde enroll` would have written for this hub."""
        config = AgentConfig(
            hub_url=f"http://127.0.0.1:{port}",
            agent_id="a" * 32,
            name="upgraded",
            private_key=private_key_to_text(self.agent_key),
            hub_public_key=public_key_to_text(self.hub_key.public_key()),
        )
        save_config(config, home / ".sonde" / "config.json")


async def wait_for(proc: Proc, pattern: str) -> re.Match[str]:
    """`Proc.wait_for` (30 s at most) off the event loop: the stand-in hub keeps answering."""
    return await trio.to_thread.run_sync(partial(proc.wait_for, re.compile(pattern), 30.0))


@pytest.mark.parametrize(
    ("rejected", "words"),
    [
        (
            RejectPayload(
                code="protocol_error",
                reason="unknown field 'payload.linkKey'",
                supported_versions=VersionRange(min=1, max=1),
            ),
            "the hub refused this agent's register as a frame it cannot read "
            f"(protocol_error: unknown field 'payload.linkKey'): {HUB_OLDER}; {RETRIED}",
        ),
        (
            RejectPayload(
                code="unsupported_version",
                reason="unsupported protocol version 1; supported: 2..2",
                supported_versions=VersionRange(min=2, max=2),
            ),
            "the hub refused this agent's protocol version (unsupported_version: unsupported protocol "
            f"version 1; supported: 2..2): the hub speaks protocol 2..2, this agent 1: {HUB_NEWER}; {RETRIED}",
        ),
    ],
    ids=["hub-older", "hub-newer"],
)
async def test_a_hub_of_another_version_is_named_and_its_reject_not_obeyed(
    tmp_path: Path, rejected: RejectPayload, words: str
) -> None:
    hub = OtherVersionHub(rejected)
    home = tmp_path / "home"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(hub.serve)
            hub.enroll(home, port)
            agent = spawn(["start", "--allow-root"], base_env(home))
            try:
                url = f"ws://127.0.0.1:{port}/ws/agent"
                await wait_for(
                    agent, rf"WARNING \S+: cannot use the hub at {re.escape(url)}: {re.escape(words)}$"
                )
                await wait_for(agent, r"\(attempt 3\)")
                assert agent.popen.poll() is None, agent.output  # not obeyed: still running, retrying
            finally:
                code = await trio.to_thread.run_sync(partial(agent.stop, signal.SIGTERM))
            nursery.cancel_scope.cancel()
    assert code == 0, agent.output
    assert len(hub.registers) >= 3
    # retried on the same growing backoff as any failure: never reset between these refusals
    attempts = [int(match.group(1)) for line in agent.lines if (match := RECONNECTING.search(line))]
    assert attempts == list(range(1, len(attempts) + 1)), agent.output
    assert 3 <= sum(words in line for line in agent.lines) <= len(hub.registers)
    assert not any("not heeded" in line for line in agent.lines)
