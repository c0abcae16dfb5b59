"""Agent records: round trip through SQLite, updates, tags, deletion and revocation."""

from __future__ import annotations

import pytest
from sqlite_utils import Database

from sonde.hub.agent_records import (
    AgentNameTaken,
    AgentRecord,
    delete_agent,
    find_agent_by_name,
    get_agent,
    insert_agent,
    list_agents,
    normalize_tags,
    revocation_reason,
    set_tags,
    update_agent,
)

T0 = 1_700_000_000.0


def make_agent(name: str, **fields: object) -> AgentRecord:
    return AgentRecord.model_validate({"name": name, "public_key": "k" * 43, "enrolled_at": T0, **fields})


def test_round_trip(db: Database) -> None:
    record = make_agent(
        "web-1",
        hostname="web-1.example",
        os="linux",
        packs=[{"name": "system", "version": "1.0"}],
        tags=["prod"],
        attestation={"code_hash": "abc", "packs": ["system"]},
    )
    insert_agent(db, record)
    assert get_agent(db, record.id) == record
    assert find_agent_by_name(db, "web-1") == record
    assert record.status == "offline"
    assert record.last_seen is None
    assert record.pending_attestation is None
    stored = db.execute("SELECT pack_sets.packs, tags FROM agents JOIN pack_sets ON pack_set = pack_sets.id")
    assert stored.fetchone() == ('[{"name": "system", "version": "1.0"}]', '["prod"]')


def test_list_is_by_name_and_unknown_is_none(db: Database) -> None:
    for name in ("zeta", "alpha", "mid"):
        insert_agent(db, make_agent(name))
    assert [agent.name for agent in list_agents(db)] == ["alpha", "mid", "zeta"]
    assert get_agent(db, "nope") is None
    assert find_agent_by_name(db, "nope") is None


def test_name_is_unique(db: Database) -> None:
    insert_agent(db, make_agent("web-1"))
    with pytest.raises(AgentNameTaken, match="'web-1' is already enrolled"):
        insert_agent(db, make_agent("web-1"))
    assert len(list_agents(db)) == 1


def test_update_agent(db: Database) -> None:
    record = make_agent("web-1")
    insert_agent(db, record)
    updated = update_agent(
        db, record.id, status="online", last_seen=T0 + 30, pending_attestation={"code_hash": "new"}
    )
    assert updated is not None
    assert updated.status == "online"
    assert get_agent(db, record.id) == updated
    assert updated.pending_attestation == {"code_hash": "new"}
    assert update_agent(db, "unknown-id", status="online") is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"colour": "red"}, "unknown agent field"),
        ({"id": "other"}, "unknown agent field"),
        ({"status": "asleep"}, "status"),
        ({"tags": ["bad tag"]}, "tags"),
    ],
)
def test_update_agent_refuses(db: Database, fields: dict[str, object], message: str) -> None:
    record = make_agent("web-1")
    insert_agent(db, record)
    with pytest.raises(ValueError, match=message):
        update_agent(db, record.id, **fields)
    assert get_agent(db, record.id) == record


def test_rename_onto_a_taken_name(db: Database) -> None:
    first, second = make_agent("web-1"), make_agent("web-2")
    insert_agent(db, first)
    insert_agent(db, second)
    with pytest.raises(AgentNameTaken):
        update_agent(db, second.id, name="web-1")
    renamed = update_agent(db, second.id, name="web-3")
    assert renamed is not None
    assert renamed.name == "web-3"


def test_set_tags_normalises(db: Database) -> None:
    record = make_agent("web-1")
    insert_agent(db, record)
    updated = set_tags(db, record.id, [" #web ", "Prod", "web", "#db:primary", "Prod", "v1.2_x-y"])
    assert updated is not None
    assert updated.tags == ["web", "Prod", "db:primary", "v1.2_x-y"]
    assert get_agent(db, record.id) == updated
    assert set_tags(db, "unknown-id", ["web"]) is None


@pytest.mark.parametrize("tags", [["bad tag"], ["#"], [""], ["-leading"], ["x" * 65], ["ok", "no/slash"]])
def test_set_tags_refuses(db: Database, tags: list[str]) -> None:
    record = make_agent("web-1", tags=["keep"])
    insert_agent(db, record)
    with pytest.raises(ValueError, match="invalid tag"):
        set_tags(db, record.id, tags)
    assert get_agent(db, record.id) == record


def test_too_many_tags() -> None:
    with pytest.raises(ValueError, match="at most 64 tags"):
        normalize_tags([f"t{i}" for i in range(65)])


def test_delete_agent_revokes_it(db: Database) -> None:
    record = make_agent("web-1")
    insert_agent(db, record)
    assert revocation_reason(db, record.id) is None
    assert delete_agent(db, record.id, now=T0 + 5) == record
    assert get_agent(db, record.id) is None
    assert revocation_reason(db, record.id) == "this agent was removed by an admin"
    assert db.execute("SELECT name, revoked_at FROM revoked_agents").fetchone() == ("web-1", T0 + 5)
    assert delete_agent(db, record.id) is None
    # the name is free again for a new enrollment, which the old identity is then told of
    insert_agent(db, make_agent("web-1"))
    assert revocation_reason(db, record.id) == "the name web-1 was enrolled again, by a new identity"
