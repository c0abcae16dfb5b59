"""Review: reads, checks and writes of the hub that an `await` parts, each schedule forced.

Each test pauses one store call (as tests/hub/test_held_reread.py does) so that a concurrent
change lands in the gap, then checks what the hub holds afterwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from sonde.hub.agent_records import get_agent, insert_agent, record_last_seen, set_tags
from sonde.hub.agent_session import AgentSession
from sonde.hub.agent_socket import current_record
from sonde.hub.attestation import accept_pending, hold
from sonde.hub.audit import record_entry
from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.db import open_database, write_transaction
from sonde.hub.errors import HubError
from sonde.hub.keys import ApiKeyRecord, create_api_key, find_api_key
from sonde.hub.probing import run_probe_for, visible_agents_now
from sonde.hub.rest import create_rest_app
from sonde.hub.tag_changes import CLI_TAGS_ACTION, notice_tag_changes
from sonde.protocol.errors import AgentUnavailable
from sonde.protocol.messages import Attestation, RegisterPayload
from tests.hub.test_agent_records import make_agent

PROBE = "system.block.devices"
PACKS = [{"name": "system", "version": "0.1.0", "probes": [{"name": PROBE}]}]
CLAIM = Attestation(os="linux", kernel="6.1", agent_version="0.1.0", code_hash="sha256:a", packs={})


def seed(tmp_path: Path, *agents: Any, keys: int = 1) -> list[str]:
    """Store ``agents`` and ``keys`` admin keys before the hub opens; returns the keys' secrets."""
    db = open_database(tmp_path / "sonde.db")
    try:
        for agent in agents:
            insert_agent(db, agent)
        return [create_api_key(db, f"admin{i}", role="admin")[1] for i in range(keys)]
    finally:
        db.close()


class FakeLink:
    """An agent's link: each probe request waits until the link is closed, then fails."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed = trio.Event()
        self.waiting = 0

    def statistics(self) -> Any:
        return SimpleNamespace(in_flight=self.waiting)

    def close(self, reason: str, code: int = 1000) -> None:
        self.closed.set()

    async def request(self, message: Any) -> Any:
        self.sent.append(message.payload.probe)
        self.waiting += 1
        await self.closed.wait()
        raise AgentUnavailable("the link closed")


def session(agent_id: str, link: FakeLink) -> AgentSession:
    register = RegisterPayload(
        name="web-1", hostname="web-1", os="linux", agent_version="0.1.0", packs=(), attestation=CLAIM
    )
    return AgentSession(agent_id, link, register, PACKS)  # type: ignore[arg-type]


def pause_after(
    monkeypatch: pytest.MonkeyPatch, obj: Any, name: str, when: Any
) -> tuple[trio.Event, trio.Event]:
    """Make ``obj.name`` (store.read / store.write) pause, once its answer is in, for the first
    call ``when(fn, *args)`` picks: returns (answered, go_on)."""
    answered, go_on = trio.Event(), trio.Event()
    real = getattr(obj, name)

    async def paused(fn: Any, *args: Any, **kwargs: Any) -> Any:
        answer = await real(fn, *args, **kwargs)
        if not answered.is_set() and when(fn, *args):
            answered.set()
            await go_on.wait()
        return answer

    monkeypatch.setattr(obj, name, paused)
    return answered, go_on


async def meanwhile(
    paused: tuple[trio.Event, trio.Event],
    task: Callable[[], Awaitable[object]],
    change: Callable[[], Awaitable[object]],
) -> None:
    """Start ``task``; once its paused store call (`pause_after`) has its answer, make ``change``,
    then let the task go on and wait for it."""
    answered, go_on = paused
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task)
        await answered.wait()
        await change()
        go_on.set()


async def put_tags(client: Any, agent_id: str, secret: str, tags: list[str]) -> None:
    """``PUT /api/v1/agents/{agent_id}/tags`` through the hub's REST app, as an admin."""
    answer = await client.put(
        f"/api/v1/agents/{agent_id}/tags", json={"tags": tags}, headers={"Authorization": f"Bearer {secret}"}
    )
    assert answer.status_code == 200


async def stored_and_kept_tags(hub: Any, agent_id: str) -> tuple[list[str], list[str]]:
    """The agent's tags in the database, and in the hub's memory."""
    stored = await hub.store.read(get_agent, agent_id)
    assert stored is not None
    return stored.tags, hub.fleet.records[agent_id].tags


# 1. a fan-out step checks "not held", then waits for a place; the agent reconnects held meanwhile
async def test_a_fan_out_step_waiting_for_a_place_is_not_sent_to_an_agent_held_meanwhile(
    tmp_path: Path,
) -> None:
    agent = make_agent("web-1", packs=PACKS, attestation={"codeHash": "sha256:a"}, last_seen=1.0)
    seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        caller = caller_for(
            ApiKeyRecord(id="k1", name="k1", prefix="sonde_k1", role="admin", created_at=time.time())
        )
        old, new = FakeLink(), FakeLink()
        await hub.fleet.attach(session(agent.id, old))
        outcomes: list[str] = []

        async def step() -> None:
            try:
                await run_probe_for(hub, caller, hub.fleet.records[agent.id], PROBE, {}, fan_out=True)
            except HubError as exc:
                outcomes.append(exc.code)

        async with trio.open_nursery() as nursery:
            for _ in range(9):  # 8 take the agent's fan-out places, the 9th waits for one
                nursery.start_soon(step)
            await trio.testing.wait_all_tasks_blocked()
            assert len(old.sent) == 8
            # the agent reconnects with an unexplained change: held, then attached (as run_session does)
            held = await hold(hub, hub.fleet.records[agent.id], {"codeHash": "sha256:b"}, ["codeHash"])
            hub.fleet.remember(held)
            await hub.fleet.attach(session(agent.id, new))
            assert hub.fleet.status(agent.id) == "degraded"
            await trio.testing.wait_all_tasks_blocked()
            sent_to_held = list(new.sent)
            new.close("test over")
        assert sent_to_held == [], "a probe went to an agent held as degraded"


# 2. current_record's read (through the writer) lands before a REST tag change it then undoes
async def test_a_connect_that_read_the_record_before_a_tag_change_keeps_the_new_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent("web-1", tags=["prod"])
    [secret] = seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()
        loaded = hub.fleet.records[agent.id]
        # connected a while: the store's last_seen is newer than memory's (`keep_last_seen_written`),
        # as on a reconnect that replaces a connection the hub has not seen end yet
        await hub.store.write(record_last_seen, {agent.id: time.time()})
        # the connect's read and the tag write in one batch, their waiters woken in reverse order
        await meanwhile(
            pause_after(monkeypatch, hub.store, "write", lambda fn, *a: fn is get_agent),
            partial(current_record, hub, loaded),
            partial(put_tags, client, agent.id, secret, ["staging"]),
        )
        # memory back to the old tags: a member key's scope judged on them until a reconnect
        assert await stored_and_kept_tags(hub, agent.id) == (["staging"], ["staging"])


# 3. PUT tags keeps the whole record its write returned: what an agent's connect kept meanwhile is lost
async def test_a_tag_change_does_not_undo_what_a_connect_kept_while_it_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent("web-1")  # enrolled, never connected: no packs yet
    [secret] = seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()
        await meanwhile(
            pause_after(monkeypatch, hub.store, "write", lambda fn, *a: True),
            partial(put_tags, client, agent.id, secret, ["staging"]),
            partial(hub.fleet.attach, session(agent.id, FakeLink())),  # its packs and host kept in memory
        )
        kept = hub.fleet.records[agent.id]
        assert kept.tags == ["staging"]
        assert kept.packs == PACKS, "the agent's packs were forgotten: every probe is 'unknown'"


# 4. the CLI-tags watch reads the stored tags, a REST tag change lands, the watch puts the older ones back
async def test_the_cli_tags_watch_does_not_undo_a_rest_tag_change_made_while_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent("web-1", tags=["prod"])
    [secret] = seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()
        db = open_database(tmp_path / "sonde.db")
        try:  # `sonde hub agent tag web-1 cli`
            with write_transaction(db):
                set_tags(db, agent.id, ["cli"])
                record_entry(db, "cli", CLI_TAGS_ACTION, "web-1", tags=["cli"])
        finally:
            db.close()
        await meanwhile(
            pause_after(monkeypatch, hub.store, "read", lambda fn, *a: fn.__name__ == "stored_tags"),
            partial(notice_tag_changes, hub, 0),
            partial(put_tags, client, agent.id, secret, ["rest"]),
        )
        assert await stored_and_kept_tags(hub, agent.id) == (["rest"], ["rest"])


# 5. a key looked up before its revoke is cached after the revoke dropped the cache
async def test_a_key_revoked_through_the_hub_while_it_was_looked_up_is_refused_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [admin, other] = seed(tmp_path, keys=2)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()

        async def revoke() -> None:
            other_id = (await hub.store.read(find_api_key, other)).id  # type: ignore[union-attr]
            answer = await client.delete(
                f"/api/v1/api-keys/{other_id}", headers={"Authorization": f"Bearer {admin}"}
            )
            assert answer.status_code == 200

        await meanwhile(
            pause_after(monkeypatch, hub.store, "read", lambda fn, *a: a == (other,)),
            partial(hub.keys.authenticate, f"Bearer {other}"),
            revoke,
        )
        assert await hub.keys.authenticate(f"Bearer {other}") is None, "the revoked key still works"


# 6. REST removes an agent while it connects (after current_record, before attach)
async def test_an_agent_removed_while_it_connects_is_not_left_connected(tmp_path: Path) -> None:
    agent = make_agent("web-1", packs=PACKS)
    [secret] = seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()
        record = await current_record(hub, hub.fleet.records[agent.id])  # run_session: remember, ack...
        hub.fleet.remember(record)
        answer = await client.delete(
            f"/api/v1/agents/{agent.id}", headers={"Authorization": f"Bearer {secret}"}
        )
        assert answer.status_code == 200
        link = FakeLink()
        await hub.fleet.attach(session(agent.id, link))  # ...then the link opens and attaches
        assert agent.id not in hub.fleet.records
        assert agent.id not in hub.fleet.sessions, "a removed agent stays connected"
        assert link.closed.is_set()


# 7. the last-seen writer lists the connected agents, awaits, then stores "offline" for any not listed
async def test_an_agent_that_connects_while_last_seen_is_queued_is_not_stored_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = make_agent("web-1", packs=PACKS), make_agent("web-2", packs=PACKS)
    seed(tmp_path, first, second)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        await hub.fleet.attach(session(first.id, FakeLink()))
        queued, go_on = pause_after(monkeypatch, hub.store, "submit", lambda fn, *a: fn is record_last_seen)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hub.fleet.keep_last_seen_written, 0.01)
            await queued.wait()  # web-1's last seen queued; web-2 connects before mend_statuses is
            await hub.fleet.attach(session(second.id, FakeLink()))
            go_on.set()
            await trio.testing.wait_all_tasks_blocked()  # mend_statuses queued; the next round would mend it
            nursery.cancel_scope.cancel()
        stored = await hub.store.write(get_agent, second.id)  # after every queued write
        assert hub.fleet.status(second.id) == "online"
        assert stored is not None
        assert stored.status == "online", "a connected agent is stored offline"


# 8. an accept through the hub after one from the CLI: it says it found nothing held, as it did
async def test_an_accept_after_the_clis_says_it_found_nothing_held(tmp_path: Path) -> None:
    agent = make_agent(
        "web-1",
        status="degraded",
        attestation={"codeHash": "sha256:a"},
        pending_attestation={"codeHash": "sha256:b"},
    )
    [secret] = seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        client = create_rest_app(hub).test_client()
        db = open_database(tmp_path / "sonde.db")
        try:  # `sonde hub agent accept web-1`, before the hub has noticed it
            with write_transaction(db):
                accept_pending(db, agent.id)
        finally:
            db.close()
        assert hub.fleet.status(agent.id) == "degraded"
        answer = await client.post(
            f"/api/v1/agents/{agent.id}/attestation/accept", headers={"Authorization": f"Bearer {secret}"}
        )
        assert answer.status_code == 200
        assert (await answer.get_json())["accepted"] is False
        assert hub.fleet.status(agent.id) == "offline"
    db = open_database(tmp_path / "sonde.db")
    try:
        [row] = db.query("SELECT outcome, detail FROM audit WHERE action = 'attestation.accept'")
    finally:
        db.close()
    assert (row["outcome"], json.loads(row["detail"])) == ("nothing_pending", {"accepted": None})


# 9. a held agent listed re-read with tags changed from the CLI is judged on those, not the old ones
async def test_a_held_agent_moved_out_of_a_keys_tags_from_the_cli_is_not_listed_to_it(tmp_path: Path) -> None:
    agent = make_agent(
        "web-1",
        tags=["prod"],
        status="degraded",
        attestation={"codeHash": "sha256:a"},
        pending_attestation={"codeHash": "sha256:b"},
    )
    seed(tmp_path, agent)
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        member = caller_for(
            ApiKeyRecord(
                id="k1",
                name="k1",
                prefix="sonde_k1",
                role="member",
                policy={"agents": ["#prod"]},
                created_at=time.time(),
            )
        )
        assert [r.name for r in await visible_agents_now(hub, member)] == ["web-1"]
        db = open_database(tmp_path / "sonde.db")
        try:  # `sonde hub agent tag web-1 staging`, before the hub's watch has seen it
            with write_transaction(db):
                set_tags(db, agent.id, ["staging"])
        finally:
            db.close()
        assert await visible_agents_now(hub, member) == []
        assert await visible_agents_now(hub, member, ["prod"]) == []
