"""The audit hash chain: appends verify; edits, holes and truncation are caught."""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlite_utils import Database

from sonde.hub.audit import (
    GENESIS_HASH,
    AuditEntry,
    append_audit,
    append_many,
    verify_audit,
)
from sonde.hub.audit_query import query_audit

T0 = 1_700_000_000.0


def entry(i: int, **fields: object) -> AuditEntry:
    values: dict[str, object] = {
        "actor": "key:alice",
        "action": "probe.system.cpu",
        "target": "web-1",
        "outcome": "ok",
        "duration_ms": 12.5,
        "detail": {"i": i},
        "ts": T0 + i,
    }
    return AuditEntry.model_validate({**values, **fields})


def fill(db: Database, count: int = 100) -> None:
    for i in range(count):
        append_audit(db, entry(i))


def test_chain_of_100_verifies(db: Database) -> None:
    fill(db)
    result = verify_audit(db)
    assert result.ok, result.problem
    assert result.rows == 100
    assert result.first_bad_seq is None


def test_empty_log_verifies(db: Database) -> None:
    assert verify_audit(db).ok


def test_hash_format_is_pinned(db: Database) -> None:
    seq = append_audit(db, entry(0, detail={"b": 1, "a": [1, 2]}))
    row = db.execute("SELECT prev_hash, hash FROM audit WHERE seq = ?", [seq]).fetchone()
    body = {
        "seq": 1,
        "ts": T0,
        "actor": "key:alice",
        "action": "probe.system.cpu",
        "target": "web-1",
        "outcome": "ok",
        "duration_ms": 12.5,
        "detail": {"a": [1, 2], "b": 1},
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert row[0] == GENESIS_HASH == "0" * 64
    assert row[1] == hashlib.sha256(f"{GENESIS_HASH}\n{canonical}".encode()).hexdigest()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE audit SET detail = '{\"i\":999}' WHERE seq = 42",
        "UPDATE audit SET outcome = 'denied' WHERE seq = 42",
        "UPDATE audit SET ts = ts + 1 WHERE seq = 42",
        "UPDATE audit SET detail = 'not json' WHERE seq = 42",
    ],
)
def test_edited_row_is_detected(db: Database, edit: str) -> None:
    fill(db)
    db.execute(edit)
    result = verify_audit(db)
    assert not result.ok
    assert result.first_bad_seq == 42
    assert "edited" in result.problem
    assert result.rows == 41


def test_rewritten_hash_is_caught_by_the_next_row(db: Database) -> None:
    fill(db, 10)
    db.execute("UPDATE audit SET outcome = 'denied', hash = ? WHERE seq = 5", ["f" * 64])
    result = verify_audit(db)
    assert not result.ok
    assert result.first_bad_seq == 5


def test_deleted_middle_row_is_detected(db: Database) -> None:
    fill(db)
    db.execute("DELETE FROM audit WHERE seq = 50")
    result = verify_audit(db)
    assert not result.ok
    assert result.first_bad_seq == 50
    assert "row 50 is missing" in result.problem


def test_deleted_first_row_is_detected(db: Database) -> None:
    fill(db, 5)
    db.execute("DELETE FROM audit WHERE seq = 1")
    result = verify_audit(db)
    assert not result.ok
    assert result.first_bad_seq == 1


def test_deleted_tail_is_detected_even_after_more_appends(db: Database) -> None:
    fill(db)
    db.execute("DELETE FROM audit WHERE seq >= 99")
    result = verify_audit(db)
    assert not result.ok
    assert result.first_bad_seq == 99
    assert "truncated" in result.problem
    append_audit(db, entry(200))
    later = verify_audit(db)
    assert not later.ok
    assert later.first_bad_seq == 99


def test_append_many_is_one_chain(db: Database) -> None:
    assert append_audit(db, entry(0)) == 1
    assert append_many(db, [entry(i) for i in range(1, 6)]) == [2, 3, 4, 5, 6]
    assert append_many(db, []) == []
    assert verify_audit(db).rows == 6


def test_detail_must_be_json(db: Database) -> None:
    with pytest.raises(ValueError, match="JSON"):
        append_audit(db, entry(0, detail={"x": float("nan")}))
    assert verify_audit(db).rows == 0


def test_query_filters(db: Database) -> None:
    append_many(
        db,
        [
            entry(0, actor="key:alice", action="probe.system.cpu", target="web-1"),
            entry(1, actor="key:bob", action="probe.system.disk", target="web-2"),
            entry(2, actor="key:alice", action="tool.list_agents", target=None),
            entry(3, actor="key:bob", action="probe.system.cpu", target="web-1"),
        ],
    )
    assert [row["seq"] for row in query_audit(db)] == [4, 3, 2, 1]
    assert [row["seq"] for row in query_audit(db, agent="web-1")] == [4, 1]
    assert [row["seq"] for row in query_audit(db, actor="key:alice")] == [3, 1]
    assert [row["seq"] for row in query_audit(db, action_prefix="probe.")] == [4, 2, 1]
    assert [row["seq"] for row in query_audit(db, since=T0 + 1, until=T0 + 3)] == [3, 2]
    assert [row["seq"] for row in query_audit(db, actor="key:bob", agent="web-1")] == [4]
    assert [row["seq"] for row in query_audit(db, limit=2)] == [4, 3]
    first = query_audit(db, limit=1)[0]
    assert first["detail"] == {"i": 3}
    assert set(first) == {
        "seq",
        "ts",
        "actor",
        "action",
        "target",
        "outcome",
        "duration_ms",
        "detail",
        "hash",
    }


@pytest.mark.parametrize("limit", [0, 1001])
def test_query_limit_bounds(db: Database, limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        query_audit(db, limit=limit)
