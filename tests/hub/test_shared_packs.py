"""The hub keeps one copy of each pack description, however many agents describe it.

Each agent's record held its own copy of its packs' descriptions (every probe's name,
description and parameter schema): with the built-in packs, 530 KiB of hub RSS per agent
at 1,000 agents in the benchmark's scale scenario, and 330 MiB for their records alone
at the hub's start. These check that records read from a real database file, and those
of real agents connected to a real hub, share the descriptions instead.
"""

from __future__ import annotations

import gc
import weakref
from functools import partial
from pathlib import Path

import trio
from sqlite_utils import Database

from sonde.agent.enroll import enroll
from sonde.agent.main import agent_main
from sonde.hub.agent_records import get_agent, insert_agent, list_agents, update_agent
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub
from sonde.hub.enrollment_tokens import create_enrollment_token
from sonde.hub.serve import serve_hub
from sonde.hub.shared_packs import forget_recent_sets
from sonde.packs.registry import load_packs
from tests.hub.test_agent_records import make_agent

SYSTEM = {"name": "system", "version": "1.0", "probes": [{"name": "system.memory.usage", "paramsSchema": {}}]}
DOCKER = {
    "name": "docker",
    "version": "2.0",
    "probes": [{"name": "docker.container.list", "paramsSchema": {}}],
}


def test_records_read_back_share_each_pack_and_keep_its_value(db: Database) -> None:
    insert_agent(db, make_agent("web-1", packs=[SYSTEM, DOCKER]))
    insert_agent(db, make_agent("web-2", packs=[SYSTEM, DOCKER]))
    insert_agent(db, make_agent("db-1", packs=[SYSTEM]))  # another set of packs: the common one still shared
    db_1, web_1, web_2 = list_agents(db)
    assert web_1.packs == [SYSTEM, DOCKER]
    assert db_1.packs == [SYSTEM]
    assert web_1.packs[0] is web_2.packs[0] is db_1.packs[0]
    assert web_1.packs[1] is web_2.packs[1]
    again = get_agent(db, web_1.id)
    assert again is not None
    assert again.packs[1] is web_1.packs[1]


def test_an_update_keeps_the_shared_packs_and_writes_only_its_fields(db: Database) -> None:
    insert_agent(db, make_agent("web-1", packs=[SYSTEM]))
    (record,) = list_agents(db)
    updated = update_agent(db, record.id, status="online", last_seen=5.0)
    assert updated is not None
    assert updated.packs[0] is record.packs[0]
    stored = get_agent(db, record.id)
    assert stored is not None
    assert (stored.status, stored.last_seen, stored.packs) == ("online", 5.0, [SYSTEM])


def test_a_description_no_record_holds_is_let_go(db: Database) -> None:
    lone = {"name": "lone", "version": "9", "probes": []}
    insert_agent(db, make_agent("odd-1", packs=[lone]))
    (record,) = list_agents(db)
    held = weakref.ref(record.packs[0])
    del record
    forget_recent_sets()  # the few recent sets kept for lookups
    gc.collect()
    assert held() is None


def registered(hub: Hub, offered: list[str]) -> bool:
    return all([p["name"] for p in record.packs] == offered for record in hub.fleet.records.values())


async def test_real_agents_connected_to_a_real_hub_share_their_packs(tmp_path: Path) -> None:
    registry = load_packs()
    offered = list(registry.packs)  # enrollment sends those detected here; the register, those offered
    hub_ready, ready = trio.open_memory_channel[Hub](1)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        config = HubConfig(data_dir=tmp_path / "hub", port=0)
        url = await nursery.start(partial(serve_hub, config, hub_ready=hub_ready, shutdown=shutdown))
        hub = await ready.receive()
        daemons = []
        for name in ("web-1", "web-2"):
            token = (await hub.store.write(create_enrollment_token))[1]
            agent = await trio.to_thread.run_sync(
                partial(enroll, url, token, name, config_path=tmp_path / f"{name}.json", registry=registry)
            )
            daemons.append(await nursery.start(partial(agent_main, agent, registry, handle_signals=False)))
        with trio.move_on_after(10):  # until both records have the registers' packs
            while not registered(hub, offered):  # noqa: ASYNC110 (records have no event)
                await trio.sleep(0.01)
        records = list(hub.fleet.records.values())
        sessions = list(hub.fleet.sessions.values())
        for daemon in daemons:  # stopped cleanly, before the asserts
            await daemon.stop("test over")
        shutdown.set()
    first, second = records
    assert [p["name"] for p in first.packs] == [p["name"] for p in second.packs] == offered
    assert all(a is b for a, b in zip(first.packs, second.packs, strict=True))
    assert len(sessions) == 2
    for session in sessions:
        assert session.register.packs == ()  # the parsed register's copy is not kept either
        assert all(a is b for a, b in zip(session.packs, first.packs, strict=True))
