"""The audit log: an append-only SHA-256 hash chain in the ``audit`` table.

Each row's ``hash`` is ``sha256(prev_hash + "\\n" + canonical JSON of the row)``, where the
row is ``{seq, ts, actor, action, target, outcome, duration_ms, detail}`` dumped with
sorted keys and compact separators; the first row chains from 64 zeros. The stored
``detail`` is the canonical dump of the detail, the very text the hash covers: a detail
that only parses to the same value (a duplicate key, other spacing) is an edit. Editing a
row breaks its own hash, deleting one breaks the next row's ``prev_hash`` (and leaves a seq
gap). Rows alone cannot show a deleted tail, so every append also records the chain head
``{"seq", "hash"}`` in the meta table (``audit_head``), and new rows chain from that head:
a truncated tail stays visible even after later appends (and SQLite's own sequence of the
table shows rows deleted together with the head).

Pruning (`sonde.hub.audit_prune`) records the last pruned row's ``{"seq", "hash"}`` as the
chain's anchor (``audit_anchor``); the chain is checked from there, and the prune is
itself an entry on the chain: an anchor with no prune entry naming it means rows were cut
from the start. Rows at or before the anchor are ones a prune has yet to delete.

The chain has no secret: it shows changes made by anything that does not recompute the
hashes, not by someone who can write the database and does.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from sqlite_utils import Database

from sonde.echo import without_secrets
from sonde.hub.db import get_meta, query_one, set_meta, write_transaction
from sonde.protocol.jsontext import each_string

GENESIS_HASH = "0" * 64
AUDIT_HEAD_KEY = "audit_head"
AUDIT_ANCHOR_KEY = "audit_anchor"
PRUNE_ACTION = "cli.audit.prune"
_HASHED_FIELDS = ("seq", "ts", "actor", "action", "target", "outcome", "duration_ms", "detail")
# What a caller's request can put in a row is cut to these, so one call cannot write
# megabytes to the log (an MCP body may be 4 MiB): the target's characters, and each
# detail value's JSON bytes (a bigger one is replaced by a note of its size).
MAX_TARGET_CHARS = 200
MAX_DETAIL_VALUE_BYTES = 4096


def bounded_target(target: str | None) -> str | None:
    """``target`` as a row keeps it: a Sonde secret in it (a key pasted into a path or where an
    id was due) never recorded (`without_secrets`), and cut to `MAX_TARGET_CHARS`."""
    if target is None:
        return None
    target = without_secrets(target)
    if len(target) <= MAX_TARGET_CHARS:
        return target
    return target[:MAX_TARGET_CHARS] + "..."


def bounded_detail(detail: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``detail`` with each Sonde secret in it never recorded (`without_secrets`: a key pasted
    into a description, a probe's parameter, a tag) and each value over
    `MAX_DETAIL_VALUE_BYTES` of JSON replaced by a note of its size."""
    kept: dict[str, JsonValue] = {}
    for key, value in detail.items():
        value = each_string(value, without_secrets)
        if isinstance(value, (dict, list, str)):
            size = len(json.dumps(value, ensure_ascii=False).encode())
            if size > MAX_DETAIL_VALUE_BYTES:
                value = {
                    "omitted": f"{size} bytes of JSON, over the {MAX_DETAIL_VALUE_BYTES} an audit row keeps"
                }
        kept[without_secrets(key)] = value
    return kept


class AuditEntry(BaseModel):
    """One thing that happened: who (actor), what (action), where (target), how it ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actor: str = Field(min_length=1)
    action: str = Field(min_length=1)
    target: str | None = None
    outcome: str = Field(min_length=1)
    duration_ms: float | None = None
    detail: dict[str, JsonValue] = Field(default_factory=dict)
    ts: float = Field(default_factory=time.time)


def audit_entry(
    actor: str,
    action: str,
    target: str | None,
    outcome: str,
    *,
    duration_ms: float | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """An entry made now, its target and detail cut to the bounds the hub keeps (`bounded_target`,
    `bounded_detail`): they may hold what a caller sent."""
    return AuditEntry(
        actor=actor,
        action=action,
        target=bounded_target(target),
        outcome=outcome,
        duration_ms=duration_ms,
        detail=bounded_detail(detail) if detail else {},
        ts=time.time(),
    )


class AuditVerification(BaseModel):
    """The result of checking the chain; ``problem`` is empty when ``ok``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    rows: int
    first_bad_seq: int | None = None
    problem: str = ""
    starts_after: int = 0  # the last pruned row (0: nothing was pruned)
    awaiting_deletion: int = 0  # rows up to ``starts_after`` an interrupted prune left (not in ``rows``)


def canonical_json(value: Any) -> str:
    """The JSON every row's detail is hashed and stored as: sorted keys, compact separators."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _chain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256(f"{prev_hash}\n{canonical_json(fields)}".encode()).hexdigest()


def _read_mark(db: Database, key: str) -> tuple[int, str] | None:
    """A ``{"seq", "hash"}`` recorded in the meta table (the head, the anchor), or None."""
    recorded = get_meta(db, key)
    if recorded is None:
        return None
    mark = json.loads(recorded)
    return int(mark["seq"]), str(mark["hash"])


def _read_head(db: Database) -> tuple[int, str]:
    """The (seq, hash) new rows chain from: the recorded head, else the last row, else genesis."""
    head = _read_mark(db, AUDIT_HEAD_KEY)
    if head is not None:
        return head
    row = query_one(db, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
    return (0, GENESIS_HASH) if row is None else (row["seq"], row["hash"])


def _insert(db: Database, entry: AuditEntry, seq: int, prev_hash: str) -> str:
    fields = {"seq": seq, **entry.model_dump()}
    digest = _chain_hash(prev_hash, fields)
    db.execute(
        "INSERT INTO audit (seq, ts, actor, action, target, outcome, duration_ms, detail, prev_hash, hash) "
        "VALUES (:seq, :ts, :actor, :action, :target, :outcome, :duration_ms, :detail, :prev_hash, :hash)",
        {**fields, "detail": canonical_json(entry.detail), "prev_hash": prev_hash, "hash": digest},
    )
    return digest


def append_many(db: Database, entries: Iterable[AuditEntry]) -> list[int]:
    """Append entries in order, in one transaction; returns their seqs.

    Raises ValueError if a detail cannot be encoded as JSON (NaN, infinity).
    """
    with write_transaction(db):
        return _append(db, entries)


def _append(db: Database, entries: Iterable[AuditEntry]) -> list[int]:
    seqs: list[int] = []
    seq, digest = _read_head(db)
    for entry in entries:
        seq += 1
        digest = _insert(db, entry, seq, digest)
        seqs.append(seq)
    if seqs:
        set_meta(db, AUDIT_HEAD_KEY, canonical_json({"seq": seq, "hash": digest}))
    return seqs


def append_audit(db: Database, entry: AuditEntry) -> int:
    """Append one entry to the chain; returns its seq."""
    return append_many(db, [entry])[0]


def record_entry(
    db: Database, actor: str, action: str, target: str | None, outcome: str = "ok", **detail: JsonValue
) -> int:
    """Put one action on the chain now (in the caller's transaction, if one is open), its target
    and detail cut to the bounds the hub keeps: they may hold what was typed."""
    return append_audit(db, audit_entry(actor, action, target, outcome, detail=detail))


def verify_audit(db: Database) -> AuditVerification:
    """Recompute the whole chain in order; reports the first edited, missing or cut row.

    Reads one consistent snapshot, so appends running meanwhile do not look like damage.
    """
    with db.atomic():
        return check_chain(db)[0]


def check_chain(
    db: Database, progress: Callable[[int], None] | None = None, progress_rows: int = 10_000
) -> tuple[AuditVerification, ChainWalk]:
    """Check the chain, in the caller's transaction: the verdict, and how far the rows verified.
    ``progress`` is told how many rows were checked, every ``progress_rows`` rows."""
    anchor_seq, anchor_hash = read_anchor(db)
    walk = walk_chain(db, anchor_seq, anchor_hash, progress=progress, progress_rows=progress_rows)
    found = AuditVerification(
        ok=True, rows=walk.rows, starts_after=anchor_seq, awaiting_deletion=walk.awaiting_deletion
    )
    if walk.problem is not None:
        return _broken(found, *walk.problem), walk
    if anchor_seq and anchor_seq not in walk.prunes:
        unrecorded = f"the log starts after row {anchor_seq}, but no prune through that row is on record"
        return _broken(found, anchor_seq, unrecorded), walk
    problem = head_problem(db, walk)
    return (found if problem is None else _broken(found, *problem)), walk


def _broken(found: AuditVerification, first_bad_seq: int | None, problem: str) -> AuditVerification:
    return found.model_copy(update={"ok": False, "first_bad_seq": first_bad_seq, "problem": problem})


def read_anchor(db: Database) -> tuple[int, str]:
    """The (seq, hash) the remaining rows chain from: the last pruned row, else genesis."""
    return _read_mark(db, AUDIT_ANCHOR_KEY) or (0, GENESIS_HASH)


def set_anchor(db: Database, seq: int, digest: str) -> None:
    """Record row ``seq`` (its hash ``digest``) as the last pruned row, which the rest chain from."""
    set_meta(db, AUDIT_ANCHOR_KEY, canonical_json({"seq": seq, "hash": digest}))


@dataclass
class ChainWalk:
    """What `walk_chain` found: the rows that verified, up to the first problem."""

    last_seq: int  # the last row that verified (the anchor's, when none did)
    last_hash: str
    rows: int = 0  # rows after the anchor that verified
    awaiting_deletion: int = 0  # rows at or before the anchor: a prune that did not finish
    prunes: set[int] = field(default_factory=set)  # the ``through_seq`` of each prune entry that verified
    problem: tuple[int, str] | None = None  # (first bad seq, what is wrong)


def walk_chain(
    db: Database,
    anchor_seq: int,
    anchor_hash: str,
    after_seq: int = 0,
    progress: Callable[[int], None] | None = None,
    progress_rows: int = 10_000,
) -> ChainWalk:
    """Check the rows after ``after_seq`` in order, chaining from the anchor; stops at the first problem.

    Rows at or before the anchor are those a prune has yet to delete (it deletes in batches,
    oldest first): they must chain to each other and end at the anchor's hash. With
    ``after_seq`` (a row already checked, given as the anchor) only the rows after it are read.
    """
    walk = ChainWalk(last_seq=anchor_seq, last_hash=anchor_hash)
    columns = (*_HASHED_FIELDS, "prev_hash", "hash")
    query = f"SELECT {', '.join(columns)} FROM audit WHERE seq > ? ORDER BY seq"
    cursor = db.conn.execute(query, [after_seq])
    try:
        for values in cursor:
            row = dict(zip(columns, values, strict=True))
            checked = walk.rows + walk.awaiting_deletion
            if checked == 0 and row["seq"] <= anchor_seq:  # the rows before it are deleted already
                walk.last_seq, walk.last_hash = row["seq"] - 1, row["prev_hash"]
            walk.problem = _check_row(row, walk, anchor_seq, anchor_hash)
            if walk.problem is not None:
                break
            if progress is not None and (checked + 1) % progress_rows == 0:
                progress(checked + 1)
    finally:
        cursor.close()
    return walk


def _check_row(
    row: dict[str, Any], walk: ChainWalk, anchor_seq: int, anchor_hash: str
) -> tuple[int, str] | None:
    """The problem with ``row`` as the next after ``walk``'s last, or None (and ``walk`` takes it in)."""
    seq, prev_seq = row["seq"], walk.last_seq
    if seq != prev_seq + 1:
        return prev_seq + 1, f"row {prev_seq + 1} is missing: row {seq} follows row {prev_seq}"
    if row["prev_hash"] != walk.last_hash:
        return seq, f"row {seq} does not chain to row {prev_seq}: a row was removed or rewritten"
    detail = _hashed_detail(row, walk.last_hash)
    if detail is None:
        return seq, f"row {seq} does not match its hash: it was edited"
    if seq == anchor_seq and row["hash"] != anchor_hash:
        return seq, f"row {seq} is not the row the last prune cut through: it was rewritten"
    if seq <= anchor_seq:
        walk.awaiting_deletion += 1
    else:
        walk.rows += 1
    if row["action"] == PRUNE_ACTION and isinstance(detail.get("through_seq"), int):
        walk.prunes.add(detail["through_seq"])
    walk.last_seq, walk.last_hash = seq, row["hash"]
    return None


def _hashed_detail(row: dict[str, Any], prev_hash: str) -> dict[str, Any] | None:
    """The row's detail when the row is what its hash was made over, else None.

    The stored detail must be the very text that was hashed (the canonical dump of the
    detail, as every row has been written): text that only parses to it (a duplicate key,
    another spacing or escape) is an edit, and would let a reader see what was not hashed.
    """
    try:
        detail = json.loads(row["detail"])
        if not isinstance(detail, dict) or canonical_json(detail) != row["detail"]:
            return None
        digest = _chain_hash(prev_hash, {**{name: row[name] for name in _HASHED_FIELDS}, "detail": detail})
    except (TypeError, ValueError):  # detail no longer JSON (or NULL), or a NaN slipped in
        return None
    return detail if digest == row["hash"] else None


def head_problem(db: Database, walk: ChainWalk) -> tuple[int | None, str] | None:
    """What is wrong with the end of the log (the recorded head, SQLite's own count), or None."""
    written = highest_seq_written(db)
    head = _read_mark(db, AUDIT_HEAD_KEY)
    if head is None:
        if walk.rows or walk.awaiting_deletion:
            return None, "the recorded chain head is missing"
        if written > walk.last_seq:
            return walk.last_seq + 1, (
                f"the log is empty and its recorded head is missing, but rows up to {written} were "
                "written (SQLite's sequence of the audit table): they were deleted"
            )
        return None
    head_seq, head_hash = head
    if head_seq > walk.last_seq:
        return walk.last_seq + 1, (
            f"the log was truncated: it ends at row {walk.last_seq} but the head is row {head_seq}"
        )
    if head_seq != walk.last_seq or head_hash != walk.last_hash:
        return walk.last_seq, (
            f"the last row {walk.last_seq} does not match the recorded chain head (row {head_seq})"
        )
    if written > head_seq:
        return head_seq + 1, (
            f"the log was truncated: it ends at row {head_seq} but rows up to {written} were written "
            "(SQLite's sequence of the audit table), and its head was rewritten"
        )
    return None


def highest_seq_written(db: Database) -> int:
    """The highest seq the audit table ever held (SQLite keeps it for AUTOINCREMENT), 0 if none."""
    row = query_one(db, "SELECT seq FROM sqlite_sequence WHERE name = 'audit'")
    return 0 if row is None else int(row["seq"])
