"""End to end, the hub's front doors refuse what they must and keep serving the rest.

Real `sonde hub` and `sonde start` processes (the session's shared fleet),
the real `sonde enroll`, raw HTTP on /mcp and a raw agent WebSocket for the
frames a well-behaved agent never sends.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import subprocess
from datetime import timedelta
from typing import Any

import httpx
import pytest
import trio_websocket

from sonde.agent.identity import register_payload
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM_PACK
from sonde.protocol.codec import FrameCodec
from sonde.protocol.messages import AgentRegister, HubReject, utc_now
from sonde.protocol.signing import new_private_key
from tests.e2e.harness import (
    Answer,
    SharedFleet,
    agent_env,
    agent_identity,
    agent_rows,
    config_file,
    create_expired_token,
    enroll_named,
    eventually,
    post_enroll,
    register_frame,
    rest_token,
    send_register,
    sonde_enroll,
    status_of,
)
from tests.e2e.mcpclient import call, initialize_request, mcp_client, mcp_refusal
from tests.e2e.procs import SONDE
from tests.subprocs import run_any, without_file_overrides

pytestmark = pytest.mark.e2e

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = initialize_request("2025-06-18", request_id=1)
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
SESSION_HEADER = "mcp-session-id"


def reject_code(answer: Answer) -> tuple[str, str]:
    """The code and reason of a ``hub.reject``, which must be followed by a policy close."""
    assert isinstance(answer.first, HubReject), answer
    assert answer.close_code == 1008, "the hub must close the socket after hub.reject"
    return answer.first.payload.code, answer.first.payload.reason


def mcp_post(hub_url: str, key: str | None, body: dict[str, Any], **headers: str) -> httpx.Response:
    """POST one JSON-RPC message to /mcp and read the whole answer."""
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=hub_url, timeout=10) as http:
        answer = http.post("/mcp", json=body, headers={**MCP_HEADERS, **auth, **headers})
        answer.read()
    return answer


def initialize(hub_url: str, key: str | None, **headers: str) -> httpx.Response:
    """POST an MCP initialize to /mcp; ends the session again if one was opened."""
    answer = mcp_post(hub_url, key, INITIALIZE, **headers)
    session = answer.headers.get(SESSION_HEADER)
    if session:
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        httpx.delete(f"{hub_url}/mcp", headers={**auth, SESSION_HEADER: session}, timeout=10)
    return answer


# --- enrollment ----------------------------------------------------------------


async def test_enrollment_token_is_single_use_and_expires(fleet: SharedFleet) -> None:
    hub = fleet.hub
    token = rest_token(hub)
    first = enroll_named(hub, fleet.home("tok-first"), "tok-first", token=token)
    assert config_file(first.home).is_file()

    # the same token again: refused by the CLI with nothing written, and by REST with its code
    reuse_home = fleet.home("tok-reuse")
    done = sonde_enroll(hub.url, token, "tok-reuse", agent_env(reuse_home))
    assert done.returncode == 1
    assert "already used" in done.stderr
    assert not (reuse_home / ".sonde").exists()
    answer = post_enroll(hub, token, "tok-reuse")
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "token_used"

    expired = create_expired_token(hub)
    late_home = fleet.home("tok-late")
    done = sonde_enroll(hub.url, expired, "tok-late", agent_env(late_home))
    assert done.returncode == 1
    assert "expired" in done.stderr
    assert not (late_home / ".sonde").exists()
    assert post_enroll(hub, expired, "tok-late").json()["error"]["code"] == "token_expired"

    unknown = post_enroll(hub, secrets.token_urlsafe(24), "tok-unknown")
    assert unknown.status_code == 401
    assert unknown.json()["error"]["code"] == "unknown_token"

    enrolled = agent_rows(hub)
    assert "tok-first" in enrolled
    assert not {"tok-reuse", "tok-late", "tok-unknown"} & enrolled.keys()
    # the refused machine is left clean: a fresh token enrolls it
    retried = enroll_named(hub, reuse_home, "tok-reuse")
    assert config_file(retried.home).is_file()


def test_an_identity_that_could_not_be_saved_spends_no_token(fleet: SharedFleet) -> None:
    hub = fleet.hub
    home = fleet.home("nowhere")
    env = agent_env(home)
    home.chmod(0o555)  # ~/.sonde cannot be made: as on a read-only file system
    token = rest_token(hub)
    argv = without_file_overrides([*SONDE, "enroll", "--hub", hub.url, "--token", token, "--name", "nowhere"])
    done = run_any(argv, env=env, timeout=30)
    home.chmod(0o755)
    assert done.returncode == 1
    assert "cannot save the identity in" in done.stderr
    assert "the token was not used" in done.stderr
    assert "Traceback" not in done.stderr
    assert "nowhere" not in agent_rows(hub)
    # the same token, elsewhere, pasted with the newline it was printed with
    saved = enroll_named(hub, fleet.home("somewhere"), "nowhere", token=f" {token}\n")
    assert config_file(saved.home).is_file()


def test_an_enrolled_machine_enrolls_again_only_when_told_to(fleet: SharedFleet) -> None:
    hub = fleet.hub
    first = enroll_named(hub, fleet.home("again"), "again")
    saved = config_file(first.home).read_text()
    token = rest_token(hub)
    done = sonde_enroll(hub.url, token, "again-2", first.env)
    assert done.returncode == 1
    assert "already enrolled as again" in done.stderr
    assert "Pass --replace to enroll anyway, and --name again to keep its name" in done.stderr
    assert config_file(first.home).read_text() == saved  # nothing written, and the token not spent
    replaced = subprocess.run(
        [*SONDE, "enroll", "--hub", hub.url, "--token", token, "--name", "again-2", "--replace"],
        env=first.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert replaced.returncode == 0, replaced.stderr
    assert agent_identity(first)[0] != json.loads(saved)["agentId"]
    assert {"again", "again-2"} <= agent_rows(hub).keys()


async def test_name_takeover_needs_a_token_for_that_name(fleet: SharedFleet) -> None:
    hub = fleet.hub
    original = enroll_named(hub, fleet.home("taken"), "taken")
    old_id, old_key = agent_identity(original)
    successor = None
    try:
        original.start()
        await eventually(lambda: status_of(hub, "taken") == "online")

        # a plain token cannot take the name, by CLI or by REST
        intruder_home = fleet.home("taken-intruder")
        done = sonde_enroll(hub.url, rest_token(hub), "taken", agent_env(intruder_home))
        assert done.returncode == 1
        assert "already enrolled" in done.stderr
        assert not (intruder_home / ".sonde").exists()
        answer = post_enroll(hub, rest_token(hub), "taken")
        assert answer.status_code == 409
        assert answer.json()["error"]["code"] == "name_taken"
        async with mcp_client(hub.url, hub.admin_key) as client:
            reading = await call(client, "probe", agent="taken", probe="system.memory.usage")
        assert reading["agent_id"] == old_id

        # an admin's token for this name re-enrolls it; the old identity is refused from then on
        successor = enroll_named(hub, fleet.home("taken-new"), "taken", token=hub.token("--name", "taken"))
        new_id, _ = agent_identity(successor)
        assert new_id != old_id
        await eventually(lambda: original.proc is not None and original.proc.popen.poll() is not None, 15)
        assert original.proc is not None
        assert original.proc.popen.returncode == 3, original.proc.output
        assert re.search(r"\b(revoked|unknown_agent)\b", original.proc.output)
        assert "the name taken was enrolled again, by a new identity" in original.proc.output
        code, reason = reject_code(await send_register(hub.url, register_frame(old_id, "taken", old_key)))
        assert (code, reason) == ("revoked", "the name taken was enrolled again, by a new identity")

        successor.start()
        await eventually(lambda: status_of(hub, "taken") == "online")
        async with mcp_client(hub.url, hub.admin_key) as client:
            reading = await call(client, "probe", agent="taken", probe="system.memory.usage")
        assert reading["agent_id"] == new_id
    finally:
        for agent in (original, successor):
            if agent is not None and agent.proc is not None:
                agent.stop()


# --- the agent WebSocket ---------------------------------------------------------


async def test_register_signed_with_another_key_is_refused(fleet: SharedFleet) -> None:
    hub = fleet.hub
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    alpha_id, _ = agent_identity(alpha)
    connections_before = alpha.proc.output.count("connected to")

    answer = await send_register(hub.url, register_frame(alpha_id, "alpha", new_private_key()))
    code, reason = reject_code(answer)
    assert code == "bad_signature"
    assert "signature" in reason

    # the real alpha was not displaced: same connection, still answering
    assert status_of(hub, "alpha") == "online"
    async with mcp_client(hub.url, hub.admin_key) as client:
        reading = await call(client, "probe", agent="alpha", probe="system.memory.usage")
    assert reading["agent_id"] == alpha_id
    assert alpha.proc.output.count("connected to") == connections_before


async def test_replayed_or_stale_register_is_refused(fleet: SharedFleet) -> None:
    hub = fleet.hub
    agent_id, key = agent_identity(fleet.idle)
    name = fleet.idle.name
    frame = register_frame(agent_id, name, key)

    accepted = await send_register(hub.url, frame)
    assert accepted.first is not None
    assert accepted.first.type == "hub.ack"
    code, reason = reject_code(await send_register(hub.url, frame))
    assert code == "bad_signature"
    assert "replay" in reason

    stale = register_frame(agent_id, name, key, ts=utc_now() - timedelta(minutes=10))
    code, reason = reject_code(await send_register(hub.url, stale))
    assert code == "bad_signature"
    assert "the agent's clock is 600 s behind the hub's (window ±120 s)" in reason  # which one, how far
    assert "clocks disagree" in reason  # what the operator of the agent must fix

    # the same key with a fresh frame still gets in
    fresh = await send_register(hub.url, register_frame(agent_id, name, key))
    assert fresh.first is not None
    assert fresh.first.type == "hub.ack"


async def test_register_without_a_usable_link_key_is_refused(fleet: SharedFleet) -> None:
    hub = fleet.hub
    agent_id, key = agent_identity(fleet.idle)
    codec = FrameCodec(signing_key=key, agent_id=agent_id)
    payload = register_payload(fleet.idle.name, PackRegistry.of([SYSTEM_PACK]))
    for link_key, words in [
        (None, "carries no linkKey: upgrade this agent"),
        (base64.b64encode(bytes(32)).decode(), "linkKey is not a usable X25519 public key"),
    ]:
        frame = codec.encode(AgentRegister(payload=payload.model_copy(update={"link_key": link_key})))
        code, reason = reject_code(await send_register(hub.url, frame))
        assert code == "protocol_error"
        assert words in reason


async def test_agent_socket_refuses_browsers(fleet: SharedFleet) -> None:
    hub = fleet.hub
    agent_id, key = agent_identity(fleet.idle)
    frame = register_frame(agent_id, fleet.idle.name, key)
    with pytest.raises(trio_websocket.ConnectionRejected) as refused:
        await send_register(hub.url, frame, origin="http://evil.example")
    assert refused.value.status_code == 403

    # the same frame without an Origin, as an agent sends it, is welcome
    welcome = await send_register(hub.url, frame)
    assert welcome.first is not None
    assert welcome.first.type == "hub.ack"


# --- /mcp ------------------------------------------------------------------------


async def test_mcp_needs_a_valid_unrevoked_key(fleet: SharedFleet) -> None:
    hub = fleet.hub
    for key in (None, "sonde_not-a-key-at-all"):
        answer = initialize(hub.url, key)
        mcp_refusal(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert SESSION_HEADER not in answer.headers

    created = hub.cli("hub", "key", "create", "--name", "short-lived")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    key_id = re.search(r"API key ([0-9a-f]{32})", created.stderr)
    assert key_id is not None, created.stderr
    opened = mcp_post(hub.url, secret, INITIALIZE)
    assert opened.status_code == 200
    session = {SESSION_HEADER: opened.headers[SESSION_HEADER], "mcp-protocol-version": "2025-06-18"}
    assert mcp_post(hub.url, secret, INITIALIZED, **session).status_code == 202
    assert mcp_post(hub.url, secret, LIST_TOOLS, **session).status_code == 200

    revoked = hub.cli("hub", "key", "revoke", key_id.group(1))
    assert revoked.returncode == 0, revoked.stderr
    # the open session stops working, and so does a new one
    took = await eventually(lambda: mcp_post(hub.url, secret, LIST_TOOLS, **session).status_code == 401)
    assert took < 6.5
    assert initialize(hub.url, secret).status_code == 401
    assert initialize(hub.url, hub.admin_key).status_code == 200


async def test_a_host_name_in_another_case_is_the_same_host(fleet: SharedFleet) -> None:
    hub = fleet.hub
    port = hub.url.rsplit(":", 1)[1]
    assert initialize(hub.url, hub.admin_key, Host=f"LOCALHOST:{port}").status_code == 200
    assert initialize(hub.url, hub.admin_key, Host=f"Evil.Example:{port}").status_code == 421


def test_a_request_with_two_authorization_headers_is_refused_on_every_surface(fleet: SharedFleet) -> None:
    """REST read the first, /mcp the last: a proxy adding its own header made them disagree."""
    hub = fleet.hub
    member = fleet.hub.cli("hub", "key", "create", "--name", "two-headers")
    assert member.returncode == 0, member.stderr
    both = [
        ("Authorization", f"Bearer {hub.admin_key}"),
        ("Authorization", f"Bearer {member.stdout.strip()}"),
    ]
    with httpx.Client(base_url=hub.url, timeout=10) as http:
        for headers in (both, both[::-1]):
            answers = [
                http.get("/api/v1/api-keys", headers=headers),
                http.post(
                    "/mcp",
                    headers=[*headers, ("Accept", "application/json, text/event-stream")],
                    content=json.dumps(INITIALIZE),
                ),
            ]
            rest, mcp = answers
            assert rest.status_code == 400, rest.text
            assert rest.json()["error"]["code"] == "repeated_authorization"
            mcp_refusal(mcp, 400, "repeated_authorization")


async def test_mcp_refuses_foreign_origin_and_host(fleet: SharedFleet) -> None:
    hub = fleet.hub
    host = hub.url.removeprefix("http://")
    assert initialize(hub.url, hub.admin_key, Origin=hub.url).status_code == 200

    bad_origin = initialize(hub.url, hub.admin_key, Origin="http://evil.example")
    assert bad_origin.status_code == 403
    assert SESSION_HEADER not in bad_origin.headers
    bad_host = initialize(hub.url, hub.admin_key, Host="evil.example")
    assert bad_host.status_code == 421
    assert SESSION_HEADER not in bad_host.headers
    rebound = initialize(hub.url, hub.admin_key, Host=f"evil.example:{host.rsplit(':', 1)[1]}")
    assert rebound.status_code == 421
