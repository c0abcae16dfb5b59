"""The status stored for an agent stays true across an accept: an agent is held (``degraded``)
only while a claim waits, whoever writes its status and however stale their view."""

from __future__ import annotations

from pathlib import Path

import trio
from sqlite_utils import Database

from sonde.hub.agent_records import (
    AgentRecord,
    get_agent,
    insert_agent,
    list_agents,
    mark_all_offline,
    mend_statuses,
    record_departures,
    record_last_seen,
    update_agent,
)
from sonde.hub.attestation import accept_pending
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.db import open_database
from tests.hub.test_agent_records import T0, make_agent

CLAIM = {"codeHash": "sha256:new", "packs": {"system": "0.1.0"}}


def held(db: Database, name: str, status: str = "degraded") -> str:
    record = make_agent(
        name, attestation={"codeHash": "sha256:old"}, pending_attestation=CLAIM, status=status
    )
    insert_agent(db, record)
    return record.id


def test_an_accept_records_the_agent_as_connected_or_not(db: Database) -> None:
    connected, away = held(db, "web-1"), held(db, "web-2")
    accepted = accept_pending(db, connected, connected=True)
    assert accepted is not None
    assert (accepted.status, accepted.attestation, accepted.pending_attestation) == ("online", CLAIM, None)
    assert get_agent(db, connected) == accepted
    stored = accept_pending(db, away)  # the CLI's: it cannot know
    assert stored is not None
    assert stored.status == "offline"
    assert get_agent(db, away) == stored


def test_a_stale_degraded_after_an_accept_is_offline(db: Database) -> None:
    # a hub that did not see the CLI's accept yet writes "degraded" as the agent disconnects
    agent_id = held(db, "web-1")
    accept_pending(db, agent_id)
    updated = update_agent(db, agent_id, status="degraded", last_seen=T0 + 60)
    assert updated is not None
    assert updated.status == "offline"
    assert get_agent(db, agent_id) == updated
    # while a claim waits, "degraded" is what it is
    other = held(db, "web-2", status="online")
    stored = update_agent(db, other, status="degraded", last_seen=T0 + 60)
    assert stored is not None
    assert stored.status == "degraded"


def test_a_starting_hub_records_no_agent_online(db: Database) -> None:
    insert_agent(db, make_agent("left-online", status="online"))  # a hub that was killed
    waiting = held(db, "still-held")
    insert_agent(db, make_agent("accept-missed", status="degraded"))  # no claim waits
    records = mark_all_offline(db)
    assert records == list_agents(db)
    assert {r.name: r.status for r in records} == {
        "accept-missed": "offline",
        "left-online": "offline",
        "still-held": "degraded",
    }
    assert get_agent(db, waiting) is not None


def test_agents_a_stopping_hub_closed_are_recorded_in_one_write(db: Database) -> None:
    online = make_agent("online", status="online")
    insert_agent(db, online)
    waiting = held(db, "still-held")
    accept_missed = make_agent("accept-missed", status="degraded")  # no claim waits
    insert_agent(db, accept_missed)
    untouched = make_agent("not-connected", status="offline", last_seen=T0)
    insert_agent(db, untouched)
    record_departures(db, {online.id: T0 + 10, waiting: T0 + 20, accept_missed.id: T0 + 30})
    stored = {r.name: (r.status, r.last_seen) for r in list_agents(db)}
    assert stored == {
        "online": ("offline", T0 + 10),
        "still-held": ("degraded", T0 + 20),  # as `update_agent` decides for one
        "accept-missed": ("offline", T0 + 30),
        "not-connected": ("offline", T0),
    }


def test_connected_agents_last_contact_is_written_forward_only(db: Database) -> None:
    online = make_agent("online", status="online", last_seen=T0)
    held_id = held(db, "still-held")
    insert_agent(db, online)
    gone = make_agent("gone", status="offline", last_seen=T0 + 50)  # its detach wrote a later time
    insert_agent(db, gone)
    record_last_seen(db, {online.id: T0 + 10, held_id: T0 + 20, gone.id: T0 + 30, "no-such-id": T0})
    stored = {r.name: (r.status, r.last_seen) for r in list_agents(db)}
    assert stored == {
        "online": ("online", T0 + 10),  # the status is the hub's to change, not this write's
        "still-held": ("degraded", T0 + 20),
        "gone": ("offline", T0 + 50),  # never moved back
    }


def stored_before_the_hub(tmp_path: Path, *records: AgentRecord) -> None:
    """``records`` in the hub's file, as a hub that ran before left them."""
    db = open_database(tmp_path / "sonde.db")
    try:
        for record in records:
            insert_agent(db, record)
    finally:
        db.close()


async def test_a_hub_opens_with_no_agent_stored_online(tmp_path: Path) -> None:
    stored_before_the_hub(tmp_path, make_agent("left-online", status="online"))
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        assert [r.status for r in await hub.store.read(list_agents)] == ["offline"]
        assert [hub.fleet.status(agent_id) for agent_id in hub.fleet.records] == ["offline"]


def test_mended_statuses_say_online_for_exactly_the_agents_connected(db: Database) -> None:
    left_online = make_agent("left-online", status="online")  # its disconnect's write failed
    missed_online = make_agent("missed-online", status="offline")  # its connect's write failed
    away = make_agent("away", status="offline")
    for record in (left_online, missed_online, away):
        insert_agent(db, record)
    held(db, "still-held")
    accept_missed = held(db, "accept-missed")  # degraded with no claim waiting: offline, as at a start
    update_agent(db, accept_missed, pending_attestation=None)
    mend_statuses(db, [missed_online.id])
    stored = {r.name: r.status for r in list_agents(db)}
    assert stored == {
        "left-online": "offline",
        "missed-online": "online",
        "away": "offline",
        "still-held": "degraded",
        "accept-missed": "offline",
    }


async def test_a_running_hub_mends_a_status_a_failed_write_left_wrong(tmp_path: Path) -> None:
    stored_before_the_hub(tmp_path, make_agent("gone", status="offline"))
    async with open_hub(HubConfig(data_dir=tmp_path, heartbeat_interval_s=0.25)) as hub:
        [gone] = await hub.store.read(list_agents)
        await hub.store.write(update_agent, gone.id, status="online")  # as a lost disconnect write leaves it
        stored = await hub.store.read(get_agent, gone.id)
        with trio.fail_after(10):
            while stored is not None and stored.status != "offline":
                await trio.sleep(0.1)
                stored = await hub.store.read(get_agent, gone.id)
        assert stored is not None
