"""What verification ties a row to: the stored text is what was hashed, the prune record is
read as verification reads it, and an emptied log shows when SQLite remembers its rows.

Before, the detail was parsed before hashing (``json.loads``: the last of two equal keys
wins) while the prune record was found with SQLite's ``json_extract`` (the first wins): a
duplicate ``through_seq`` put in front of a prune entry let 100 more rows be cut with the
chain still "intact", and a detail reading ``{"name":"evil","name":"web-1"}`` verified.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub.audit import (
    AUDIT_ANCHOR_KEY,
    AUDIT_HEAD_KEY,
    GENESIS_HASH,
    PRUNE_ACTION,
    AuditEntry,
    append_many,
    verify_audit,
)
from sonde.hub.audit_prune import prune_audit
from sonde.hub.db import get_meta, set_meta
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any

DAY = 86400.0
NOW = time.time()


def named(name: str, ts: float = NOW) -> AuditEntry:
    return AuditEntry(
        actor="cli", action="cli.token.revoke", target="t1", outcome="ok", detail={"name": name}, ts=ts
    )


def test_a_row_as_sonde_has_always_written_it_verifies(db: Database) -> None:
    """The stored detail is the canonical dump the hash covers: rows made before stay verifiable."""
    detail = {"zeta": [1, 2.5, None], "name": "wéb-1 \u2603", "nested": {"b": True, "a": "x"}}
    fields = {"seq": 1, "ts": 1_700_000_000.25, "actor": "key:ops", "action": "mcp.call",
              "target": None, "outcome": "ok", "duration_ms": None, "detail": detail}  # fmt: skip
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{GENESIS_HASH}\n{canonical}".encode()).hexdigest()
    stored = json.dumps(detail, sort_keys=True, separators=(",", ":"))
    db.execute(
        "INSERT INTO audit (seq, ts, actor, action, target, outcome, duration_ms, detail, prev_hash, hash) "
        "VALUES (1, 1700000000.25, 'key:ops', 'mcp.call', NULL, 'ok', NULL, ?, ?, ?)",
        [stored, GENESIS_HASH, digest],
    )
    set_meta(db, AUDIT_HEAD_KEY, json.dumps({"seq": 1, "hash": digest}))
    append_many(db, [named("web-1")])
    report = verify_audit(db)
    assert report.ok, report.problem
    assert report.rows == 2


@pytest.mark.parametrize(
    "stored",
    [
        '{"name":"evil","name":"web-1"}',  # a reader sees "evil" first; json.loads keeps "web-1"
        '{"name":"web-1","name":"web-1"}',
        '{"name": "web-1"}',
        '{"name":"web\\u002d1"}',
        ' {"name":"web-1"}',
    ],
)
def test_a_detail_that_only_parses_to_what_was_hashed_is_an_edit(db: Database, stored: str) -> None:
    append_many(db, [named("web-1") for _ in range(3)])
    assert db.execute("SELECT detail FROM audit WHERE seq = 2").fetchone()[0] == '{"name":"web-1"}'
    db.execute("UPDATE audit SET detail = ? WHERE seq = 2", [stored])
    report = verify_audit(db)
    assert not report.ok
    assert report.first_bad_seq == 2
    assert "edited" in report.problem


def test_a_prune_record_with_a_second_through_seq_does_not_cover_a_longer_cut(db: Database) -> None:
    append_many(db, [named(f"n{i}", NOW - 200 * DAY) for i in range(50)])
    append_many(db, [named(f"m{i}") for i in range(150)])
    prune_audit(db, NOW - 100 * DAY)
    assert verify_audit(db).ok
    seq, detail = db.execute("SELECT seq, detail FROM audit WHERE action = ?", [PRUNE_ACTION]).fetchone()
    cut_to = 50 + 100
    cut_hash = db.execute("SELECT hash FROM audit WHERE seq = ?", [cut_to]).fetchone()[0]
    forged = f'{{"through_seq":{cut_to},' + detail[1:]  # SQLite's json_extract reads this one
    db.execute("UPDATE audit SET detail = ? WHERE seq = ?", [forged, seq])
    db.execute("DELETE FROM audit WHERE seq <= ?", [cut_to])
    set_meta(db, AUDIT_ANCHOR_KEY, json.dumps({"seq": cut_to, "hash": cut_hash}))
    report = verify_audit(db)
    assert not report.ok
    assert report.first_bad_seq == seq


def verify_cli(tmp_path: Path) -> tuple[int, str]:
    argv = [*SONDE, "hub", "audit", "verify", "--data-dir", str(tmp_path)]
    done = run_any(argv, env=base_env(tmp_path / "home"), timeout=60)
    return done.returncode, done.stderr


def test_every_row_deleted_with_the_head_shows_while_sqlite_remembers_them(
    tmp_path: Path, db: Database
) -> None:
    append_many(db, [named(f"n{i}") for i in range(14)])
    db.execute("DELETE FROM audit")
    db.execute("DELETE FROM meta WHERE key = ?", [AUDIT_HEAD_KEY])
    report = verify_audit(db)
    assert not report.ok
    assert "rows up to 14 were written" in report.problem
    assert verify_cli(tmp_path)[0] == 1

    db.execute("DELETE FROM sqlite_sequence WHERE name = 'audit'")  # every trace: the chain cannot tell
    assert verify_audit(db).ok
    code, said = verify_cli(tmp_path)
    assert code == 0
    assert "the log is empty" in said
    assert "the chain has no secret key, so whoever can write the database could also have removed" in said


def test_a_cut_tail_with_its_head_rewritten_shows_while_sqlite_remembers_it(db: Database) -> None:
    append_many(db, [named(f"n{i}") for i in range(10)])
    seq, digest = db.execute("SELECT seq, hash FROM audit WHERE seq = 7").fetchone()
    db.execute("DELETE FROM audit WHERE seq > 7")
    set_meta(db, AUDIT_HEAD_KEY, json.dumps({"seq": seq, "hash": digest}))
    report = verify_audit(db)
    assert not report.ok
    assert report.first_bad_seq == 8
    assert "rows up to 10 were written" in report.problem
    assert get_meta(db, AUDIT_ANCHOR_KEY) is None
