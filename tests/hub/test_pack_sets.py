"""Each set of pack descriptions is stored once, and agents' rows name theirs.

An agent's packs (some 70 KB with the built-in packs) were in its row of ``agents``, and
SQLite rewrites a whole row on every update: each status change and the minute's last-seen
write rewrote them all (564 ms for that write with 2,000 such agents, 4 ms without), and
every agent stored the same text again. A real file, migrated from version 2 and written
through the same functions as the hub's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub import db as hub_db
from sonde.hub import pack_sets, shared_packs
from sonde.hub.agent_records import delete_agent, insert_agent, list_agents, record_last_seen, update_agent
from sonde.hub.db import open_database, schema_version
from tests.hub.test_agent_records import make_agent

SYSTEM = {"name": "system", "version": "1.0", "probes": [{"name": "system.memory.usage", "paramsSchema": {}}]}
DOCKER = {
    "name": "docker",
    "version": "2.0",
    "probes": [{"name": "docker.container.list", "paramsSchema": {}}],
}


def stored_sets(db: Database) -> list[list[str]]:
    """Each stored set, as its packs' names."""
    return sorted(
        [pack["name"] for pack in json.loads(text)] for (text,) in db.execute("SELECT packs FROM pack_sets")
    )


def test_a_set_is_stored_once_and_goes_with_the_last_agent_naming_it(db: Database) -> None:
    web_1, web_2, db_1 = (
        make_agent(n, packs=p)
        for n, p in [("web-1", [SYSTEM, DOCKER]), ("web-2", [SYSTEM, DOCKER]), ("db-1", [SYSTEM])]
    )
    for record in (web_1, web_2, db_1):
        insert_agent(db, record)
    assert stored_sets(db) == [["system"], ["system", "docker"]]
    # a row holds the set's id, not its text: updating the row does not rewrite the packs
    assert {length for (length,) in db.execute("SELECT length(pack_set) FROM agents")} == {64}
    record_last_seen(db, {web_1.id: 5.0, web_2.id: 5.0, db_1.id: 5.0})
    update_agent(db, web_1.id, packs=[SYSTEM])  # web-2 still names the pair
    assert stored_sets(db) == [["system"], ["system", "docker"]]
    update_agent(db, web_2.id, packs=[DOCKER])  # no one names the pair now
    assert stored_sets(db) == [["docker"], ["system"]]
    delete_agent(db, web_2.id)
    assert stored_sets(db) == [["system"]]
    assert [(r.name, r.packs) for r in list_agents(db)] == [("db-1", [SYSTEM]), ("web-1", [SYSTEM])]


def test_a_version_2_file_moves_its_agents_packs_to_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sonde.db"
    with monkeypatch.context() as patched:  # the file as the hub before left it
        patched.setattr(hub_db, "MIGRATIONS", hub_db.MIGRATIONS[:2])
        patched.setattr(hub_db, "SCHEMA_VERSION", 2)
        old = open_database(path)
        for name, packs in [("web-1", [SYSTEM, DOCKER]), ("web-2", [SYSTEM, DOCKER]), ("db-1", [SYSTEM])]:
            old.execute(
                "INSERT INTO agents (id, name, public_key, packs, enrolled_at) VALUES (?, ?, ?, ?, ?)",
                [f"id-{name}", name, "k" * 43, json.dumps(packs, sort_keys=True), 1.0],
            )
        old.close()
    db = open_database(path)
    try:
        assert schema_version(db) == 3
        assert "packs" not in db.table("agents").columns_dict
        assert stored_sets(db) == [["system"], ["system", "docker"]]
        records = list_agents(db)
        assert [(r.name, r.packs) for r in records] == [
            ("db-1", [SYSTEM]),
            ("web-1", [SYSTEM, DOCKER]),
            ("web-2", [SYSTEM, DOCKER]),
        ]
        assert records[1].packs[0] is records[2].packs[0] is records[0].packs[0]
    finally:
        db.close()


def test_a_shared_set_is_encoded_once_however_many_agents_store_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet enrolling, or reconnecting after an upgrade, with one new set: each agent's
    store of it was a 57 KB encode (0.4 ms) of the same shared descriptions."""
    shared_packs.forget_recent_sets()
    insert_agent(db, make_agent("web-1", packs=[SYSTEM, DOCKER]))
    [first] = list_agents(db)  # its packs as the hub holds them: shared descriptions
    encodes: list[int] = []
    encode = shared_packs.packs_text

    def counted(packs: list[object]) -> str:
        encodes.append(len(packs))
        return encode(packs)

    monkeypatch.setattr(shared_packs, "packs_text", counted)
    monkeypatch.setattr(pack_sets, "packs_text", counted)
    for n in range(2, 6):
        insert_agent(db, make_agent(f"web-{n}", packs=list(first.packs)))
    assert encodes == [2]
    assert stored_sets(db) == [["system", "docker"]]
    for record in list_agents(db):  # the last agents naming it go: the set with them
        delete_agent(db, record.id)
    assert stored_sets(db) == []
    insert_agent(db, make_agent("web-9", packs=list(first.packs)))  # remembered, yet stored again
    assert encodes == [2, 2]
    assert stored_sets(db) == [["system", "docker"]]
    assert [(r.name, r.packs) for r in list_agents(db)] == [("web-9", [SYSTEM, DOCKER])]
