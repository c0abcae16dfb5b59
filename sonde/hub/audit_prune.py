"""Pruning the audit log beside a running hub: check first, then delete in short writes.

Every call a hub serves waits on its audit write, which gives up after the busy timeout
(`BUSY_TIMEOUT_MS`), so a prune never holds the write lock for long:

1. The chain is checked in a read transaction (in WAL mode one consistent snapshot, while
   the hub goes on appending), and the rows to cut are chosen there: the run from the start
   of the log up to the first row made at or after the cutoff. A row from a wrong clock
   may make a newer row come before older ones; the cut stops at the newer row.
2. One short write checks the rows appended since the snapshot, records the last cut row as
   the chain's anchor and appends the prune entry. From here the log verifies as pruned:
   rows at or before the anchor are ones waiting to be deleted.
3. Those rows are deleted oldest first, ``batch_rows`` per write. A crash between two
   leaves a log that verifies; the next prune finishes the deletion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue
from sqlite_utils import Database

from sonde.hub.audit import (
    PRUNE_ACTION,
    AuditEntry,
    append_many,
    check_chain,
    head_problem,
    read_anchor,
    set_anchor,
    walk_chain,
)
from sonde.hub.db import give_back_free_pages, query_one, write_transaction
from sonde.hub.utc_times import utc_text

MIN_PRUNE_AGE_S = 86400.0  # a prune keeps at least a day: recent rows are what an audit is for
PRUNE_BATCH_ROWS = 5000  # rows deleted per write: tens of milliseconds of the write lock

PrunePhase = Literal["check", "delete"]
PruneProgress = Callable[[PrunePhase, int, int], None]  # (phase, rows done, rows in all)


class AuditPruned(BaseModel):
    """What `prune_audit` did: cut ``rows`` rows, through row ``through_seq`` (the anchor)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int
    through_seq: int
    finished: int = 0  # rows an interrupted prune had cut but not deleted, deleted now
    older_kept: int = 0  # rows older than the cutoff kept: a newer row comes before them
    newer_seq: int | None = None  # that first row made at or after the cutoff
    newer_ts: float | None = None


def kept_back_text(pruned: AuditPruned) -> str:
    """Why rows older than the cutoff were kept (``pruned.older_kept`` > 0): the row after which
    they come, and that a prune cuts only from the start of the log."""
    made = utc_text(pruned.newer_ts) if pruned.newer_ts is not None else "?"
    kept = (
        "1 row older than that was kept: it comes"
        if pruned.older_kept == 1
        else f"{pruned.older_kept} rows older than that were kept: they come"
    )
    return (
        f"{kept} after row {pruned.newer_seq}, made at {made}, and a prune cuts only from the start "
        "of the log (a wrong clock can put rows out of order)"
    )


@dataclass(frozen=True)
class _Plan:
    """What the snapshot showed: the anchor, the last row checked, and where the cut ends."""

    anchor_seq: int
    last_seq: int
    last_hash: str
    through_seq: int
    older_kept: int
    newer_seq: int | None
    newer_ts: float | None


def prune_audit(
    db: Database,
    before_ts: float,
    actor: str = "cli",
    *,
    batch_rows: int = PRUNE_BATCH_ROWS,
    progress: PruneProgress | None = None,
) -> AuditPruned:
    """Delete the rows at the start of the log made before ``before_ts`` (Unix time), keeping
    the rest checkable, in short writes a running hub's own go on between.

    Rows older than the cutoff that come after a newer one are kept (`AuditPruned.older_kept`).
    Refuses (ValueError) when the chain does not verify: pruning must not erase the
    evidence of an edit. The prune is appended to the chain as `PRUNE_ACTION`.
    ``progress`` is told (phase, rows done, rows in all) every ``batch_rows`` rows.
    """
    plan = _plan(db, before_ts, batch_rows, progress)
    cut = plan.through_seq - plan.anchor_seq
    if cut:
        _record_prune(db, plan, actor, before_ts)
    deleted = _delete_through(db, plan.through_seq, batch_rows, progress)
    return AuditPruned(
        rows=cut,
        through_seq=plan.through_seq,
        finished=max(deleted - cut, 0),
        older_kept=plan.older_kept,
        newer_seq=plan.newer_seq,
        newer_ts=plan.newer_ts,
    )


def prune_and_give_back(
    db: Database, before_ts: float, actor: str = "cli", *, progress: PruneProgress | None = None
) -> tuple[AuditPruned, int | None]:
    """`prune_audit`, then the freed pages back to the file system (`give_back_free_pages`):
    what was pruned, and the bytes given back (None for a file made before Sonde could)."""
    pruned = prune_audit(db, before_ts, actor, progress=progress)
    given_back = give_back_free_pages(db) if pruned.rows or pruned.finished else 0
    return pruned, given_back


def _plan(db: Database, before_ts: float, batch_rows: int, progress: PruneProgress | None) -> _Plan:
    """Check the chain and choose the cut, in one read snapshot (no write lock is held)."""
    with db.atomic():
        total = int(db.execute("SELECT count(*) FROM audit").fetchone()[0])
        told = None if progress is None else lambda done: progress("check", done, total)
        report, walk = check_chain(db, told, batch_rows)
        if not report.ok:
            raise ValueError(f"the audit chain is broken at seq {report.first_bad_seq} ({report.problem})")
        anchor_seq = report.starts_after
        newer = query_one(
            db,
            "SELECT seq, ts FROM audit WHERE seq = (SELECT min(seq) FROM audit WHERE seq > ? AND ts >= ?)",
            [anchor_seq, before_ts],
        )
        through_seq = walk.last_seq if newer is None else newer["seq"] - 1
        older = db.execute(
            "SELECT count(*) FROM audit WHERE seq > ? AND ts < ?", [through_seq, before_ts]
        ).fetchone()[0]
        return _Plan(
            anchor_seq=anchor_seq,
            last_seq=walk.last_seq,
            last_hash=walk.last_hash,
            through_seq=through_seq,
            older_kept=int(older),
            newer_seq=None if newer is None else newer["seq"],
            newer_ts=None if newer is None else newer["ts"],
        )


def _record_prune(db: Database, plan: _Plan, actor: str, before_ts: float) -> None:
    """Move the anchor to the last cut row and put the prune on the chain, in one short write."""
    with write_transaction(db):
        if read_anchor(db)[0] != plan.anchor_seq:
            raise ValueError("another prune ran meanwhile; run this one again")
        later = walk_chain(db, plan.last_seq, plan.last_hash, after_seq=plan.last_seq)
        problem = later.problem or head_problem(db, later)
        if problem is not None:  # rows appended since the check, or the head, do not verify
            raise ValueError(f"the audit chain is broken at seq {problem[0]} ({problem[1]})")
        last_cut = query_one(db, "SELECT hash FROM audit WHERE seq = ?", [plan.through_seq])
        if last_cut is None:  # it was there in the snapshot
            raise ValueError(f"row {plan.through_seq} was deleted while the chain was checked")
        set_anchor(db, plan.through_seq, last_cut["hash"])
        rows = plan.through_seq - plan.anchor_seq
        detail: dict[str, JsonValue] = {"through_seq": plan.through_seq, "rows": rows, "before_ts": before_ts}
        append_many(db, [AuditEntry(actor=actor, action=PRUNE_ACTION, outcome="ok", detail=detail)])


def _delete_through(db: Database, through_seq: int, batch_rows: int, progress: PruneProgress | None) -> int:
    """Delete the rows up to ``through_seq``, oldest first, ``batch_rows`` per write; how many went."""
    first = query_one(db, "SELECT min(seq) AS seq FROM audit")
    low = through_seq if first is None or first["seq"] is None else first["seq"] - 1
    total, deleted = max(through_seq - low, 0), 0
    while low < through_seq:
        high = min(low + batch_rows, through_seq)
        with write_transaction(db):
            deleted += db.execute("DELETE FROM audit WHERE seq > ? AND seq <= ?", [low, high]).rowcount
        low = high
        if progress is not None:
            progress("delete", deleted, total)
    return deleted
