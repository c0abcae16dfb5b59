"""A connecting agent's record is re-read from the database, but kept once in memory.

`current_record` reads the record through the writer on every connect (the CLI may have
changed the file). Keeping that fresh copy even when nothing had changed replaced every
record the hub loaded at start with a second one: 9 KiB more hub RSS per connected agent
(69.6 against 78.4 KiB at 5,000 agents, the benchmark's scale scenario).
"""

from __future__ import annotations

from pathlib import Path

from sonde.hub.agent_records import insert_agent, update_agent
from sonde.hub.agent_socket import current_record
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.db import open_database
from tests.hub.test_agent_records import make_agent


async def test_an_unchanged_record_is_the_one_in_memory_and_a_changed_one_replaces_it(tmp_path: Path) -> None:
    db = open_database(tmp_path / "sonde.db")
    try:
        agent = make_agent("web-1", tags=["prod"], attestation={"codeHash": "sha256:a"})
        insert_agent(db, agent)
    finally:
        db.close()
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        loaded = hub.fleet.records[agent.id]
        assert await current_record(hub, loaded) is loaded
        assert hub.fleet.records[agent.id] is loaded
        await hub.store.write(update_agent, agent.id, tags=["prod", "db"])  # as the CLI would
        fresh = await current_record(hub, loaded)
        assert set(fresh.tags) == {"db", "prod"}
        assert hub.fleet.records[agent.id] is fresh
