"""The audit log: an append-only SHA-256 hash chain in the ``audit`` table.

Each row's ``hash`` is ``sha256(prev_hash + "\\n" + canonical JSON of the row)``, where the
row is ``{seq, ts, actor, action, target, outcome, duration_ms, detail}`` dumped with
sorted keys and compact separators; the first row chains from 64 zeros. Editing a row
breaks its own hash, deleting one breaks the next row's ``prev_hash`` (and leaves a seq
gap). Rows alone cannot show a deleted tail, so every append also records the chain head
``{"seq", "hash"}`` in the meta table (``audit_head``), and new rows chain from that head:
a truncated tail stays visible even after later appends.

`prune_audit` deletes the oldest rows without breaking that: it records the last
deleted row's ``{"seq", "hash"}`` as the chain's anchor (``audit_anchor``), the
chain is checked from there, and the prune is itself an entry on the chain: an
anchor with no prune entry naming it means rows were cut from the start.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from sqlite_utils import Database

from sonde.hub.db import get_meta, query_one, set_meta, write_transaction

GENESIS_HASH = "0" * 64
AUDIT_HEAD_KEY = "audit_head"
AUDIT_ANCHOR_KEY = "audit_anchor"
PRUNE_ACTION = "cli.audit.prune"
MAX_QUERY_LIMIT = 1000
_HASHED_FIELDS = ("seq", "ts", "actor", "action", "target", "outcome", "duration_ms", "detail")
_QUERY_COLUMNS = "seq, ts, actor, action, target, outcome, duration_ms, detail, hash"
_CONTAINS_CLAUSE = (  # a literal, case-sensitive text in any text column
    "(instr(actor, ?) > 0 OR instr(action, ?) > 0 OR instr(coalesce(target, ''), ?) > 0"
    " OR instr(outcome, ?) > 0 OR instr(coalesce(detail, ''), ?) > 0)"
)


# What a caller's request can put in a row is cut to these, so one call cannot write
# megabytes to the log (an MCP body may be 4 MiB): the target's characters, and each
# detail value's JSON bytes (a bigger one is replaced by a note of its size).
MAX_TARGET_CHARS = 200
MAX_DETAIL_VALUE_BYTES = 4096


def bounded_target(target: str | None) -> str | None:
    if target is None or len(target) <= MAX_TARGET_CHARS:
        return target
    return target[:MAX_TARGET_CHARS] + "..."


def bounded_detail(detail: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``detail`` with each value over `MAX_DETAIL_VALUE_BYTES` of JSON replaced by a note of its size."""
    kept: dict[str, JsonValue] = {}
    for key, value in detail.items():
        if isinstance(value, (dict, list, str)):
            size = len(json.dumps(value, ensure_ascii=False).encode())
            if size > MAX_DETAIL_VALUE_BYTES:
                value = {
                    "omitted": f"{size} bytes of JSON, over the {MAX_DETAIL_VALUE_BYTES} an audit row keeps"
                }
        kept[key] = value
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


class AuditVerification(BaseModel):
    """The result of checking the chain; ``problem`` is empty when ``ok``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    rows: int
    first_bad_seq: int | None = None
    problem: str = ""
    starts_after: int = 0  # the last pruned row (0: nothing was pruned)


class AuditPruned(BaseModel):
    """What `prune_audit` removed: ``rows`` rows, up to and including row ``through_seq``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int
    through_seq: int


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _chain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256(f"{prev_hash}\n{_canonical(fields)}".encode()).hexdigest()


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
        {**fields, "detail": _canonical(entry.detail), "prev_hash": prev_hash, "hash": digest},
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
        set_meta(db, AUDIT_HEAD_KEY, _canonical({"seq": seq, "hash": digest}))
    return seqs


def prune_audit(db: Database, before_ts: float, actor: str = "cli") -> AuditPruned:
    """Delete the rows made before ``before_ts`` (Unix time), keeping the rest checkable.

    Refuses (ValueError) when the chain does not verify: pruning must not erase
    the evidence of an edit. The prune is appended to the chain as `PRUNE_ACTION`.
    """
    with write_transaction(db):
        report = _verify(db)
        if not report.ok:
            raise ValueError(f"the audit chain is broken at seq {report.first_bad_seq} ({report.problem})")
        last = query_one(
            db, "SELECT seq, hash FROM audit WHERE ts < ? ORDER BY seq DESC LIMIT 1", [before_ts]
        )
        if last is None:
            return AuditPruned(rows=0, through_seq=report.starts_after)
        removed = db.execute("DELETE FROM audit WHERE seq <= ?", [last["seq"]]).rowcount
        set_meta(db, AUDIT_ANCHOR_KEY, _canonical({"seq": last["seq"], "hash": last["hash"]}))
        detail: dict[str, JsonValue] = {"through_seq": last["seq"], "rows": removed, "before_ts": before_ts}
        _append(db, [AuditEntry(actor=actor, action=PRUNE_ACTION, outcome="ok", detail=detail)])
        return AuditPruned(rows=removed, through_seq=last["seq"])


def append_audit(db: Database, entry: AuditEntry) -> int:
    """Append one entry to the chain; returns its seq."""
    return append_many(db, [entry])[0]


def record_entry(
    db: Database, actor: str, action: str, target: str | None, outcome: str = "ok", **detail: JsonValue
) -> int:
    """Put one action on the chain now (in the caller's transaction, if one is open), its target
    and detail cut to the bounds the hub keeps: they may hold what was typed."""
    entry = AuditEntry(
        actor=actor,
        action=action,
        target=bounded_target(target),
        outcome=outcome,
        detail=bounded_detail(detail),
        ts=time.time(),
    )
    return append_audit(db, entry)


def verify_audit(db: Database) -> AuditVerification:
    """Recompute the whole chain in order; reports the first edited, missing or cut row.

    Reads one consistent snapshot, so appends running meanwhile do not look like damage.
    """
    with db.atomic():
        return _verify(db)


def _verify(db: Database) -> AuditVerification:
    anchor_seq, anchor_hash = _read_anchor(db)
    rows, last_seq, last_hash, broken = _walk_chain(db, anchor_seq, anchor_hash)
    if broken is not None:
        return AuditVerification(
            ok=False, rows=rows, first_bad_seq=broken[0], problem=broken[1], starts_after=anchor_seq
        )
    if anchor_seq and not _prune_recorded(db, anchor_seq):
        return AuditVerification(
            ok=False,
            rows=rows,
            first_bad_seq=anchor_seq,
            problem=f"the log starts after row {anchor_seq}, but no prune through that row is on record",
            starts_after=anchor_seq,
        )
    return _check_head(db, rows, last_seq, last_hash).model_copy(update={"starts_after": anchor_seq})


def _read_anchor(db: Database) -> tuple[int, str]:
    """The (seq, hash) the remaining rows chain from: the last pruned row, else genesis."""
    return _read_mark(db, AUDIT_ANCHOR_KEY) or (0, GENESIS_HASH)


def _prune_recorded(db: Database, through_seq: int) -> bool:
    row = query_one(
        db,
        "SELECT 1 AS found FROM audit WHERE action = ? AND json_extract(detail, '$.through_seq') = ? LIMIT 1",
        [PRUNE_ACTION, through_seq],
    )
    return row is not None


def _walk_chain(db: Database, prev_seq: int, prev_hash: str) -> tuple[int, int, str, tuple[int, str] | None]:
    """(good rows, last good seq, last good hash, first problem or None), from the anchor on."""
    rows = 0
    columns = (*_HASHED_FIELDS, "prev_hash", "hash")
    cursor = db.conn.execute(f"SELECT {', '.join(columns)} FROM audit ORDER BY seq")
    try:
        for values in cursor:
            row = dict(zip(columns, values, strict=True))
            problem = _check_row(row, prev_seq, prev_hash)
            if problem is not None:
                return rows, prev_seq, prev_hash, problem
            rows, prev_seq, prev_hash = rows + 1, row["seq"], row["hash"]
    finally:
        cursor.close()
    return rows, prev_seq, prev_hash, None


def _check_row(row: dict[str, Any], prev_seq: int, prev_hash: str) -> tuple[int, str] | None:
    seq = row["seq"]
    if seq != prev_seq + 1:
        return prev_seq + 1, f"row {prev_seq + 1} is missing: row {seq} follows row {prev_seq}"
    if row["prev_hash"] != prev_hash:
        return seq, f"row {seq} does not chain to row {prev_seq}: a row was removed or rewritten"
    edited = (seq, f"row {seq} does not match its hash: it was edited")
    fields = {name: row[name] for name in _HASHED_FIELDS}
    try:
        fields["detail"] = json.loads(row["detail"])
        digest = _chain_hash(prev_hash, fields)
    except (TypeError, ValueError):  # detail no longer JSON (or NULL), or a NaN slipped in
        return edited
    return edited if digest != row["hash"] else None


def _check_head(db: Database, rows: int, last_seq: int, last_hash: str) -> AuditVerification:
    head = _read_mark(db, AUDIT_HEAD_KEY)
    if head is None:
        if rows == 0:
            return AuditVerification(ok=True, rows=0)
        return AuditVerification(
            ok=False, rows=rows, first_bad_seq=None, problem="the recorded chain head is missing"
        )
    head_seq, head_hash = head
    if head_seq == last_seq and head_hash == last_hash:
        return AuditVerification(ok=True, rows=rows)
    if head_seq > last_seq:
        return AuditVerification(
            ok=False,
            rows=rows,
            first_bad_seq=last_seq + 1,
            problem=f"the log was truncated: it ends at row {last_seq} but the head is row {head_seq}",
        )
    return AuditVerification(
        ok=False,
        rows=rows,
        first_bad_seq=last_seq,
        problem=f"the last row {last_seq} does not match the recorded chain head (row {head_seq})",
    )


def query_audit(db: Database, /, **filters: Any) -> list[dict[str, Any]]:
    """The rows of `query_audit_page` (same filters), without whether more matched."""
    rows, _ = query_audit_page(db, **filters)
    return rows


def query_audit_page(
    db: Database,
    *,
    agent: str | None = None,
    actor: str | None = None,
    action_prefix: str | None = None,
    since: float | None = None,
    until: float | None = None,
    contains: str | None = None,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], bool]:
    """Audit rows, newest first, as dicts (``detail`` decoded): the newest ``limit`` matching rows,
    and whether older ones also matched.

    ``agent`` matches ``target`` exactly; ``since`` is inclusive and ``until`` exclusive
    (unix seconds).

    ``contains`` keeps rows whose actor, action, target, outcome or detail contains
    that literal, case-sensitive text; it is applied in the query, before the limit.
    Raises ValueError unless 1 <= limit <= 1000.
    """
    if not 1 <= limit <= MAX_QUERY_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_QUERY_LIMIT}, not {limit}")
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (("target = ?", agent), ("actor = ?", actor), ("ts >= ?", since), ("ts < ?", until)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    if action_prefix:
        clauses.append("substr(action, 1, ?) = ?")
        params += [len(action_prefix), action_prefix]
    if contains:
        clauses.append(_CONTAINS_CLAUSE)
        params += [*[contains] * 4, _json_escaped(contains)]
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    query = f"SELECT {_QUERY_COLUMNS} FROM audit {where} ORDER BY seq DESC LIMIT ?"
    rows = [
        {**row, "detail": json.loads(row["detail"]) if row["detail"] else {}}
        for row in db.query(query, [*params, limit + 1])
    ]
    return rows[:limit], len(rows) > limit


def _json_escaped(text: str) -> str:
    """``text`` as it appears inside a JSON string in the stored ``detail`` (quotes, non-ASCII escaped)."""
    return _canonical(text)[1:-1]
