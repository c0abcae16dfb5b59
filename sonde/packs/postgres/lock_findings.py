"""The postgres runbook's findings of sessions blocked by locks: who waits, on whom, and how long.

Each blocker is told with what it is doing (`blocker_text`), a prepared transaction (PID 0 in
``pg_blocking_pids``) by its gid; the count, and the longest wait, are judged against the runbook's `THRESHOLDS`
(sonde.packs.postgres.runbook), which it is handed.
"""

from __future__ import annotations

from collections.abc import Mapping

from sonde.packs.postgres.locks import PREPARED_PID
from sonde.packs.runbook import Finding, Reading, Threshold, human_seconds, worse

BLOCKERS_SHOWN = 10


def blocker_text(blocker: Reading) -> str:
    """A blocking session: its state and for how long, its transaction's age, who runs it."""
    state = blocker.get("state")
    if state is None:
        doing = "state hidden"
    elif blocker.get("idle_s") is not None:
        doing = f"{state} for {human_seconds(blocker['idle_s'])}"
    else:
        doing = f"{state}, its statement running {human_seconds(blocker.get('duration_s'))}"
    if blocker.get("transaction_s") is not None:
        doing += f", transaction open {human_seconds(blocker['transaction_s'])}"
    return (
        f"PID {blocker['pid']} ({doing}; user {blocker.get('user')}, application "
        f"'{blocker.get('application_name') or ''}')"
    )


def prepared_text(reading: Reading) -> str:
    """The prepared transactions that block (PID 0 in pg_blocking_pids), or all of them when none is told."""
    prepared = reading.get("prepared_transactions") or []
    blocking = [row for row in prepared if row.get("blocking")] or prepared
    if not blocking:
        return "a prepared transaction (PID 0: no session holds it; see pg_prepared_xacts)"
    shown = "; ".join(
        f"prepared transaction '{row['gid']}' (owner {row['owner']}, database {row['database']}, "
        f"prepared at {row['prepared_at']}, {human_seconds(row.get('age_s'))} ago)"
        for row in blocking[:BLOCKERS_SHOWN]
    )
    return f"{shown}: no session holds it; COMMIT PREPARED or ROLLBACK PREPARED '<gid>' ends it"


def blocked_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    blocked = reading.get("blocked", [])
    blocker_pids = sorted({pid for row in blocked for pid in row["blocking_pids"]})
    known = {row["pid"]: row for row in reading.get("blockers", [])}
    waited_on = [
        blocker_text(known[pid]) if pid in known else f"PID {pid} (ended since)"
        for pid in blocker_pids
        if pid != PREPARED_PID
    ][:BLOCKERS_SHOWN]
    if PREPARED_PID in blocker_pids:
        waited_on.append(prepared_text(reading))
    hidden = (
        " "
        + (
            reading.get("visibility")
            or "Some of these sessions are other users', whose queries and states are hidden from the "
            "agent's login: grant it pg_monitor."
        )
        if reading.get("hidden_sessions")
        else ""
    )
    waits = [row["waiting_s"] for row in blocked if row.get("waiting_s") is not None]
    longest = max(waits, default=None)
    severity = worse(
        thresholds["blocked_queries"].severity(len(blocked)), thresholds["blocked_wait_s"].severity(longest)
    )
    if severity is None:
        return []
    count = len(blocked)
    title = (
        f"{count} PostgreSQL sessions are blocked by locks"
        if count > 1
        else "1 PostgreSQL session is blocked by a lock"
    )
    if longest is not None:
        title += (
            f", the longest for {human_seconds(longest)}" if count > 1 else f" for {human_seconds(longest)}"
        )
    return [
        Finding(
            severity,
            title,
            f"Blocked PIDs {[row['pid'] for row in blocked][:10]} wait on {'; '.join(waited_on)}.{hidden}",
            "postgres.locks.blocked",
        )
    ]
